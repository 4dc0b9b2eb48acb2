"""How the suite's run time grows with the distance to the Core.

Why: real Cores are remote (staging behind a load balancer, another region, a VPN), and a
suite that waits one round trip per request, one at a time, is slow exactly where it is used.
This serves the bundled simulator as a live Core with control, puts a proxy in front of it that
delays every chunk by a fixed time each way, and runs the default suite (Core HTTP, no MCP)
through it: each delay with the serial run and with the given concurrency. It prints wall time,
the run's request count, requests per second and the verdict, and asserts nothing::

    python benchmarks/latency.py                       # 0, 20 and 50 ms, serial and concurrent
    python benchmarks/latency.py --delays 0 50 --concurrency 4 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.target.served import ServedSimulator  # noqa: E402
from tests.latency_proxy import LatencyProxy  # noqa: E402

TOKEN_ENV = "KC_LATENCY_CONTROL_TOKEN"


def run(url: str, token: str, concurrency: int, work: Path) -> dict[str, object]:
    config = work / "target.toml"
    config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "{TOKEN_ENV}"}}\n', "utf-8")
    reports = work / "reports"
    command = [sys.executable, "-m", "conformance.cli", "run", "--target", url, "--target-config", str(config)]
    command += ["--mcp-target", "none", "--reports", str(reports)]
    if concurrency > 1:
        command += ["--concurrency", str(concurrency)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, TOKEN_ENV: token}, cwd=work)
    seconds = time.perf_counter() - started
    try:
        results = json.loads((reports / "results.json").read_text("utf-8"))
    except (OSError, ValueError):
        results = {}
    return {
        "seconds": round(seconds, 1),
        "requests": results.get("requests"),
        "verdict": results.get("verdict", f"exit {done.returncode}"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0, 20, 50], help="milliseconds each way")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with ServedSimulator() as core, tempfile.TemporaryDirectory(prefix="latency-") as tmp:
        for delay in args.delays:
            with LatencyProxy(core.port, delay / 1000) as proxy:
                for concurrency in args.concurrency:
                    work = Path(tmp) / f"{delay:g}-{concurrency}"
                    work.mkdir()
                    row = {
                        "delay_ms": delay,
                        "concurrency": concurrency,
                        **run(proxy.url, core.control_token, concurrency, work),
                    }
                    rows.append(row)
                    if not args.json:
                        rate = (row["requests"] or 0) / max(float(row["seconds"]), 0.1)
                        print(
                            f"{delay:>5g} ms  concurrency {concurrency:>2}  {row['seconds']:>7} s  "
                            f"{row['requests']} requests  {rate:7.1f} req/s  {row['verdict']}",
                            flush=True,
                        )
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
