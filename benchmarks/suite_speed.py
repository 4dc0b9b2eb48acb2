"""How fast the conformance suite itself runs, and where its time goes.

Why: users gate CI on the default run, so its wall time is a feature. This runs the
whole default suite (the same command a user runs) against three targets, one after
the other in the same invocation so their ratios compare like with like on a shared
machine:

- ``sim``: the bundled simulator in-process (the default);
- ``sim+http``: the same simulator served on loopback in the suite's own process;
- ``served``: ``knowledge-sim serve`` in its own process, as a live Core with control.

For each: wall time, the run's request count and its effective request rate, that rate
as a ratio to a raw client's rate on the same served simulator (a tight loop of
capabilities requests: the most the loopback can give), and the time per test module
from the JUnit report. It prints a table and asserts nothing::

    python benchmarks/suite_speed.py              # all three targets
    python benchmarks/suite_speed.py --targets sim --repeat 3
    python benchmarks/suite_speed.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from conformance.cli import SUITE_ARGS
from conformance.common.control import CONTROL_BASE
from conformance.common.served import ServedSimulator

SUITE = [sys.executable, "-m", "pytest", "-q", *SUITE_ARGS]
TARGETS = ("sim", "sim+http", "served")
RAW_REQUESTS = 2000


def _modules(junit: Path) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown as JUnit counts them)."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "?").rsplit(".", 1)[-1] if case.get("classname") else "?"
        seconds[module] += float(case.get("time", 0.0))
    return dict(seconds)


def run_suite(target: str, served_url: str, token: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="suite-speed-") as tmp:
        reports = Path(tmp) / "reports"
        cmd = [*SUITE, f"--report-dir={reports}"]
        env = None
        if target == "served":
            config = Path(tmp) / "target.toml"
            config.write_text(
                f'[control]\nurl = "{served_url}{CONTROL_BASE}"\ntoken = {{env = "KC_SPEED_CONTROL"}}\n', "utf-8"
            )
            cmd += [f"--target={served_url}", f"--target-config={config}", "--mcp-target=none"]
            env = {**os.environ, "KC_SPEED_CONTROL": token}
        else:
            cmd += [f"--target={target}"]
        began = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - began
        results = json.loads((reports / "results.json").read_text("utf-8"))
        return {
            "target": target,
            "exit": proc.returncode,
            "verdict": results["verdict"],
            "wall_s": round(wall, 2),
            "requests": results["requests"],
            "tests": len(results["tests"]),
            "modules": _modules(reports / "junit.xml"),
        }


def raw_rate(url: str) -> float:
    """Requests per second of one raw httpx client on the served simulator's capabilities path."""
    with httpx.Client(base_url=url) as http:
        path = "/agent-api/v1/workspaces/demo/knowledge/capabilities"
        http.get(path)
        began = time.perf_counter()
        for _ in range(RAW_REQUESTS):
            http.get(path)
        return RAW_REQUESTS / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--repeat", type=int, default=1, help="runs per target (the table shows each)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    served = ServedSimulator()
    try:
        raw = raw_rate(served.url)
        rows = [
            run_suite(target, served.url, served.control_token) for _ in range(args.repeat) for target in args.targets
        ]
    finally:
        served.close()
    for row in rows:
        row["rate"] = round(row["requests"] / row["wall_s"], 1)
        row["x_raw"] = round(row["rate"] / raw, 3)
    if args.json:
        print(json.dumps({"raw_client_rate": round(raw, 1), "runs": rows}, indent=2))
        return 0
    print(
        f"raw client on the served simulator: {raw:,.0f} req/s ({RAW_REQUESTS} capabilities requests, one connection)\n"
    )
    print(
        f"{'target':<10} {'exit':>4} {'verdict':<13} {'tests':>5} {'wall s':>7} {'requests':>8} {'req/s':>7} {'x raw':>6}"
    )
    for row in rows:
        print(
            f"{row['target']:<10} {row['exit']:>4} {row['verdict']:<13} {row['tests']:>5} {row['wall_s']:>7.1f} "
            f"{row['requests']:>8} {row['rate']:>7.1f} {row['x_raw']:>6.3f}"
        )
    print("\nseconds per test module (JUnit times; the first run of each target):")
    firsts = {row["target"]: row for row in reversed(rows)}
    modules = sorted({m for row in firsts.values() for m in row["modules"]})
    print(f"{'module':<24}" + "".join(f"{t:>10}" for t in firsts))
    for module in modules:
        print(f"{module:<24}" + "".join(f"{firsts[t]['modules'].get(module, 0.0):>10.1f}" for t in firsts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
