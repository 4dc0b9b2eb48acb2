"""End to end: documented wire overrides hold on the reference.

- strict codes (``[wire] codes = {strict = true}``) on the clean simulator are conformant;
- a simulator serving other member names (``knowledge-sim serve --wire-names``) is
  conformant to a target configuration with the same names, and a configuration
  with the default names sees it as non-conformant, naming the broken requirement.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowledge_schemas import load_registry
from tests.suite_command import warm_suite

CONTROL_TOKEN = "names-test-control-credential"
RENAMED = {
    # the two schema identifiers swap names: mapping back must not confuse them
    "capabilities": {
        "schema_version": "knowledge_schema_version",
        "knowledge_schema_version": "schema_version",
        "route": "workspace",
        "enabled": "knowledge_enabled",
        "delivery_modes": "modes",
        "limits": "bounds",
    },
    "limits": {
        "search_max_hints": "searchMaxHints",
        "search_max_bytes": "searchMaxBytes",
        "read_default_max_bytes": "readDefaultMaxBytes",
        "read_min_max_bytes": "readMinMaxBytes",
        "read_max_max_bytes": "readMaxMaxBytes",
        "reference_max_bytes": "referenceMaxBytes",
        "read_chain_max_bytes": "readChainMaxBytes",
        "reference_ttl_seconds": "referenceTtlSeconds",
    },
    "turn_context": {
        "knowledge": "knowledge_items",
        "knowledge_refs": "knowledge_references",
        "knowledge_delivery": "delivery",
    },
    "knowledge_delivery": {
        "mode": "delivery_mode",
        "status": "search_status",
        "hints": "items",
        "trust": "trust_level",
        "schema_version": "schema",
    },
}


def _toml(tables: dict[str, dict[str, str]], prefix: str) -> str:
    return "".join(
        f"[{prefix}{table}]\n" + "".join(f'{k} = "{v}"\n' for k, v in members.items())
        for table, members in tables.items()
    )


def _suite(reports: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    cmd = [
        *warm_suite(),
        "--report-dir",
        str(reports),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    results = json.loads((reports / "results.json").read_text("utf-8"))
    assert load_registry().errors("results", results) == []
    return proc.returncode, results, proc.stdout


def _statuses(results: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in results["requirements"]}


def test_strict_codes_on_the_clean_simulator_are_conformant(tmp_path: Path) -> None:
    """Every refused read names the cause the model predicts (any of them when several hold)."""
    config = tmp_path / "strict.toml"
    config.write_text("[wire]\ncodes = {strict = true}\n", "utf-8")
    code, results, out = _suite(tmp_path / "r", "--target-config", str(config))
    assert code == 0, out[-2000:]
    assert results["verdict"] == "conformant" and results["configuration"]["strict_codes"] is True
    assert results["summary"]["server_must_verified"] == results["summary"]["server_must_total"]
    stateful = next(
        t for t in results["tests"] if "/server/test_stateful.py::" in t["nodeid"] and "[tour]" in t["nodeid"]
    )
    assert stateful["outcome"] == "passed" and set(stateful["exercised"]) == set(stateful["requirements"])


def test_deep_strict_generated_requests_on_the_clean_simulator_pass(tmp_path: Path) -> None:
    """A negative case that leaves out the credential is sent with the run's credential: schemathesis
    must judge that request, not the one it generated, or a strict run blames the Core for
    accepting a request that was valid when sent (this failed at --deep on the clean simulator)."""
    config = tmp_path / "strict.toml"
    config.write_text("[wire]\ncodes = {strict = true}\n", "utf-8")
    code, results, out = _suite(tmp_path / "r", "--target-config", str(config), "--deep", "-k", "generated")
    assert code == 6, out[-2000:]  # incomplete: only the generated requests ran
    generated = [t for t in results["tests"] if "test_generated_requests_never_break_the_server" in t["nodeid"]]
    assert len(generated) == 8 and all(t["outcome"] == "passed" for t in generated), out[-2000:]
    assert _statuses(results)["WIRE-001"] == "verified", out[-2000:]


@pytest.fixture
def serve_sim(tmp_path: Path) -> Iterator[Callable[[dict[str, dict[str, str]]], str]]:
    """Start ``knowledge-sim serve --wire-names FILE`` with control; returns its URL. One fresh server per call."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(names: dict[str, dict[str, str]]) -> str:
        names_file = tmp_path / f"names-{len(procs)}.toml"
        names_file.write_text(_toml(names, "names."), "utf-8")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simulator.cli",
                "serve",
                "--port",
                str(port),
                "--frozen-clock",
                "--control-token",
                CONTROL_TOKEN,
                "--wire-names",
                str(names_file),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(url + "/", timeout=1)
                return url
            except httpx.TransportError:
                assert proc.poll() is None, "the simulator exited at start"
                time.sleep(0.05)
        raise AssertionError("the simulator did not start")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def _target_config(path: Path, url: str, names: dict[str, dict[str, str]]) -> Path:
    path.write_text(
        f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_NAMES_CONTROL"}}\n' + _toml(names, "wire.names."),
        "utf-8",
    )
    return path


def test_renamed_wire_with_the_same_names_configured_is_conformant(serve_sim: Any, tmp_path: Path) -> None:
    url = serve_sim(RENAMED)
    config = _target_config(tmp_path / "target.toml", url, RENAMED)
    code, results, out = _suite(
        tmp_path / "r", "--target", url, "--target-config", str(config), env={"KC_NAMES_CONTROL": CONTROL_TOKEN}
    )
    assert code == 0, out[-2000:]
    assert results["verdict"] == "conformant"
    assert results["summary"]["server_must_verified"] == results["summary"]["server_must_total"] > 50
    mcp = (
        "conformance/suite/mcp/",
        "conformance/suite/search_knowledge/",  # no [mcp] table here: skipped, said so
    )
    assert not [t for t in results["tests"] if t["outcome"] != "passed" and not t["nodeid"].startswith(mcp)]
    assert results["configuration"]["wire"]["names"]["limits"]["search_max_hints"] == "searchMaxHints"


@pytest.mark.parametrize(
    ("table", "requirement"),
    [
        ("capabilities", "CAP-003"),
        ("limits", "CAP-005"),
        ("turn_context", "TURN-003"),
        ("knowledge_delivery", "TURN-006"),
    ],
)
def test_renamed_wire_fails_a_configuration_with_the_default_names(
    serve_sim: Any, tmp_path: Path, table: str, requirement: str
) -> None:
    """Each table of names matters: the suite with the default names sees the renamed wire break ``requirement``."""
    url = serve_sim({table: RENAMED[table]})
    config = _target_config(tmp_path / "target.toml", url, {})
    code, results, out = _suite(
        tmp_path / "r",
        "--target",
        url,
        "--target-config",
        str(config),
        "--requirement",
        requirement,
        env={"KC_NAMES_CONTROL": CONTROL_TOKEN},
    )
    assert code == 1, out[-2000:]
    assert results["verdict"] == "non-conformant"
    assert _statuses(results)[requirement] == "failed"
    assert requirement in {t["violated"] for t in results["tests"] if t["outcome"] == "failed"}
