"""A served simulator stays up for its users: unread logs and idle connections never stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from simulator.cli import _parser
from simulator.cli import main as sim_main
from simulator.config import SimConfig
from tests.test_simulator_restart import _port


def _start(*extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    port = _port()
    # stderr piped and never read: a pipe holds about 64 KB, the size of some 500 request log lines
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator.cli", "serve", "--port", str(port), "--seed", "1", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
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
        assert all(
            http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities").status_code == 401 for _ in range(20)
        )
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
        minted = http.post(
            "/_control/v1/identities",
            json={"account": "alice", "route": "demo"},
            headers={"authorization": "Bearer sim-control-token"},
        )
        assert minted.status_code == 201, minted.text
        headers = {"content-type": "application/json", "authorization": f"Bearer {minted.json()['token']}"}
        for endpoint, member in (("search", "query"), ("read", "ref"), ("read", "ref")):  # one kept-alive connection
            deep = b'{"' + member.encode() + b'": ' + b"[" * 5000 + b"]" * 5000 + b"}"
            response = http.post(f"/agent-api/v1/workspaces/demo/knowledge/{endpoint}", content=deep, headers=headers)
            assert 400 <= response.status_code < 500 and "error" in response.json()
        assert http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities").status_code == 401
    finally:
        _stop(proc, http)


@pytest.mark.parametrize(
    "option",
    [
        ("--limit-concurrency", "0"),
        ("--limit-concurrency", "0.5"),
        ("--store-threads", "0"),
        ("--store-threads", "-1"),
        ("--timeout-keep-alive", "-1"),
        ("--timeout-keep-alive", "nan"),
        ("--timeout-keep-alive", "inf"),
        ("--timeout-keep-alive", "0.5"),
    ],
)
def test_a_serving_number_out_of_range_is_refused_in_one_line(
    option: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """0 connections at once answers everything 503, a negative keep-alive answers nothing, nan was a traceback."""
    with pytest.raises(SystemExit) as exited:
        sim_main(["serve", *option])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and error.startswith("knowledge-sim serve: error: argument " + option[0]), error


def test_a_fractional_keep_alive_is_rounded_up_to_whole_seconds() -> None:
    assert _parser().parse_args(["serve", "--timeout-keep-alive", "1.5"]).timeout_keep_alive == 2
    assert _parser().parse_args(["serve"]).timeout_keep_alive == 30


def test_the_control_token_can_come_from_the_environment() -> None:
    """KNOWLEDGE_SIM_CONTROL_TOKEN keeps the credential off the command line (``ps``); the default is then refused."""
    proc, http = _start(env={**os.environ, "KNOWLEDGE_SIM_CONTROL_TOKEN": "env-control-credential"})
    try:
        answers = [
            http.get("/_control/v1/clock", headers={"Authorization": f"Bearer {token}"}).status_code
            for token in ("env-control-credential", SimConfig.control_token)
        ]
    finally:
        _stop(proc, http)
    assert answers[0] == 200 and answers[1] in (401, 403), answers


@pytest.mark.parametrize("given", [[], ["--control-token", ""]])
def test_the_default_control_credential_stays_refused_off_loopback(
    given: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty token, from the environment or the command line, counts as none given."""
    monkeypatch.setenv("KNOWLEDGE_SIM_CONTROL_TOKEN", "")
    assert sim_main(["serve", "--host", "0.0.0.0", *given]) == 2
    assert "KNOWLEDGE_SIM_CONTROL_TOKEN" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "a port is 0 to 65535"),
        (["--port", "-1"], "a port is 0 to 65535"),
        (["--log-level", "nope"], "invalid choice"),
        (["--database", "/nonexistent-folder/x.db"], "unable to open database file"),
    ],
)
def test_bad_serve_options_are_one_line_before_any_banner(args: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "serve", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and said in done.stderr and "knowledge-sim on" not in done.stderr, done.stderr[-800:]
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_one_line_and_port_0_names_the_port_it_got() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        busy = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "simulator.cli", "serve", "--port", str(busy)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{busy}" in done.stderr, done.stderr[-800:]
    assert "knowledge-sim on" not in done.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "simulator.cli", "serve", "--port", "0"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stderr is not None
        banner = server.stderr.readline()
        url = banner.split()[2]
        assert not url.endswith(":0"), banner
        deadline = time.monotonic() + 30
        while True:
            try:
                assert (
                    httpx.get(url + "/agent-api/v1/workspaces/demo/knowledge/capabilities", timeout=2).status_code
                    == 401
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the port the banner names never answered"
                time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--corpus", ""], "--corpus is empty"),
        (["--route", " "], "--route is empty"),
        (["--route", "a b/c"], "cannot stand in a URL path"),
    ],
)
def test_an_empty_corpus_or_a_route_no_url_can_carry_is_refused(
    given: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--corpus ""`` (an unset variable) served no workspace at all, and ``--route "a b/c"``
    routes no request can reach: both refused before serving."""
    assert sim_main(["serve", "--port", "0", *given]) == 2
    assert said in capsys.readouterr().err
