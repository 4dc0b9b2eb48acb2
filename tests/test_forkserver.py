"""The stdio fork server of the bundled simulator: a session it forks must look, to the MCP
client, like a ``knowledge-sim mcp`` process of its own (tools, environment, exit, signals),
and nothing it forks may outlive the process that asked for it."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.mcp.records import Endpoint
from conformance.mcp.session import connect
from knowledge_schemas.mcp import JOB_TOOLS
from simulator import forkserver

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file descriptors pass over Unix sockets")

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.fixture(scope="module")
def server() -> Iterator[forkserver.ForkServer]:
    started = forkserver.ForkServer()
    assert started.ready()
    yield started
    started.close()


def _launch(
    server: forkserver.ForkServer, *cli_args: str, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", forkserver.LAUNCHER, server.socket_path, *cli_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        **kw,
    )


def _children(server: forkserver.ForkServer) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False)
    return {int(pid) for pid in found.stdout.split()}


def _initialize(process: subprocess.Popen[bytes]) -> dict[str, object]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    process.stdin.flush()
    answer: dict[str, object] = json.loads(process.stdout.readline())
    return answer


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_the_entry_point_command_runs_a_forked_job_session() -> None:
    """The command the suite gets starts the launcher, and the session behind it is the job path."""
    argv, env = forkserver.stdio_command("jobs", job_seconds=0.2)
    assert argv[:4] == [sys.executable, "-I", "-S", forkserver.LAUNCHER]
    with connect(Endpoint("stdio", argv=tuple(argv), env=tuple(env.items()))) as session:
        names = sorted(t.name for t in session.tools())
        submitted = session.call("submit_governed_job", {"request_id": "r1", "input": "hello"})
    assert names == sorted(JOB_TOOLS)
    assert submitted.structured["status"] == "pending"


def test_a_session_ends_with_its_stdin_and_the_launcher_with_it(server: forkserver.ForkServer) -> None:
    process = _launch(server, "mcp", "--path", "jobs")
    answer = _initialize(process)
    assert answer["id"] == 1 and "result" in answer
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=10) == 0


def test_the_forked_server_gets_the_launchers_environment_and_exit_status(server: forkserver.ForkServer) -> None:
    """An unknown quirk makes ``knowledge-sim mcp`` exit 2 with a message: so must the launcher."""
    process = _launch(server, "mcp", "--quirk", "no_such_quirk")
    _, err = process.communicate(timeout=10)
    assert process.returncode == 2
    assert b"no_such_quirk" in err


def test_a_signal_to_the_launcher_reaches_the_forked_server(server: forkserver.ForkServer) -> None:
    process = _launch(server, "mcp", "--path", "jobs")
    _initialize(process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 128 + signal.SIGTERM


def test_a_signal_the_launcher_ignores_the_forked_server_ignores(server: forkserver.ForkServer) -> None:
    """A background job of a script ignores SIGINT, and a plain server started there inherits that:
    a Ctrl-C sent to the job's process group must not end a forked session either."""
    before = _children(server)
    process = _launch(server, "mcp", "--path", "jobs", preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    _initialize(process)
    forked = _children(server) - before
    assert len(forked) == 1
    os.kill(forked.pop(), signal.SIGINT)
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert process.poll() is None and _initialize(process)["id"] == 1  # still there, still answering
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=10) == 0


def test_a_killed_launchers_server_is_killed_too(server: forkserver.ForkServer) -> None:
    """A launcher killed outright can forward nothing: the fork server kills its session."""
    process = _launch(server, "mcp", "--path", "jobs")
    _initialize(process)
    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert children, "the forked session is a child of the fork server"
    process.kill()
    process.wait(timeout=10)
    assert all(_gone(int(pid)) for pid in children)
    after = _launch(server, "mcp", "--path", "jobs")  # and the fork server goes on serving
    assert "result" in _initialize(after)
    assert _children(server), "forked, not the plain server the launcher falls back to"
    assert after.stdin is not None
    after.stdin.close()
    assert after.wait(timeout=10) == 0


