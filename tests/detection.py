"""Test the tester: run the WHOLE suite against the simulator with one quirk and
judge the run against the quirk's expected outcome (quirk-outcomes.yaml).

Kept apart from the tests that use it so that the judging itself can be tested
on made-up results: a detection check that cannot fail proves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.quirks import Quirk
from tests.suite_command import warm_suite

STRICT_CONFIG = "[wire]\ncodes = {strict = true}\n"


@dataclass(frozen=True)
class Outcome:
    """What one whole-suite run reported."""

    quirk: str
    failed: frozenset[str]
    exit: int
    seconds: float
    strict: bool = False
    note: str = ""  # why there are no results, when there are none


def command(quirk: Quirk, reports: Path) -> list[str]:
    """The whole suite (no --requirement filter), the stateful model unshrunk; strict when the quirk needs it."""
    cmd = [
        *warm_suite(),
        "--sim-quirk",
        quirk.name,
        "--no-shrink",
        "--reports",
        str(reports),
    ]
    if quirk.clock_tick is not None:
        cmd += ["--sim-clock-tick", repr(quirk.clock_tick)]
    if quirk.strict_only:
        config = reports.parent / f"{quirk.name}.strict.toml"
        config.write_text(STRICT_CONFIG, "utf-8")
        cmd += ["--target-config", str(config)]
    return cmd


def outcome_of(quirk: Quirk, results: dict[str, Any] | None, exit_code: int, seconds: float, note: str = "") -> Outcome:
    failed = frozenset(r["id"] for r in (results or {}).get("requirements", []) if r["status"] == "failed")
    return Outcome(quirk.name, failed, exit_code, seconds, quirk.strict_only, note if results is None else "")


def run(quirk: Quirk, workdir: Path, timeout: float = 600) -> Outcome:
    reports = workdir / quirk.name
    reports.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run(command(quirk, reports), capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - started
    found = reports / "results.json"
    if not found.is_file():
        return outcome_of(quirk, None, proc.returncode, seconds, (proc.stdout + proc.stderr)[-600:])
    return outcome_of(quirk, json.loads(found.read_text("utf-8")), proc.returncode, seconds)


def run_all(quirks: list[Quirk], workdir: Path, workers: int) -> dict[str, Outcome]:
    """Each run is its own subprocess; ``workers`` of them at a time."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return {o.quirk: o for o in pool.map(lambda q: run(q, workdir), quirks)}


def missed(rid: str) -> str:
    return f"the suite did not fail {rid}"


def problems(quirk: Quirk, outcome: Outcome) -> list[str]:
    """Everything in which the run differs from the quirk's expected outcome; empty when detected as expected.

    A quirk only concurrency shows (``caught_by: load``) must pass the sequential suite: conformant,
    none of its IDs failed (a load run catches it: tests/test_load_profile.py)."""
    if quirk.caught_by == "load":
        found = [
            f"the sequential suite failed {rid}, which only concurrency should show"
            for rid in quirk.violates
            if rid in outcome.failed
        ]
        if outcome.exit != 0:
            found.append(f"exit {outcome.exit}, expected 0 (only a load run catches it)")
    else:
        found = [missed(rid) for rid in quirk.violates if rid not in outcome.failed]
        if outcome.exit != quirk.exit:
            found.append(f"exit {outcome.exit}, expected {quirk.exit}")
    if outcome.note:
        found.append(f"no results: {outcome.note}")
    return found


def known_gaps(quirk: Quirk) -> list[str]:
    """The problems the table expects: IDs it records as missed by the current suite."""
    return [missed(rid) for rid in quirk.violates if rid in quirk.suite_misses]


def table(quirks: dict[str, Quirk], outcomes: dict[str, Outcome]) -> str:
    """One line per quirk: expected IDs, detected or what is missing, exit, seconds, and what else failed."""
    width = max(len(n) for n in outcomes)
    lines = []
    for name, out in sorted(outcomes.items()):
        quirk = quirks[name]
        issues = problems(quirk, out)
        verdict = (
            "detected"
            if not issues
            else ("suite misses (known): " if issues == known_gaps(quirk) else "MISSED: ") + "; ".join(issues)
        )
        others = sorted(out.failed - set(quirk.violates))
        lines.append(
            f"{name:{width}}  {','.join(quirk.violates):24}  {verdict}"
            f"  exit {out.exit}  {out.seconds:5.1f} s{'  strict' if out.strict else ''}"
            f"{'  also ' + ','.join(others) if others else ''}"
        )
    return "\n".join(lines)


def selected(quirks: dict[str, Quirk], fast: tuple[str, ...]) -> list[Quirk]:
    """``KC_QUIRKS=fast`` (default: the CI subset ``fast``), ``all``, or a comma-separated list of names."""
    choice = os.environ.get("KC_QUIRKS", "fast").strip()
    if choice == "all":
        return list(quirks.values())
    names = fast if choice == "fast" else tuple(n.strip() for n in choice.split(",") if n.strip())
    unknown = sorted(set(names) - quirks.keys())
    if unknown:
        raise ValueError(f"KC_QUIRKS names unknown quirk(s): {', '.join(unknown)}")
    return [quirks[n] for n in names]
