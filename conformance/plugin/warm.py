"""Warm workers for ``--concurrency``: one server per run imports the libraries every pytest-xdist
worker needs, once, and forks a worker from that state for each process xdist starts.

Why: each worker is a fresh interpreter that spends about half a CPU second importing pytest,
its plugins, Hypothesis, schemathesis and the HTTP stack before its first test. Eight of them on a
two-core machine start some three seconds after the run did, with a Core near or far. Forked from
the server, each pays only for the suite's own modules and its collection.

The server imports only other projects' modules, never this package's: the suite's modules keep
module-level state (the scrubber's secrets, the rules' registry) that each worker builds for
itself. It is used only when pytest does not rewrite asserts (``knowledge-conformance run``
passes ``--assert=plain``; pytest would otherwise warn that the plugins' modules were imported
before it could rewrite them), on POSIX with descriptor passing, and not when
``KC_WARM_WORKERS=0``. xdist still starts a process per worker (``warm_launch.py``); when the
server cannot fork one, that process becomes the plain interpreter xdist would have started.

This module is also the server's program: the server runs it by path, so that importing it
imports nothing of this package (the standard library only, at module level).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

ENABLED_ENV = "KC_WARM_WORKERS"
LAUNCHER = str(Path(__file__).with_name("warm_launch.py"))
SOCKET_NAME = "workers.sock"
READY_SECONDS = 2.0
INHERITED: dict[str, Any] = {"SIGINT": signal.default_int_handler, "SIGTERM": signal.SIG_DFL, "SIGHUP": signal.SIG_DFL}
"""The signals whose handling a worker takes from the process that starts it: ignored there
(``ignored`` in the launcher's request; a background job of a script ignores SIGINT), ignored
in the worker; else the interpreter's own."""

PRELOAD = (
    "pytest",
    "xdist.plugin",
    "xdist.remote",
    "xdist.looponfail",
    "execnet",
    "hypothesis",
    "hypothesis.stateful",
    "hypothesis.strategies",
    "_hypothesis_pytestplugin",
    "schemathesis",
    "schemathesis.pytest.plugin",
    "schemathesis.specs.openapi.checks",
    "pytest_benchmark.plugin",
    "anyio.pytest_plugin",
    "platformdirs.pytest_plugin",
    "pytest_locust.plugin",
    "httpx",
    "httpcore",
    "jsonschema",
    "referencing",
    "yaml",
    "orjson",
    "ahocorasick_rs",
    "concurrent.futures",
)
"""What a worker imports before its first test, apart from this package: pytest's own plugins
are added from pytest's list. A name that fails to import is left to the worker."""

MCP_PRELOAD = (
    "anyio",
    "anyio.from_thread",
    "httpx2",
    "pydantic",
    "mcp_types",
    "mcp",
    "mcp.client.stdio",
    "mcp.client.streamable_http",
    "mcp.shared.exceptions",
    "mcp.shared.message",
)
"""The MCP SDK's client, for a run that opens MCP sessions: every worker imports it at its first
MCP test, some half a CPU second each (twelve workers on two cores: three seconds of wall time).
Only for such runs, so that one with no MCP server still imports no MCP SDK anywhere."""

BUNDLED_PRELOAD = (
    "starlette.applications",
    "starlette.routing",
    "starlette.responses",
    "tantivy",
    "jsonschema_rs",
    "sqlite3",
    "mcp.server",
    "mcp.server.streamable_http_manager",
    "mcp.server.transport_security",
)
"""The bundled simulator's libraries (not the simulator: it is this distribution's, with state of
its own), for a run against it, where each worker serves one in its own process."""


# ------------------------------------------------------------------ the run's side
class WarmServer:
    """The run's server process: it ends when its stdin closes (:meth:`close`, or the run's end)."""

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.directory = tempfile.mkdtemp(prefix="kc-workers-")
        self.socket_path = os.path.join(self.directory, SOCKET_NAME)
        program = "import runpy, sys; runpy.run_path(sys.argv[1])['serve'](*sys.argv[2:])"
        self.process = subprocess.Popen(
            [sys.executable, "-c", program, __file__, self.socket_path, *extra], stdin=subprocess.PIPE
        )

    def listening(self) -> bool:
        """Whether it took its socket (it does before its imports: some 30 ms)."""
        deadline = time.monotonic() + READY_SECONDS
        while self.process.poll() is None and time.monotonic() < deadline:
            if os.path.exists(self.socket_path):
                return True
            time.sleep(0.005)
        return False

    def python(self) -> str:
        """The ``python`` of an execnet ``popen`` spec that starts a worker through this server."""
        return shlex.join([sys.executable, "-I", "-S", LAUNCHER, self.socket_path])

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


SOCKET_PATH_LONGEST = 100
"""Bytes of a Unix socket's path that every POSIX system binds (Linux takes 107, macOS 103)."""


def _spec_safe(server: WarmServer) -> bool:
    """Whether the launcher's command line survives execnet's spec (which splits on ``//``, so a
    ``TMPDIR=//tmp`` would cut it) and its socket path can be bound; else plain workers."""
    return "//" not in server.python() and len(os.fsencode(server.socket_path)) <= SOCKET_PATH_LONGEST


def forkable() -> bool:
    """Whether processes may be forked from a server here: not turned off (``KC_WARM_WORKERS=0``),
    POSIX with descriptor passing, and the launcher a file (not in a zip archive: it is run by path)."""
    return (
        os.environ.get(ENABLED_ENV, "1") != "0"
        and os.name == "posix"
        and hasattr(socket, "send_fds")
        and os.path.isfile(LAUNCHER)
    )


def wanted(config: pytest.Config) -> bool:
    """Whether this run's workers may be forked (see the module's docstring)."""
    return forkable() and getattr(config.option, "assertmode", "rewrite") == "plain"


def start(config: pytest.Config, extra: tuple[str, ...] = ()) -> WarmServer | None:
    """The run's server, closed when the run ends; None where it cannot be used or did not start.
    ``extra``: the modules this run's workers will import besides :data:`PRELOAD`."""
    if not wanted(config):
        return None
    server = WarmServer(extra)
    if not _spec_safe(server) or not server.listening():
        server.close()
        return None
    config.add_cleanup(server.close)
    return server


# ------------------------------------------------------------------ the server's side
def preload(extra: Sequence[str] = ()) -> None:
    """Import what a worker would (quietly: a module's import-time warning is the worker's to show)."""
    import _pytest.config

    names = [*PRELOAD, *(f"_pytest.{name}" for name in _pytest.config.default_plugins), *extra]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def serve(socket_path: str, *extra: str) -> int:
    """Listen first (the run waits for the socket), import, then fork a worker per connection
    until stdin closes; every worker still running then is ended with it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(socket_path)
    except OSError:
        return 1  # the run sees no socket and starts plain workers; no traceback on its terminal
    listener.listen(64)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the run and its workers, not for this server
    signal.signal(signal.SIGTERM, _ended)  # as when the run closes stdin: its workers end with it
    preload(extra)
    # What the imports built lives as long as every worker: frozen, a worker's collections (a full
    # one after collection, conformance.plugin.fixtures) skip it and leave its pages shared with this
    # server, as the gc module advises before forking. A few-requirement run took 0.8 CPU s, not 0.9.
    gc.collect()
    gc.freeze()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(0, selectors.EVENT_READ, "run")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    workers: dict[int, socket.socket] = {}
    try:
        while True:
            for key, _events in selector.select():
                if key.data == "accept":
                    _accept(listener, workers, selector)
                elif key.data == "run":
                    if not os.read(0, 512):
                        return 0
                elif key.data == "child":
                    os.read(wake_read, 4096)
                    _reap(workers, selector)
                else:  # its launcher is gone (killed): so is the worker
                    selector.unregister(key.fileobj)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data, signal.SIGKILL)
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.unlink(socket_path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(socket_path))  # the run removes it too, unless it was killed


def _ended(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _accept(listener: socket.socket, workers: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """One launcher's connection: a worker forked for it, or (anything failed: out of processes,
    of descriptors, a request that is not one) a plain worker; never the end of the others."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    try:
        pid = _fork(conn, [listener, *workers.values()])
    except Exception as exc:  # whatever it was, this launcher starts a plain worker
        with contextlib.suppress(OSError):
            conn.sendall(f"no: {type(exc).__name__}\n".encode())
        pid = None
    if pid is None:
        conn.close()
        return
    workers[pid] = conn
    selector.register(conn, selectors.EVENT_READ, pid)