def test_without_a_fork_server_the_launcher_is_the_plain_server(tmp_path: object) -> None:
    """A socket that is gone (the fork server ended) leaves a working, if slower, session."""
    gone = forkserver.ForkServer.__new__(forkserver.ForkServer)
    gone.socket_path = os.path.join(str(tmp_path), "none.sock")
    process = _launch(gone, "mcp", "--path", "jobs")
    answer = _initialize(process)
    assert "result" in answer
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=20) == 0


def test_switched_off_the_command_is_the_plain_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forkserver.ENABLED_ENV, "0")
    assert forkserver._Shared._start() is None
    monkeypatch.setattr(forkserver, "_shared", forkserver._Shared())
    argv, _ = forkserver.stdio_command("jobs")
    assert argv[1:4] == ["-m", "simulator.cli", "mcp"]


def test_the_fork_server_ends_with_its_starter() -> None:
    """Its stdin is the starter's lifeline: closing it ends the server and removes its socket."""
    own = forkserver.ForkServer()
    assert own.ready()
    own.close()
    assert own.process.returncode == 0
    assert not os.path.exists(own.directory)


def test_a_run_given_a_listening_fork_server_shares_it_and_starts_none(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KNOWLEDGE_SIM_FORKSERVER=PATH: the run's sessions are forked by the server at PATH (a
    child of it), with the run's own environment; the run starts no server of its own."""
    monkeypatch.setenv(forkserver.ENABLED_ENV, server.socket_path)
    attached = forkserver._Shared._start()
    assert isinstance(attached, forkserver.Attached) and attached.socket_path == server.socket_path
    monkeypatch.setattr(forkserver, "_shared", forkserver._Shared())
    argv, env = forkserver.stdio_command("jobs")
    assert argv[:5] == [sys.executable, "-I", "-S", forkserver.LAUNCHER, server.socket_path]
    before = _children(server)
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env}
    )
    assert "result" in _initialize(process)
    assert len(_children(server) - before) == 1, "the session is the shared server's child"
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=20) == 0


@pytest.mark.parametrize("where", ["relative.sock", "/nowhere/fork.sock"])
def test_a_fork_server_path_where_none_listens_gives_the_run_its_own(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(forkserver.ENABLED_ENV, where)
    own = forkserver._Shared._start()
    try:
        assert isinstance(own, forkserver.ForkServer) and own.socket_path != where
    finally:
        if isinstance(own, forkserver.ForkServer):
            own.close()


def test_a_socket_of_another_user_is_never_shared(
    server: forkserver.ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session sends its server its environment, credentials included: a socket at PATH that
    this user does not own (another user's, planted in a shared folder) gives the run its own."""
    real_stat = os.stat

    def foreign(path: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_stat(path, *args, **kwargs)
        if str(path) != server.socket_path:
            return found
        fields = list(found)
        fields[4] = os.getuid() + 1  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "stat", foreign)
    monkeypatch.setenv(forkserver.ENABLED_ENV, server.socket_path)
    own = forkserver._Shared._start()
    try:
        assert isinstance(own, forkserver.ForkServer) and own.socket_path != server.socket_path
    finally:
        if isinstance(own, forkserver.ForkServer):
            own.close()


def test_a_connection_that_sends_nothing_does_not_stall_the_server(server: forkserver.ForkServer) -> None:
    """Found by review: the server read a request with no time limit, so one silent connection
    held every later session (the server is shared by a test process's runs). Now it gives up on
    the silent one after _REQUEST_SECONDS and forks the next session."""
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(server.socket_path)
    process = _launch(server, "mcp", "--path", "jobs")
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], forkserver._REQUEST_SECONDS + 10)
        assert ready, "no answer while a silent connection was open"
        assert "result" in json.loads(process.stdout.readline())
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        silent.close()
        if process.poll() is None:
            process.kill()
            process.wait()


NOBODY = 65534
as_root_on_linux = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0 or not hasattr(socket, "SO_PEERCRED"),
    reason="another user's process needs root to start, and the peer's uid Linux to tell",
)


