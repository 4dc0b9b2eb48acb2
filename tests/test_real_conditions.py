"""The right verdict under real conditions: a Core whose control clock runs in real time (as a
staging Core's does), on a machine whose every core is busy, and 50 ms away through a proxy. Time
passes between any two requests there, so every timed probe is judged from the interval of ages the
Core could have seen (results.json keeps them): such a Core is conformant every time, and no
reference it refuses or serves at the edge is blamed on it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conformance.common.served import ServedSimulator
from tests.latency_proxy import LatencyProxy, cpu_load
from tests.suite_command import warm_suite

TIMED = ("REF-001", "REF-002", "REF-016")
RUNS = int(os.environ.get("KC_CONDITION_RUNS", "1"))
"""Runs per condition: one in CI (each whole run takes one to two minutes on a busy two-core
machine); the issue's acceptance was three in a row (KC_CONDITION_RUNS=3)."""


@pytest.fixture(scope="module")
def running_core() -> Any:
    with ServedSimulator() as sim:  # no --frozen-clock: the control clock runs in real time
        yield sim


def _run(url: str, token: str, root: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "target.toml"
    config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n', "utf-8")
    reports = root / "reports"
    cmd = [*warm_suite(), "--target", url, "--target-config", str(config), "--reports", str(reports), *extra]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "KC_CONTROL": token}, check=False
    )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    return done.returncode, results


def _timed_failures(results: dict[str, Any]) -> list[str]:
    return [f"{t['nodeid']}: {t['message'][:300]}" for t in results["tests"] if t["outcome"] in ("failed", "error")]


def _before_probes(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for t in results["tests"] for p in t.get("timings", []) if p["kind"] == "before"]


def test_a_core_with_a_running_clock_is_conformant_on_a_busy_machine(running_core: Any, tmp_path: Path) -> None:
    with cpu_load(1):  # the other pytest worker keeps the second core busy
        for n in range(RUNS):
            code, results = _run(running_core.url, running_core.control_token, tmp_path / f"run{n}")
            assert (code, results["verdict"]) == (0, "conformant"), _timed_failures(results)
            probes = _before_probes(results)
            assert probes and all(p["age"][0] < p["age"][1] for p in probes), probes


def test_a_core_50_ms_away_with_a_running_clock_keeps_its_timed_verdicts(running_core: Any, tmp_path: Path) -> None:
    """Every request takes at least 100 ms more here, so the just-before-300 s probe's interval
    reaches the edge: it is tried again further out, never failed on timing alone."""
    port = int(running_core.url.rsplit(":", 1)[1])
    selected = [arg for rid in TIMED for arg in ("--requirement", rid)] + ["--stateful-examples", "5"]
    with LatencyProxy(port, 0.05) as proxy:
        for n in range(RUNS):
            code, results = _run(proxy.url, running_core.control_token, tmp_path / f"run{n}", *selected)
            assert code in (0, 6) and not _timed_failures(results), _timed_failures(results)
            statuses = {r["id"]: r["status"] for r in results["requirements"] if r["id"] in TIMED}
            assert statuses["REF-001"] == "verified" and statuses["REF-002"] != "failed", statuses
            assert all(p["age"][1] - p["age"][0] >= 0.3 for p in _before_probes(results)), "three round trips at least"
