"""A fork server for the bundled simulator's stdio MCP sessions.

A stdio session is a process, and a fresh one spends about a second importing the MCP SDK
before it answers ``initialize``; the default suite run opens half a dozen. The fork server
imports everything once and forks a ready server onto the pipes of each session: the MCP client
still starts a process of its own (``forkserver_launch.py``, standard library only), which hands
its stdin, stdout and stderr over and lives exactly as long as the forked server, so the client
sees the same process, pipes, exit and signals as with ``knowledge-sim mcp``.

POSIX only (file descriptors are passed over a Unix socket); ``KNOWLEDGE_SIM_FORKSERVER=0``, or
a platform without it, gives every session a fresh ``python -m simulator.cli mcp`` process.
``KNOWLEDGE_SIM_FORKSERVER=PATH`` (an absolute path) shares the fork server that listens there
(``python -m simulator.forkserver PATH``, alive until its stdin closes) among every run given it:
a harness that starts many runs of this same installation imports the SDK once for all of them.
A session of such a run gets the run's own argv, environment and directory, as with its own
server; where nothing of this user's listens at PATH the run starts its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENABLED_ENV = "KNOWLEDGE_SIM_FORKSERVER"
LAUNCHER = str(Path(__file__).with_name("forkserver_launch.py"))
SOCKET_NAME = "fork.sock"
_READY_SECONDS = 5.0
_REQUEST_SECONDS = 5.0
"""How long a launcher has to send its descriptors and request once connected (a launcher that
takes longer is told nothing and starts the plain server)."""
_REQUEST_BYTES = 16 * 1024 * 1024
"""The longest request: a session's environment, as JSON."""


def stdio_command(path: str = "agent", **options: Any) -> tuple[list[str], dict[str, str]]:
    """``simulator.mcp.server.stdio_command``, started through this process's fork server when
    there is one (the ``sim-mcp-stdio`` entry point of the suite)."""
    from simulator.mcp.server import stdio_command as plain

    argv, env = plain(path, **options)
    server = _shared.get()
    if server is None:
        return argv, env
    module_at = argv.index("simulator.cli")
    return [sys.executable, "-I", "-S", LAUNCHER, server.socket_path, *argv[module_at + 1 :]], env


class ForkServer:
    """One fork server process, alive as long as this process (it ends when its stdin closes)."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="knowledge-sim-")
        self.socket_path = os.path.join(self.directory, SOCKET_NAME)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "simulator.forkserver", self.socket_path], stdin=subprocess.PIPE
        )

    def ready(self, clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep) -> bool:
        """Whether it listens (it binds before its imports, so this takes some 50 ms)."""
        deadline = clock() + _READY_SECONDS
        while self.process.poll() is None and clock() < deadline:
            if os.path.exists(self.socket_path):
                return True
            pause(0.01)
        return False

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


class Attached:
    """A fork server another process runs (``KNOWLEDGE_SIM_FORKSERVER=PATH``): this run only
    connects to it, and leaves starting and ending it to its owner."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path


class _Shared:
    """The process's one fork server, started (or attached to) at the first stdio command asked for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: ForkServer | Attached | None = None
        self.tried = False

    def get(self) -> ForkServer | Attached | None:
        with self.lock:
            if not self.tried:
                self.tried = True
                self.server = self._start()
            return self.server

    @staticmethod
    def _start() -> ForkServer | Attached | None:
        setting = os.environ.get(ENABLED_ENV, "1")
        if setting == "0" or os.name != "posix" or not hasattr(socket, "send_fds"):
            return None
        if os.path.isabs(setting) and _listening(setting):
            return Attached(setting)
        server = ForkServer()
        if not server.ready():
            server.close()
            return None
        atexit.register(server.close)
        return server


def _listening(path: str) -> bool:
    """Whether a fork server of this user's accepts connections at ``path`` (a socket left by one
    that ended does not). A session sends its server its whole environment, credentials included,
    so a socket someone else made (another user's, in a shared folder) is never used."""
    try:
        found = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


_shared = _Shared()


# ----------------------------------------------------------------- the fork server process
def serve(socket_path: str) -> int:
    """Listen first (the starter waits for the socket), import the stdio servers, then fork one
    per connection until stdin closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o077)  # the socket is this user's alone: whoever connects gets a session as this user
    try:
        listener.bind(socket_path)
    finally:
        os.umask(mask)
    listener.listen(64)
    # A Ctrl-C is for the run that started this server: it ends when that run closes its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import mcp.server.stdio  # noqa: F401  (what a session imports, once for all of them)

    import simulator.miniatures.mcp  # noqa: F401
    from simulator import cli

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(0, selectors.EVENT_READ, "parent")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket] = {}

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                with contextlib.suppress(KeyError):  # a killed launcher's connection is unregistered already
                    selector.unregister(conn)
                conn.close()

    try:
        while True:
            for key, _events in selector.select():
                if key.data == "accept":
                    conn, _ = listener.accept()
                    pid = _fork(conn, lambda: [listener, *children.values()], cli.main)
                    if pid is None:
                        conn.close()
                    else:
                        children[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                elif key.data == "parent":
                    if not os.read(0, 512):
                        return 0
                elif key.data == "child":
                    os.read(wake_read, 4096)
                    reap()
                else:  # its launcher is gone (killed): so is the session's client
                    selector.unregister(key.fileobj)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data, signal.SIGKILL)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(socket_path)


def same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket is this user's (Linux tells;
    elsewhere the socket's folder, private or checked, is what holds)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid == os.getuid()


def _request_line(conn: socket.socket, deadline: float) -> bytes:
    """The launcher's request, one line of JSON: read within the deadline as a whole (a peer that
    sends nothing, or a byte at a time, must not stall every other session) and bounded in size."""
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or len(data) > _REQUEST_BYTES:
            raise TimeoutError("no whole request in time")
        conn.settimeout(remaining)
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the launcher went away")
        data += chunk
    return data.partition(b"\n")[0]


def _fork(
    conn: socket.socket, inherited: Callable[[], list[socket.socket]], run: Callable[[list[str]], int]
) -> int | None:
    """Fork a stdio server onto the three descriptors the launcher sent; its pid, sent back to
    the launcher too (``None`` if the launcher broke off)."""
    if not same_user(conn):  # a peer of another user's never gets a session as this one
        return None
    fds: list[int] = []
    deadline = time.monotonic() + _REQUEST_SECONDS
    try:
        conn.settimeout(_REQUEST_SECONDS)  # a peer that sends nothing must not stall every other session
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        request = json.loads(_request_line(conn, deadline))
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None
    conn.settimeout(None)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:  # the session's server: never returns
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            ignored = set(request.get("ignored", ())) if isinstance(request, dict) else set()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # ignored by the launcher: ignored by a plain server too
                signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else signal.SIG_DFL)
            for other in inherited():
                other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            code = run(list(request["argv"]))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(f"{pid}\n".encode())
    return pid


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1]))