def _start_as_nobody(work: Any) -> int:
    """Start ``work()`` in a child process of another user; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = work()
        except BaseException as exc:  # shown in the test's output, as the child's exit 1 says nothing
            print(f"as nobody: {exc!r}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    return pid


def _as_nobody(work: Any) -> int:
    """Run ``work()`` in a child process of another user; its exit status."""
    return os.waitstatus_to_exitcode(os.waitpid(_start_as_nobody(work), 0)[1])


@as_root_on_linux
def test_another_users_process_gets_no_session_and_no_environment(
    server: forkserver.ForkServer,
) -> None:
    """Found by review. The server's socket is this user's alone (0600), and even where it is
    opened to others, a peer of another user's is forked nothing. A launcher whose listener is
    another user's sends it nothing (no pipes, no environment) and is the plain server itself."""
    assert os.stat(server.socket_path).st_mode & 0o077 == 0
    os.chmod(server.socket_path, 0o777)
    os.chmod(os.path.dirname(server.socket_path), 0o777)

    def ask_for_a_session() -> int:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(server.socket_path)
        try:
            socket.send_fds(conn, [b"\0"], [0, 1, 2])
            conn.sendall(json.dumps({"argv": ["mcp"], "env": {}, "cwd": "/"}).encode() + b"\n")
            answer = conn.makefile("rb").readline()
        except (BrokenPipeError, ConnectionResetError):  # the server hung up on it at once
            answer = b""
        return 0 if answer == b"" else 3  # no pid: nothing was forked

    try:
        assert _as_nobody(ask_for_a_session) == 0
    finally:
        os.chmod(os.path.dirname(server.socket_path), 0o700)
        os.chmod(server.socket_path, 0o600)

    shared = Path(tempfile.mkdtemp(prefix="kc-shared-"))  # a folder all users reach, as /tmp is
    shared.chmod(0o777)
    planted = shared / "fork.sock"
    received = shared

    def listen_and_record() -> int:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(planted))
        os.chmod(planted, 0o777)
        listener.listen(1)
        (received / "ready").write_text("")
        listener.settimeout(20)
        conn, _ = listener.accept()
        conn.settimeout(5)
        try:
            got = conn.recv(65536)
        except OSError:
            got = b""
        (received / "got").write_bytes(got)
        return 0

    pid = _start_as_nobody(listen_and_record)
    try:
        deadline = time.monotonic() + 10
        while not (received / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (received / "ready").exists() and os.stat(planted).st_uid == NOBODY, "another user listens there"
        gone = forkserver.ForkServer.__new__(forkserver.ForkServer)
        gone.socket_path = str(planted)
        process = _launch(gone, "mcp", "--path", "jobs", env={"KC_PROBE_SECRET": "s3cr3t-probe-value"})
        assert "result" in _initialize(process), "the launcher became the plain server"
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=20) == 0
        os.waitpid(pid, 0)
        got = (received / "got").read_bytes()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert got == b"", got[:200]  # connected, then hung up on: not one byte, so no environment


def test_a_request_given_up_on_leaves_no_descriptor_open(server: forkserver.ForkServer) -> None:
    """Found by review: the descriptors a launcher sent stayed open in the server when its request
    was no JSON, or came too late (and with them, the pipes of a client that then never saw EOF)."""
    fd_folder = f"/proc/{server.process.pid}/fd"
    if not os.path.isdir(fd_folder):
        pytest.skip("no /proc to count the server's descriptors")
    before = len(os.listdir(fd_folder))
    with open(os.devnull, "rb") as null:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(server.socket_path)
        socket.send_fds(conn, [b"\0"], [null.fileno()] * 3)
        conn.sendall(b"not json\n")
        assert conn.makefile("rb").readline() == b""
        conn.close()
    deadline = time.monotonic() + 5
    while len(os.listdir(fd_folder)) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir(fd_folder)) <= before
