"""What ``knowledge-conformance observe`` costs the traffic it watches: the latency it adds to each
request, and the throughput of 16 clients through it, against the same upstream without it.

Why: the proxy sits in front of production, so its cost is the figure that decides whether it may.
It runs as users run it (``knowledge-conformance observe`` in its own process, judging beside
forwarding); the upstream is the bundled simulator (``knowledge-sim serve``, a workspace of the
suite's corpus, searches and page reads) and, to show the proxy's own part alone, a static upstream
that answers one fixed search answer at once. Each client has its own Agent Session, run and
reference. Latency: one client, requests alternating direct and through the proxy; throughput: 16
clients for a fixed time, direct then through the proxy. The proxy's report says how many exchanges
it judged and dropped. It prints figures and asserts nothing::

    python benchmarks/observe_proxy.py                   # 300 sequential requests, 16 clients for 10 s
    python benchmarks/observe_proxy.py --requests 1000 --clients 16 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.common.control import Control  # noqa: E402
from conformance.common.served import ServedSimulator, free_port  # noqa: E402
from conformance.server.corpus import bases  # noqa: E402
from conformance.server.corpus import build as corpus  # noqa: E402
from tests.serving import wait_until_it_answers  # noqa: E402

ROUTE = "bench"
STATIC = """
import json, sys, uvicorn
body = json.dumps({"status": "ok", "trust": "reference_only", "hints": [
    {"title": "Homepage binding", "summary": "How a homepage is bound.", "ref": "r" * 300}]}).encode()
headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"),
           (b"content-length", str(len(body)).encode())]
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", server_header=False, date_header=False)
"""


@contextmanager
def static_upstream() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", STATIC, str(port)])
    try:
        wait_until_it_answers(f"http://127.0.0.1:{port}", process, None, "the server", 60)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def cpu_seconds(pid: int) -> float:
    """User and system CPU of one process so far (Linux; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextmanager
def observing(upstream: str, reports: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``knowledge-conformance observe`` in front of ``upstream``; after the block, its results.json.
    ``results["pids"]``: the proxy's process and its judge's, while it runs."""
    port = free_port()
    command = [sys.executable, "-m", "conformance.cli", "observe", "--upstream", upstream]
    command += ["--listen", f"127.0.0.1:{port}", "--reports", str(reports), "--queue", "1024"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env={**os.environ})
    results: dict[str, Any] = {}
    try:
        wait_until_it_answers(f"http://127.0.0.1:{port}", process, None, "the server", 60)
        results["pids"] = [process.pid, *children(process.pid)[-1:]]
        yield f"http://127.0.0.1:{port}", results
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(120)
        found = reports / "results.json"
        if found.is_file():
            results.update(json.loads(found.read_text("utf-8")))


def clients(url: str, control: Control, count: int) -> list[dict[str, Any]]:
    """Per client: a token of its own, a run, and a reference to read."""
    out = []
    for i in range(count):
        token = control.mint(f"user{i}", ROUTE)["token"]
        auth = {"Authorization": f"Bearer {token}"}
        ids = {"client_conversation_id": f"b{i}", "client_turn_id": "t", "user_message_id": "m"}
        run = httpx.post(f"{url}/agent-api/v1/workspaces/{ROUTE}/turns", json={**ids, "user_input": "x"}, headers=auth)
        run_id = run.json()["run_id"]
        search = {"query": "homepage binding", "run_id": run_id}
        found = httpx.post(f"{url}/agent-api/v1/workspaces/{ROUTE}/knowledge/search", json=search, headers=auth)
        out.append({"auth": auth, "search": search, "read": {"ref": found.json()["hints"][0]["ref"], "run_id": run_id}})
    return out


def _request(i: int, client: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Searches and page reads, alternately."""
    if i % 2:
        return f"/agent-api/v1/workspaces/{ROUTE}/knowledge/read", client["read"]
    return f"/agent-api/v1/workspaces/{ROUTE}/knowledge/search", client["search"]


def latency(direct: str, proxied: str, client: dict[str, Any], count: int) -> dict[str, list[float]]:
    """One client, requests alternating direct and proxied (so drift in the machine's load hits both)."""
    taken: dict[str, list[float]] = {"direct": [], "proxied": []}
    with httpx.Client(headers=client["auth"]) as http:
        for i in range(count * 2):
            which = "direct" if i % 2 == 0 else "proxied"
            path, body = _request(i // 2, client)
            started = time.perf_counter()
            answer = http.post((direct if which == "direct" else proxied) + path, json=body)
            taken[which].append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text[:200]
    return taken


async def _load(base: str, all_clients: list[dict[str, Any]], seconds: float) -> list[float]:
    taken: list[float] = []
    stop = time.monotonic() + seconds

    async def one(client: dict[str, Any]) -> None:
        async with httpx.AsyncClient(base_url=base, headers=client["auth"], timeout=60) as http:
            i = 0
            while time.monotonic() < stop:
                path, body = _request(i, client)
                started = time.perf_counter()
                answer = await http.post(path, json=body)
                taken.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text[:200]
                i += 1

    await asyncio.gather(*(one(c) for c in all_clients))
    return taken


def _ms(values: list[float], q: float) -> float:
    return 1000 * statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else 0.0


def _line(label: str, values: list[float], seconds: float | None = None) -> str:
    rate = f"{len(values) / seconds:7.0f} req/s" if seconds else " " * 13
    return f"  {label:<28} {len(values):6d} req  {rate}  p50 {_ms(values, 50):7.2f} ms  p95 {_ms(values, 95):7.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="sequential requests each way (latency)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (throughput)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each throughput run lasts")
    args = parser.parse_args()
    docs = corpus(seed=7)
    work = Path(tempfile.mkdtemp(prefix="observe-bench-"))
    print(
        f"observe proxy benchmark: {args.requests} sequential requests each way, {args.clients} clients for {args.seconds:g} s"
    )
    with ServedSimulator(seed=1) as sim:
        control = Control.of_core(sim.url, sim.control_token)
        control.create_workspace(ROUTE)
        control.replace_corpus(ROUTE, bases({k: docs[k] for k in ("alpha", "filler0", "filler1", "filler2", "ascii")}))
        all_clients = clients(sim.url, control, args.clients)
        for name, upstream in (("static upstream", None), ("simulator", sim.url)):
            with static_upstream() if upstream is None else _same(upstream) as base:
                with observing(base, work / name.replace(" ", "-")) as (proxy, results):
                    taken = latency(base, proxy, all_clients[0], args.requests)
                    direct_load = asyncio.run(_load(base, all_clients, args.seconds))
                    before = [cpu_seconds(pid) for pid in results["pids"]]
                    proxied_load = asyncio.run(_load(proxy, all_clients, args.seconds))
                    used = [cpu_seconds(pid) - b for pid, b in zip(results["pids"], before, strict=True)]
                print(f"\n{name}:")
                print(_line("1 client, direct", taken["direct"]))
                print(_line("1 client, through observe", taken["proxied"]))
                added = _ms(taken["proxied"], 50) - _ms(taken["direct"], 50)
                added95 = _ms(taken["proxied"], 95) - _ms(taken["direct"], 95)
                print(f"  added latency: p50 {added:+.2f} ms, p95 {added95:+.2f} ms")
                print(_line(f"{args.clients} clients, direct", direct_load, args.seconds))
                print(_line(f"{args.clients} clients, through observe", proxied_load, args.seconds))
                print(
                    f"  through observe / direct: {len(proxied_load) / max(1, len(direct_load)):.0%} of the direct rate"
                )
                per = [f"{1000 * u / max(1, len(proxied_load)):.2f}" for u in used]
                print(f"  CPU per proxied exchange at {args.clients} clients: proxy {per[0]} ms, judge {per[-1]} ms")
                summary = results.get("summary", {})
                print(
                    f"  observe judged {summary.get('observed_judged', '?')} of {summary.get('observed_exchanges', '?')} "
                    f"exchanges, dropped {summary.get('observed_dropped', '?')}; verdict {results.get('verdict', '?')}"
                )
        control.close()
    return 0


@contextmanager
def _same(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    raise SystemExit(main())
