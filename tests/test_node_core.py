"""The suite on a third stack: a Core in Node.js on the standard library (seed 000 and the control
extension, its control clock running in real time), in ``examples/independent/core-node/``, written
blind from the seeds, CONVENTIONS and ``schemas/`` and taking the other choice wherever the seeds
leave one open. The suite calls it CONFORMANT at default settings, and each of its broken variants
(``variants.json``: one plausible JavaScript bug each) NON-CONFORMANT, failing the IDs it breaks.

``KC_NODE_VARIANTS`` picks the variants: ``fast`` (default, one of each kind of bug CI can afford),
``all``, or a comma-separated list of names. Every variant, one suite run each (some 40 s a run):
``KC_NODE_VARIANTS=all pytest tests/test_node_core.py``."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.serving import SuiteRun, assert_node_tests_pass, choose_variants, free_port, run_suite, served

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "examples" / "independent" / "core-node"
NODE = shutil.which("node")
VARIANTS = {v["name"]: v for v in json.loads((CORE / "variants.json").read_text("utf-8"))}
FAST = ("expiry_whole_seconds", "page_bound_utf16", "disabled_on_demand_inline")
CHOSEN = choose_variants(os.environ.get("KC_NODE_VARIANTS", "fast"), list(VARIANTS), FAST)
pytestmark = pytest.mark.skipif(NODE is None, reason="no node on this machine (CI has Node 20)")


@contextmanager
def _served(variant: str, log: Path) -> Iterator[tuple[str, str]]:
    """The Node Core (``variant``, or the clean one for "") on a free loopback port: (URL, control token)."""
    assert NODE is not None
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "NODECORE_CONTROL_TOKEN": token, "NODECORE_BROKEN": variant}
    url = f"http://127.0.0.1:{port}"
    command = [NODE, str(CORE / "server.mjs"), "--host", "127.0.0.1", "--port", str(port)]
    with served(command, url + "/", log, "the Node Core", env=env):
        yield url, token


STRICT_ONLY = frozenset({"max_bytes_string", "max_bytes_float"})
"""Variants the seeds allow (a byte count read leniently and still honoured): only the project's
wire choices catch them, so they run strict, as the quirk table's strict_only quirks do."""


def _run(variant: str, tmp_path: Path) -> SuiteRun:
    """One whole suite run at default settings (no tolerance: its real-time clock is judged from
    intervals), or strict for a variant only the project's wire choices catch."""
    config = tmp_path / "target.toml"
    strict = "[wire]\ncodes = {strict = true}\n" if variant in STRICT_ONLY else ""
    with _served(variant, tmp_path / "core.log") as (url, token):
        control = f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "NODECORE_CONTROL_TOKEN"}}\n'
        config.write_text(control + strict, "utf-8")
        command = ["--target", url, "--target-config", str(config), "--mcp-target", "none"]
        env = {**os.environ, "NODECORE_CONTROL_TOKEN": token}
        return run_suite(command, tmp_path / "reports", env=env, cwd=tmp_path)


def test_the_node_core_passes_its_own_tests() -> None:
    assert NODE is not None
    assert_node_tests_pass(NODE, CORE)


def test_the_suite_calls_the_node_core_conformant(tmp_path: Path) -> None:
    run = _run("", tmp_path)
    assert run.failed == {} and run.errors == [], (run.failed, run.errors[:3])
    summary = run.results["summary"]
    assert summary["server_must_verified"] == summary["server_must_total"], summary
    assert run.code == 0 and run.results["verdict"] == "conformant"


@pytest.mark.parametrize("variant", CHOSEN)
def test_a_broken_node_core_fails_the_ids_it_breaks(variant: str, tmp_path: Path) -> None:
    run = _run(variant, tmp_path)
    breaks = set(VARIANTS[variant]["breaks"])
    assert run.errors == [] and run.code == 1, (run.code, run.errors[:3])
    assert breaks <= set(run.failed), f"{variant} breaks {sorted(breaks)}; the suite failed {sorted(run.failed)}"
