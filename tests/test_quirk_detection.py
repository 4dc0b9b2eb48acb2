"""Test the tester: for every simulator quirk, the suite must fail a requirement the quirk names."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from simulator.quirks import QUIRKS, Quirk

# Quirks that deviate only from this project's choices where the seed leaves the behaviour
# open (CHOICES.md): a default run must pass them, a strict run (codes.strict) must not.
STRICT_ONLY = {"max_bytes_unchecked"}


def _run(quirk: Quirk, reports: Path) -> tuple[str, set[str], int, float]:
    started = time.monotonic()
    out = reports / quirk.name
    strict: list[str] = []
    if quirk.name in STRICT_ONLY:
        out.mkdir(parents=True)
        (out / "strict.toml").write_text("[wire]\ncodes = {strict = true}\n", "utf-8")
        strict = ["--target-config", str(out / "strict.toml")]
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-q", "-p", "no:cacheprovider", *strict,
           "--sim-quirk", quirk.name, "--no-shrink", "--reports", str(out), *[a for rid in quirk.violates for a in ("--requirement", rid)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    results = json.loads((out / "results.json").read_text("utf-8"))
    failed = {r["id"] for r in results["requirements"] if r["status"] == "failed"}
    return quirk.name, failed, proc.returncode, time.monotonic() - started


@pytest.fixture(scope="module")
def detection(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], int]]:
    reports = tmp_path_factory.mktemp("quirks")
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(lambda q: _run(q, reports), QUIRKS.values()))
    table = {name: (failed, code) for name, failed, code, _ in rows}
    seconds = {name: took for name, _, _, took in rows}
    width = max(len(n) for n in table)
    print("\nquirk detection table (quirk, failing requirement IDs among those it names)")
    for name, (failed, code) in sorted(table.items()):
        named = [rid for rid in QUIRKS[name].violates if rid in failed]
        print(f"  {name:{width}}  {'DETECTED' if named else 'MISSED  '}  {','.join(named) or '-'}  (exit {code}, {seconds[name]:.1f} s)")
    return table


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_every_quirk_is_detected(detection: dict[str, tuple[set[str], int]], name: str) -> None:
    failed, code = detection[name]
    named = set(QUIRKS[name].violates) & failed
    assert named, f"quirk {name} (violates {QUIRKS[name].violates}) went undetected; failed: {sorted(failed)}"
    assert code != 0, f"a run with quirk {name} exited 0"
