"""Setup mistakes a user makes in a target configuration are each a usage error of
``knowledge-conformance run``: exit 4, one line on stderr naming the fix, found before the suite
is even imported (well within seconds: a run that started the suite would take minutes). And the
small ones beside them: the simulator's 405 on a wrong method, a written target configuration
with its control extension and MCP servers, a run's request count with its pre-flight in it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common.config import load_config
from conformance.common.open import serve_over_loopback
from conformance.common.served import TOKEN_ENV, ServedSimulator, free_port, simulator_command

SETUP_SECONDS = 10.0
"""A generous bound on a usage error's wall time: enough for a loaded machine, far below any run
of the suite. The issue's target is 2 s; the measured figures are printed with -s."""
PROBE = "homepage binding"  # finds documents of the simulator's demo workspace
TOKEN_VAR = "KC_SETUP_PRIMARY"


@pytest.fixture(scope="module")
def sim() -> Iterator[ServedSimulator]:
    with ServedSimulator(seed=5, instead="install the simulator") as served:
        yield served


def _mint(sim: ServedSimulator, account: str = "alice", route: str = "demo") -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {sim.control_token}"}
    minted = httpx.post(
        f"{sim.url}/_control/v1/identities", json={"account": account, "route": route}, headers=headers, timeout=10
    )
    minted.raise_for_status()
    return dict(minted.json())


def _config(root: Path, *tables: str) -> Path:
    path = root / "target.toml"
    path.write_text("\n".join(tables) + "\n", "utf-8")
    return path


def _primary(route: str = "demo") -> str:
    return f'[identities.primary]\ntoken = {{env = "{TOKEN_VAR}"}}\nroute = "{route}"'


def _run(root: Path, config: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--target-config", str(config)]
    cmd += ["--report-dir", str(root / "reports"), *extra]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root, env={**os.environ, **env})
    return proc, time.monotonic() - began


