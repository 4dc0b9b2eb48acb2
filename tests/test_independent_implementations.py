"""The suite on implementations written apart from it: a second Core (seed 000 and seed 003, with
the control extension, its Agent Session MCP path over streamable HTTP per route and over stdio, and
the Fixed Client Token job path) and a second client SDK with a host transport (JavaScript), both in
``examples/independent/``, written blind from the seeds and ``schemas/`` and taking the other choice
wherever the seeds leave one open. Each passes its own tests, and the suite calls each CONFORMANT on
every surface it has."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledge_schemas import load_catalogue
from tests.serving import wait_until_it_answers

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "examples" / "independent" / "core"
CLIENT = ROOT / "examples" / "independent" / "client-node"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="no node on this machine (CI has Node 20)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def independent_core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The independent Core served on a free loopback port: (its URL, its control token)."""
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp_path_factory.mktemp("core") / "core.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "blindcore", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=CORE,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "BLINDCORE_CONTROL_TOKEN": token},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_it_answers(
            url + "/agent-api/v1/workspaces/x/knowledge/capabilities", process, log, "the independent Core"
        )
        yield url, token
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_independent_core_passes_its_own_tests() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests"], cwd=CORE, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_suite_calls_the_independent_core_conformant(independent_core: tuple[str, str], tmp_path: Path) -> None:
    url, token = independent_core
    config = tmp_path / "target.toml"
    launcher = json.dumps([sys.executable, str(CORE / "run.py")])[1:-1]  # its stdio servers, from any directory
    text = (CORE / "target.toml").read_text("utf-8").replace("http://127.0.0.1:8765", url)
    config.write_text(text.replace('"python", "-m", "blindcore"', launcher), "utf-8")
    reports = tmp_path / "reports"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "run",
            "--target",
            url,
            "--target-config",
            str(config),
            "--reports",
            str(reports),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "BLINDCORE_CONTROL_TOKEN": token},
        cwd=tmp_path,
    )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    failed = {r["id"]: r["reason"] for r in results["requirements"] if r["status"] == "failed"}
    errors = [t["message"] for t in results["tests"] if t["outcome"] == "error"]
    assert failed == {} and errors == [], (failed, errors[:3])
    summary = results["summary"]
    assert summary["server_must_verified"] == summary["server_must_total"], summary
    assert done.returncode == 0 and results["verdict"] == "conformant", done.stdout[-3000:]
    checked = {s["surface"] for s in results["surfaces"] if s["checked"]}
    assert checked == {"http", "mcp-stdio", "mcp-http"}, results["surfaces"]
    catalogue = load_catalogue()
    observable = [
        r
        for r in results["requirements"]
        if r["surface"] in ("mcp", "tool") and r["level"] == "MUST" and catalogue[r["id"]].via != "none"
    ]
    unverified = {r["id"]: r["reason"] for r in observable if r["status"] != "verified"}
    assert unverified == {}, unverified


@needs_node
def test_the_independent_client_passes_its_own_tests() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, "--test", "test/"], cwd=CLIENT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@needs_node
def test_the_suite_calls_the_independent_client_conformant(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    harness = f"{NODE} {CLIENT / 'harness.mjs'}"
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "client", "--harness", harness, "--reports", str(reports)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    failed = {r["id"]: r["reason"] for r in results["requirements"] if r["status"] == "failed"}
    assert failed == {} and done.returncode == 0 and results["verdict"] == "conformant", (failed, done.stdout[-3000:])
    in_flight = {t["nodeid"]: t["outcome"] for t in results["tests"] if "aborted_in_flight" in t["nodeid"]}
    assert len(in_flight) == 3 and set(in_flight.values()) == {"passed"}, in_flight  # judged, not skipped
