"""A served simulator stays up for its users: unread logs and idle connections never stop it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx

from tests.test_simulator_restart import _port


def _start(*extra: str) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    port = _port()
    # stderr piped and never read: a pipe holds about 64 KB, the size of some 500 request log lines
    proc = subprocess.Popen([sys.executable, "-m", "simulator.cli", "serve", "--port", str(port), "--seed", "1", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    deadline = time.monotonic() + 60
    while True:
        try:
            http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities")
            return proc, http
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, "the simulator did not start"
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes], http: httpx.Client) -> None:
    http.close()
    proc.terminate()  # a clean stop removes the server's temporary store file; a kill would leave it behind
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def test_request_logs_nobody_reads_never_stall_serving() -> None:
    """Before, the server stopped answering after about 500 requests logged to an unread pipe."""
    proc, http = _start("--log-level", "info")
    try:
        answered = [http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities").status_code for _ in range(1500)]
        assert len(answered) == 1500 and set(answered) == {401}  # no token: refused, and logged, every time
    finally:
        _stop(proc, http)


def test_hundreds_of_idle_connections_leave_room_for_real_clients() -> None:
    proc, http = _start()
    idle = []
    try:
        host, port = "127.0.0.1", int(str(http.base_url).rsplit(":", 1)[1].rstrip("/"))
        for _ in range(300):
            idle.append(socket.create_connection((host, port), timeout=10))
        time.sleep(0.5)
        assert all(http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities").status_code == 401 for _ in range(20))
    finally:
        for s in idle:
            s.close()
        _stop(proc, http)


def test_a_body_nested_deeper_than_the_parser_goes_is_refused_and_serving_goes_on() -> None:
    """Before, the transcript's own parse of such a body raised after the 400 went out, and the
    server reset the connection: the suite's deep-nesting probe saw a harness error on a served
    simulator (in-process, the exception went unseen)."""
    proc, http = _start()
    try:
        minted = http.post("/_control/v1/identities", json={"account": "alice", "route": "demo"},
                           headers={"authorization": "Bearer sim-control-token"})
        assert minted.status_code == 201, minted.text
        headers = {"content-type": "application/json", "authorization": f"Bearer {minted.json()['token']}"}
        for endpoint, member in (("search", "query"), ("read", "ref"), ("read", "ref")):  # one kept-alive connection
            deep = b'{"' + member.encode() + b'": ' + b"[" * 5000 + b"]" * 5000 + b"}"
            response = http.post(f"/agent-api/v1/workspaces/demo/knowledge/{endpoint}", content=deep, headers=headers)
            assert 400 <= response.status_code < 500 and "error" in response.json()
        assert http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities").status_code == 401
    finally:
        _stop(proc, http)