def _usage_line(proc: subprocess.CompletedProcess[str], took: float, root: Path) -> str:
    """The one line of a usage error, after checking that it is one (exit 4, stderr only, no report)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 4, f"exit {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    assert len(lines) == 1 and not proc.stdout.strip(), proc.stdout[-1500:] + proc.stderr[-1500:]
    assert took < SETUP_SECONDS, f"{took:.1f} s: the suite ran instead of stopping at the configuration"
    assert not (root / "reports").exists(), "a usage error writes no reports"
    print(f"\n{took:.2f} s: {lines[0]}")
    return lines[0]


def test_identities_without_a_url_do_not_test_the_bundled_simulator(tmp_path: Path) -> None:
    config = _config(tmp_path, '[target]\nroute = "demo"', _primary())
    proc, took = _run(tmp_path, config, {TOKEN_VAR: "bha_" + "n" * 40})
    line = _usage_line(proc, took, tmp_path)
    assert "add url, or remove the identities to test the bundled simulator" in line, line


def test_a_typo_in_the_target_route_alone_is_named(sim: ServedSimulator, tmp_path: Path) -> None:
    minted = _mint(sim)
    config = _config(tmp_path, f'[target]\nurl = "{sim.url}"\nroute = "demoo"\nprobe_query = "{PROBE}"', _primary())
    proc, took = _run(tmp_path, config, {TOKEN_VAR: minted["token"]})
    line = _usage_line(proc, took, tmp_path)
    assert "[target] route 'demoo'" in line and "knows no workspace at route 'demoo'" in line, line
    assert minted["token"] not in line


@pytest.mark.parametrize("suffix", ["/agent-api/v1", "/agent-api/v1/", "/agent-api/v1/workspaces/demo"])
def test_a_base_url_with_the_api_prefix_says_what_to_remove(sim: ServedSimulator, tmp_path: Path, suffix: str) -> None:
    config = _config(tmp_path, f'[target]\nurl = "{sim.url}{suffix}"\nprobe_query = "{PROBE}"', _primary())
    proc, took = _run(tmp_path, config, {TOKEN_VAR: _mint(sim)["token"]})
    line = _usage_line(proc, took, tmp_path)
    assert f"remove '{suffix.rstrip('/')}'" in line and f"(give {sim.url})" in line, line


def test_a_control_url_without_its_root_says_add_it(sim: ServedSimulator, tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        f'[target]\nurl = "{sim.url}"\nroute = "demo"',
        f'[control]\nurl = "{sim.url}"\ntoken = {{env = "KC_SETUP_CONTROL"}}',
    )
    proc, took = _run(tmp_path, config, {"KC_SETUP_CONTROL": sim.control_token})
    line = _usage_line(proc, took, tmp_path)
    assert line.startswith(f"ERROR: [control] url {sim.url}: ") and "add /_control/v1 to [control] url" in line, line
    assert sim.control_token not in line


def test_a_control_url_where_nothing_answers_names_the_root(sim: ServedSimulator, tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        f'[target]\nurl = "{sim.url}"\nroute = "demo"',
        f'[control]\nurl = "{sim.url}/control"\ntoken = {{env = "KC_SETUP_CONTROL"}}',
    )
    proc, took = _run(tmp_path, config, {"KC_SETUP_CONTROL": sim.control_token})
    line = _usage_line(proc, took, tmp_path)
    assert "no control extension there (GET …/clock answered 404)" in line and "ending in /_control/v1" in line, line


@pytest.mark.parametrize("table", ["target", "control"])
def test_https_to_a_plain_http_server_says_use_http(sim: ServedSimulator, tmp_path: Path, table: str) -> None:
    https = sim.url.replace("http://", "https://")
    with pytest.raises(httpx.ConnectError):  # what a TLS client meets there: no handshake at all
        httpx.get(https, timeout=5)
    if table == "target":
        tables = [f'[target]\nurl = "{https}"\nprobe_query = "{PROBE}"', _primary()]
    else:
        tables = [f'[target]\nurl = "{sim.url}"', f'[control]\nurl = "{https}/_control/v1"\ntoken = "ctl-setup"']
    proc, took = _run(tmp_path, _config(tmp_path, *tables), {TOKEN_VAR: _mint(sim)["token"]})
    line = _usage_line(proc, took, tmp_path)
    assert "the TLS handshake failed and the server there answers plain HTTP; use http://" in line, line
    assert "SSL" not in line and "WRONG_VERSION" not in line, line


def test_a_web_page_names_what_get_root_answered(tmp_path: Path) -> None:
    async def website(scope: Any, receive: Any, send: Any) -> None:
        status = 200 if scope["path"] == "/" else 404
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<!doctype html><p>Welcome</p>"})

    url, stop = serve_over_loopback(website)
    try:
        config = _config(tmp_path, f'[target]\nurl = "{url}"', _primary())
        proc, took = _run(tmp_path, config, {TOKEN_VAR: "bha_" + "h" * 40})
    finally:
        stop()
    line = _usage_line(proc, took, tmp_path)
    assert "GET / answered HTTP 200 and the capabilities endpoint of route 'demo' HTTP 404" in line, line


def test_a_get_of_a_post_endpoint_is_405_with_allow(sim: ServedSimulator) -> None:
    for path in ("/agent-api/v1/workspaces/demo/knowledge/search", "/agent-api/v1/workspaces/demo/turns"):
        answer = httpx.get(sim.url + path, timeout=10)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST", (path, answer.status_code)
        assert answer.json()["error"] == "method_not_allowed"
    assert httpx.get(sim.url + "/agent-api/v1/nothing-here", timeout=10).status_code == 404


def _transcript(sim: ServedSimulator) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {sim.control_token}"}
    answer = httpx.get(f"{sim.url}/_control/v1/transcript", headers=headers, timeout=10)
    return list(answer.json()["requests"])


def test_the_request_count_includes_the_preflight(sim: ServedSimulator, tmp_path: Path) -> None:
    """The Core saw as many requests as the report says: the pre-flight's (run once, by the
    command line, not again by the session) and the tests'."""
    config = _config(tmp_path, f'[target]\nurl = "{sim.url}"\nprobe_query = "{PROBE}"', _primary())
    env = {TOKEN_VAR: _mint(sim)["token"]}
    before = len(_transcript(sim))
    proc, _ = _run(tmp_path, config, env, "--requirement", "CAP-001", "--mcp-target", "none")
    seen = len(_transcript(sim)) - before
    assert proc.returncode in (0, 6), proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((tmp_path / "reports" / "results.json").read_text("utf-8"))
    preflight = 4  # GET /, the primary's capabilities, the probe's turn and search
    assert results["requests"] == seen and seen > preflight, (results["requests"], seen)


def test_write_target_names_control_by_its_variable_and_the_mcp_servers(tmp_path: Path) -> None:
    """``--write-target`` writes ``[control]`` (its credential by the variable the simulator read,
    never the secret itself) and ``[mcp]`` (streamable HTTP, stdio and the job path), and the file
    loads as the suite's configuration."""
    port, secret, written = free_port(), "ctl-" + "w" * 28, tmp_path / "target.toml"
    cmd = [simulator_command("install the simulator"), "serve", "--port", str(port), "--route", "staging"]
    server = subprocess.Popen(
        [*cmd, "--write-target", str(written)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, TOKEN_ENV: secret},
    )
    try:
        deadline = time.monotonic() + 60
        while not (written.is_file() and "[mcp]" in written.read_text("utf-8")) and time.monotonic() < deadline:
            assert server.poll() is None, "knowledge-sim serve exited"
            time.sleep(0.1)
        text = written.read_text("utf-8")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    url = f"http://127.0.0.1:{port}"
    assert secret not in text
    assert f'url = "{url}/_control/v1"' in text and f'token = {{env = "{TOKEN_ENV}"}}' in text, text
    assert re.search(rf"#.*read from {TOKEN_ENV}", text), text
    os.environ[TOKEN_ENV] = secret
    try:
        cfg = load_config(str(written))
    finally:
        del os.environ[TOKEN_ENV]
    assert cfg.control_url == f"{url}/_control/v1" and cfg.control_token == secret
    assert cfg.mcp["url"] == f"{url}/agent-api/v1/workspaces/{{route}}/mcp"
    assert cfg.mcp["command"][-5:] == ["mcp", "--core-url", url, "--route", "{route}"]
    assert cfg.mcp["jobs_command"][-3:] == ["mcp", "--path", "jobs"]
