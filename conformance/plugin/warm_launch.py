"""The process pytest-xdist starts as a worker of a ``--concurrency`` run: it hands its stdin,
stdout and stderr to the run's warm-worker server (:mod:`conformance.plugin.warm`), which forks
an interpreter that has already imported pytest, Hypothesis, schemathesis and the HTTP stack onto
them. It lives exactly as long as that worker and forwards the signals that end it, so xdist sees
the same process, pipes, exit and signals as with a fresh ``python``.

Run by path with ``python -I -S`` (the standard library only, nothing of site-packages): starting
it costs some 20 ms, where a fresh worker spends about half a second importing. Whenever the
server cannot fork this worker, it becomes the plain ``python`` that xdist would have started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import BinaryIO

INHERITED = ("SIGINT", "SIGTERM", "SIGHUP")
"""Signals whose handling, when this process ignores them, the worker ignores too (as a plain
worker would have inherited it): the names ``conformance.plugin.warm.INHERITED`` knows."""
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
"""Passed on to the worker. Not SIGINT: a Ctrl-C reaches the worker itself (the launcher, the
server and the workers are in the run's process group), as it reaches a plain worker; passed on
too, it would interrupt the worker twice."""


def _forked(path: str, python_args: list[str]) -> tuple[int, BinaryIO] | None:
    """The pid of the worker the server forked onto this process's pipes, and the connection on
    which its exit status will come (None: no server, or it would not fork)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.connect(path)
        socket.send_fds(server, [b"\0"], [0, 1, 2])
        ignored = [name for name in INHERITED if signal.getsignal(getattr(signal, name)) == signal.SIG_IGN]
        request = {"args": python_args, "env": dict(os.environ), "cwd": os.getcwd(), "ignored": ignored}
        server.sendall(json.dumps(request).encode() + b"\n")
        answers = server.makefile("rb")
        first = answers.readline()
    except OSError:
        first = b""
    if not first.strip().isdigit():
        server.close()
        return None
    return int(first), answers


def main(argv: list[str]) -> int:
    path, python_args = argv[0], argv[1:]
    forked = _forked(path, python_args)
    if forked is None:
        os.execv(sys.executable, [sys.executable, *python_args])  # the plain worker; never returns
    pid, answers = forked

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status = answers.readline()
    code = int(status) if status.strip().lstrip(b"-").isdigit() else 1  # none: the server ended first
    return 128 - code if code < 0 else code  # a worker killed by signal N ends as a shell says it


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