def _reap(workers: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Send each ended worker's exit status to its launcher."""
    while workers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = workers.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(conn)
            conn.close()


def _python_args(args: list[str]) -> tuple[set[str], str, list[str]] | None:
    """``python [-u] [-B] -c CODE ARGS...`` as execnet starts a worker: its flags, code and
    arguments (None for anything else, which a fresh interpreter runs instead)."""
    if "-c" not in args:
        return None
    at = args.index("-c")
    flags = set(args[:at])
    if not flags <= {"-u", "-B"} or at + 1 >= len(args):
        return None
    return flags, args[at + 1], args[at + 2 :]


def _fork(conn: socket.socket, inherited: list[socket.socket]) -> int | None:
    """Fork a worker onto the three descriptors the launcher sent; its pid, sent back to the
    launcher too (None, after telling the launcher why, when it is to start a plain one)."""
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        with conn.makefile("rb") as lines:
            request = json.loads(lines.readline())
    except (OSError, ValueError):
        return None
    well_formed = (
        isinstance(request, dict)
        and isinstance(request.get("args"), list)
        and all(isinstance(arg, str) for arg in request["args"])
        and isinstance(request.get("env"), dict)
        and isinstance(request.get("cwd"), str)
    )
    parsed = _python_args(request["args"]) if well_formed else None
    why = "not a worker's command line" if parsed is None else None
    if why is None and threading.active_count() > 1:
        why = "the server runs threads: a fork would copy their locks"
    if len(fds) != 3 or why is not None:
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(f"no: {why or 'three descriptors expected'}\n".encode())
        return None
    assert parsed is not None
    try:
        pid = os.fork()
    except OSError as exc:  # out of processes or memory: the launcher starts a plain worker
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(f"no: fork failed ({exc.strerror})\n".encode())
        return None
    if pid == 0:
        _become_worker(conn, inherited, fds, request, *parsed)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(f"{pid}\n".encode())
    return pid


def _become_worker(
    conn: socket.socket,
    inherited: list[socket.socket],
    fds: list[int],
    request: dict[str, Any],
    flags: set[str],
    code: str,
    argv: list[str],
) -> None:
    """In the forked child: the interpreter ``python FLAGS -c CODE ARGV`` would have been, on the
    launcher's pipes, in its directory and environment (never returns)."""
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ignored = set(request.get("ignored", ()))
        for name, handler in INHERITED.items():  # as the launcher found them: a plain worker inherits them
            signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else handler)
        for other in [*inherited, conn]:
            other.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        hypothesis_configuration = sys.modules.get("hypothesis.configuration")
        if hypothesis_configuration is not None:  # its default folder is the directory it was imported in
            setattr(hypothesis_configuration, "__hypothesis_home_directory_default", Path.cwd() / ".hypothesis")
        sys.dont_write_bytecode = "-B" in flags or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        unbuffered = "-u" in flags or bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, encoding=sys.stdin.encoding, errors=sys.stdin.errors, closefd=False)
        sys.stdout = _writer(1, sys.stdout, unbuffered=unbuffered)
        sys.stderr = _writer(2, sys.stderr, unbuffered=True)
        sys.argv = ["-c", *argv]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(code, "<string>", "exec"), main.__dict__)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit_as_an_interpreter(status)


def _exit_as_an_interpreter(status: int) -> None:
    """What an interpreter does when its program ends (its other threads joined, ``atexit``
    and ``weakref.finalize`` run, its streams flushed), then the end of this process alone: the
    server's frames below are not the worker's to unwind."""
    for finalize in (getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)):
        if finalize is not None:
            with contextlib.suppress(BaseException):
                finalize()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def _writer(fd: int, like: Any, *, unbuffered: bool) -> io.TextIOWrapper:
    """A text stream on ``fd`` as the interpreter makes one (``-u``: every write goes out at once)."""
    raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
    return io.TextIOWrapper(raw, encoding=like.encoding, errors=like.errors, write_through=unbuffered)
