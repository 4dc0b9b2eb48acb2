"""How the suite's run time grows with the distance to the Core.

Why: real Cores are remote (staging behind a load balancer, another region, a VPN), and a
suite that waits one round trip per request, one at a time, is slow exactly where it is used.
This serves the bundled simulator as a live Core with control, puts a proxy in front of it that
delays every chunk by a fixed time each way, and runs the default suite (Core HTTP, no MCP)
through it: each delay with the serial run and with the given concurrency. It prints wall time,
the CPU time the whole machine spent meanwhile (Linux; the suite, the Core and the proxy share
it: a run far below two CPU seconds a second waits on round trips, not on the cores), the run's
request count, requests per second and the verdict, and asserts nothing::

    python benchmarks/latency.py                       # 0, 20 and 50 ms, serial and concurrent
    python benchmarks/latency.py --delays 0 50 --concurrency 4 8
    python benchmarks/latency.py --gate no-control     # the scoped gate, server@no-control

``--gate no-control`` serves the simulator as most staging Cores are: without the control
extension, seeded from the exported corpus kit (``knowledge-sim serve --no-control --corpus``),
judged from the target configuration it writes, with ``--scope server@no-control``.
``--gate control-mcp`` serves the same staging Core with control and its Agent Session MCP path
(streamable HTTP, behind the same proxy) and runs every check of both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.common.served import ServedSimulator  # noqa: E402
from tests.latency_proxy import LatencyProxy  # noqa: E402

TOKEN_ENV = "KC_LATENCY_CONTROL_TOKEN"
CONTROL_ENV = "KNOWLEDGE_SIM_CONTROL_TOKEN"
"""Where the staging simulator reads its control credential, and its written target names it."""


def machine_cpu() -> float | None:
    """CPU seconds every core of this machine has spent busy since boot (None off Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def run(url: str, token: str, concurrency: int, work: Path, gate: Path | None, durations: int = 0) -> dict[str, object]:
    config = work / "target.toml"
    mcp = ["--mcp-target", "none"]
    if gate is None:
        config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "{TOKEN_ENV}"}}\n', "utf-8")
        scope: list[str] = []
    else:  # the staging Core's own configuration, every URL in it the proxy's
        served = re.search(r'(?m)^url = "(.*)"$', gate.read_text("utf-8"))
        assert served is not None
        config.write_text(gate.read_text("utf-8").replace(served.group(1), url) + DOCUMENTS, "utf-8")
        control = "[control]" in gate.read_text("utf-8")
        scope = [] if control else ["--scope", "server@no-control"]
        mcp = [] if control else mcp
    reports = work / "reports"
    command = [sys.executable, "-m", "conformance.cli", "run", "--target", url, "--target-config", str(config)]
    command += [*mcp, "--reports", str(reports), *scope]
    if concurrency > 1:
        command += ["--concurrency", str(concurrency)]
    if durations:
        command += ["--", f"--durations={durations}"]
    started, busy = time.perf_counter(), machine_cpu()
    env = {**os.environ, TOKEN_ENV: token, CONTROL_ENV: token}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    seconds = time.perf_counter() - started
    cpu = None if busy is None or (now := machine_cpu()) is None else round(now - busy, 1)
    try:
        results = json.loads((reports / "results.json").read_text("utf-8"))
    except (OSError, ValueError):
        results = {}
    if durations:  # where the time went: the slowest tests, as pytest lists them
        slowest = done.stdout.partition(" durations ")[2].partition("\n")[2].partition("\n=")[0]
        print("\n".join("    " + line for line in slowest.splitlines() if line.strip()), flush=True)
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": cpu,
        "requests": results.get("requests"),
        "verdict": results.get("verdict", f"exit {done.returncode}"),
    }


DOCUMENTS = '\n[target.documents]\nlong = "overdoc"\nmultibyte = "cutsdoc"\n'
"""The kit's documents the page and budget rules read (as ``tests/test_no_control_gate.py`` names them)."""


@contextmanager
def staging(tmp: Path, control: bool) -> Iterator[tuple[int, str, Path]]:
    """A staging simulator seeded from the kit: its port, its control token, its target file."""
    kit, target = tmp / "kit", tmp / "staging.toml"
    subprocess.run([sys.executable, "-m", "conformance.cli", "corpus", "export", str(kit)], check=True)
    cmd = [sys.executable, "-m", "simulator.cli", "serve", "--port", "0", "--corpus", str(kit)]
    cmd += ["--route", "staging", "--write-target", str(target), *([] if control else ["--no-control"])]
    token = secrets.token_hex(16)
    log = (tmp / "staging.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env={**os.environ, CONTROL_ENV: token})
    try:
        deadline = time.monotonic() + 60
        while not target.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the file is written whole before the server listens, give it the moment
        url = re.search(r'(?m)^url = "(.*)"$', target.read_text("utf-8"))
        assert url is not None, "the staging Core wrote no target URL"
        yield int(url.group(1).rsplit(":", 1)[1]), token, target
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@contextmanager
def core_for(gate: str, tmp: Path) -> Iterator[tuple[int, str, Path | None]]:
    if gate != "control":
        with staging(tmp, control=gate == "control-mcp") as served:
            yield served
        return
    with ServedSimulator() as core:
        yield core.port, core.control_token, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0, 20, 50], help="milliseconds each way")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--gate", choices=["control", "no-control", "control-mcp"], default="control")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--durations", type=int, default=0, help="list the N slowest tests of each run")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="latency-") as tmp, core_for(args.gate, Path(tmp)) as (port, token, gate):
        for delay in args.delays:
            with LatencyProxy(port, delay / 1000) as proxy:
                for concurrency in args.concurrency:
                    work = Path(tmp) / f"{delay:g}-{concurrency}"
                    work.mkdir()
                    row = {
                        "delay_ms": delay,
                        "concurrency": concurrency,
                        **run(proxy.url, token, concurrency, work, gate, args.durations),
                    }
                    rows.append(row)
                    if not args.json:
                        rate = (row["requests"] or 0) / max(float(row["seconds"]), 0.1)
                        cpu = "" if row["cpu_seconds"] is None else f"  CPU {row['cpu_seconds']:>5} s"
                        print(
                            f"{delay:>5g} ms  concurrency {concurrency:>2}  {row['seconds']:>7} s{cpu}  "
                            f"{row['requests']} requests  {rate:7.1f} req/s  {row['verdict']}",
                            flush=True,
                        )
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
