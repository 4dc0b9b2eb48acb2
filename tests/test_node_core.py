"""The suite on a third stack: a Core in Node.js on the standard library (seed 000 and the control
extension, its control clock running in real time), in ``examples/independent/core-node/``, written
blind from the seeds, CONVENTIONS and ``schemas/`` and taking the other choice wherever the seeds
leave one open. The suite calls it CONFORMANT at default settings, and each of its broken variants
(``variants.json``: one plausible JavaScript bug each) NON-CONFORMANT, failing the IDs it breaks.

``KC_NODE_VARIANTS`` picks the variants: ``fast`` (default, one of each kind of bug CI can afford),
``all``, or a comma-separated list of names."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.serving import wait_until_it_answers

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "examples" / "independent" / "core-node"
NODE = shutil.which("node")
VARIANTS = {v["name"]: v for v in json.loads((CORE / "variants.json").read_text("utf-8"))}
FAST = ("expiry_whole_seconds", "page_bound_utf16", "disabled_on_demand_inline")
CHOSEN = (
    sorted(VARIANTS)
    if os.environ.get("KC_NODE_VARIANTS", "fast") == "all"
    else [v for v in os.environ.get("KC_NODE_VARIANTS", ",".join(FAST)).split(",") if v and v != "fast"] or FAST
)
pytestmark = pytest.mark.skipif(NODE is None, reason="no node on this machine (CI has Node 20)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _served(variant: str, log: Path) -> Iterator[tuple[str, str]]:
    """The Node Core (``variant``, or the clean one for "") on a free loopback port: (URL, control token)."""
    assert NODE is not None
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "NODECORE_CONTROL_TOKEN": token, "NODECORE_BROKEN": variant}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [NODE, str(CORE / "server.mjs"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_it_answers(url + "/", process, log, "the Node Core")
        yield url, token
    finally:
        process.terminate()
        process.wait(timeout=10)


STRICT_ONLY = frozenset({"max_bytes_string", "max_bytes_float"})
"""Variants the seeds allow (a byte count read leniently and still honoured): only the project's
wire choices catch them, so they run strict, as the quirk table's strict_only quirks do."""


def _run(variant: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """One whole suite run at default settings (no tolerance: its real-time clock is judged from
    intervals), or strict for a variant only the project's wire choices catch."""
    config = tmp_path / "target.toml"
    strict = "[wire]\ncodes = {strict = true}\n" if variant in STRICT_ONLY else ""
    with _served(variant, tmp_path / "core.log") as (url, token):
        control = f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "NODECORE_CONTROL_TOKEN"}}\n'
        config.write_text(control + strict, "utf-8")
        reports = tmp_path / "reports"
        command = ["run", "--target", url, "--target-config", str(config), "--mcp-target", "none"]
        done = subprocess.run(
            [sys.executable, "-m", "conformance.cli", *command, "--reports", str(reports)],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "NODECORE_CONTROL_TOKEN": token},
            cwd=tmp_path,
        )
    return done.returncode, json.loads((reports / "results.json").read_text("utf-8"))


def test_the_node_core_passes_its_own_tests() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, "--test", "test/"], cwd=CORE, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_suite_calls_the_node_core_conformant(tmp_path: Path) -> None:
    code, results = _run("", tmp_path)
    failed = {r["id"]: r["reason"] for r in results["requirements"] if r["status"] == "failed"}
    errors = [t["message"][:300] for t in results["tests"] if t["outcome"] == "error"]
    assert failed == {} and errors == [], (failed, errors[:3])
    summary = results["summary"]
    assert summary["server_must_verified"] == summary["server_must_total"], summary
    assert code == 0 and results["verdict"] == "conformant"


@pytest.mark.parametrize("variant", CHOSEN)
def test_a_broken_node_core_fails_the_ids_it_breaks(variant: str, tmp_path: Path) -> None:
    code, results = _run(variant, tmp_path)
    failed = {r["id"] for r in results["requirements"] if r["status"] == "failed"}
    errors = [t["message"][:300] for t in results["tests"] if t["outcome"] == "error"]
    breaks = set(VARIANTS[variant]["breaks"])
    assert errors == [] and code == 1, (code, errors[:3])
    assert breaks <= failed, f"{variant} breaks {sorted(breaks)}; the suite failed {sorted(failed)}"
