"""The process an MCP client starts for a bundled stdio session: it hands its own stdin, stdout
and stderr to the simulator's fork server, which forks an already-imported stdio server onto
them, and it lives exactly as long as that server, forwarding the signals it gets.

Run by path with ``python -I -S`` (the standard library only, no site-packages): starting it
costs some 20 ms, where a fresh stdio server spends about a second importing the MCP SDK. If the
fork server is gone, it becomes the plain stdio server (``python -m simulator.cli ...``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _same_user(server: socket.socket) -> bool:
    """Whether the process listening is this user's (Linux tells; elsewhere the socket's private
    folder, or the owner check of a shared one, ``simulator.forkserver``, is what holds)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    creds = server.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid == os.getuid()


def main(argv: list[str]) -> int:
    path, cli_args = argv[0], argv[1:]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ignored = [signum for signum in FORWARDED if signal.getsignal(signum) == signal.SIG_IGN]
    try:
        server.connect(path)
        if not _same_user(server):  # it would get this session's pipes and environment, credentials included
            raise ConnectionRefusedError(path)
        socket.send_fds(server, [b"\0"], [0, 1, 2])
        names = [signal.Signals(signum).name for signum in ignored]
        request = {"argv": cli_args, "env": dict(os.environ), "cwd": os.getcwd(), "ignored": names}
        server.sendall(json.dumps(request).encode() + b"\n")
        answers = server.makefile("rb")
        first = answers.readline()
    except OSError:
        first = b""
    if not first.strip().isdigit():  # no fork server, or it forked nothing: this process is the plain server
        server.close()
        os.execv(sys.executable, [sys.executable, "-m", "simulator.cli", *cli_args])
    pid = int(first)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        if signum not in ignored:  # one this process ignores (a background job's SIGINT) the server ignores too
            signal.signal(signum, forward)
    status = answers.readline()
    code = int(status) if status else 0  # no status: the fork server ended first (its run is over)
    return 128 - code if code < 0 else code  # a server killed by signal N ends as a shell says it


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
