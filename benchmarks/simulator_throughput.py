"""Throughput of the served simulator beside a bare Starlette JSON endpoint, in one run.

A script, not a test: it measures and prints a table, it asserts nothing. Both servers run as
subprocesses on uvicorn (the simulator through ``knowledge-sim serve``), on the same machine as
the client, so the bare endpoint's figures say what this machine, this client and uvicorn allow,
and each simulator row is read as a ratio to them.

    python benchmarks/simulator_throughput.py                       # 1k and 10k documents, 1 and 16 clients
    python benchmarks/simulator_throughput.py --with-100k           # and 100k (a few minutes, about 1 GB)
    python benchmarks/simulator_throughput.py --sizes 1000 --clients 1,4 --duration 2
    python benchmarks/simulator_throughput.py --json                # machine-readable
    git archive COMMIT simulator | tar -x -C ../before             # before/after in one run:
    python benchmarks/simulator_throughput.py --compare before=../before

Per corpus size the script writes a synthetic JSONL corpus (documents of about 2 KB drawn from a
Zipf-like vocabulary, generated from ``--seed``), starts the simulator on it, and measures:

- ``bare``: ``GET`` of a constant JSON object from a Starlette route, nothing else;
- ``capabilities``: the simulator's capabilities endpoint (token and route checks);
- ``search selective``: a search for a word in about one document in a thousand;
- ``search broad``: a search for a word in nearly every document;
- ``search mid x3``: three words of middle frequency (each in about one document in ten to twenty),
  as a person types a query;
- ``search broad x32``: 32 words, each in most documents (the contract's longest useful query);
- ``read``: the first page (16 KB max) of a referenced document;
- ``capabilities beside broad searches``: at N clients, one client's capabilities requests while
  the other N - 1 send broad searches: does a slow search hold up an unrelated request?

Each cell runs ``--clients`` keep-alive connections, each sending its next request when the last
answer is in, for ``--duration`` seconds after a short warm-up. The client is a minimal HTTP/1.1
client over asyncio streams (no HTTP library in the loop), so its own cost stays small next to the
servers'. Also reported: start-up time (process start to first answer, corpus loaded), the
start-up again on the store the first start kept (``--database``: the corpus and its index are
reused, not loaded), the resident memory after the run, and how search latency grows with the
corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from random import Random
from typing import Any

ROUTE = "demo"
API = f"/agent-api/v1/workspaces/{ROUTE}"
SELECTIVE = "needle"  # in one document of a thousand
BROAD = "common"  # in 98% of documents
MIXED = "capabilities beside broad searches"  # one client measured while the others search broadly
_BARE_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

BODY = {"schema_version": "bench.v1", "ok": True, "limits": {"a": 1, "b": 2}}

async def hello(request):
    return JSONResponse(BODY)

app = Starlette(routes=[Route("/bare", hello)])
"""


# ------------------------------------------------------------------ corpus
def _vocabulary(rng: Random, size: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "qui", "ny", "pha", "zet", "ob", "ri", "gan", "ul"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


MID_RANKS = (150, 300, 600)  # Zipf ranks of the "mid x3" words: each in roughly 5-15% of documents


def write_corpus(path: Path, documents: int, seed: int) -> list[str]:
    """A JSONL corpus of ``documents`` items of about 2 KB; returns the 32 most common words, then the mid words."""
    rng = Random(seed)
    vocab = _vocabulary(rng, 20_000)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    cumulative: list[float] = []
    total = 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    with path.open("w", encoding="utf-8") as out:
        for n in range(documents):
            words = rng.choices(vocab, cum_weights=cumulative, k=300)
            if rng.random() < 0.98:
                words[rng.randrange(len(words))] = BROAD
            if n % 1000 == 7:
                words[rng.randrange(len(words))] = SELECTIVE
            text = " ".join(words)
            out.write(
                json.dumps(
                    {"base": f"base{n % 4}", "id": f"doc-{n:06d}", "title": " ".join(words[:5]), "content": text}
                )
                + "\n"
            )
    return vocab[:32] + [vocab[r] for r in MID_RANKS]


# ------------------------------------------------------------------ client
class Connection:
    """One keep-alive HTTP/1.1 connection; ``request`` returns (status, body)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        body = await self.reader.readexactly(int(match.group(1))) if match else b""
        return status, body

    def close(self) -> None:
        self.writer.close()


def encode(method: str, path: str, token: str | None = None, body: dict[str, Any] | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


@dataclass
class Cell:
    size: int
    endpoint: str
    clients: int
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float


async def _drive(
    port: int, raw: bytes, clients: int, duration: float, warmup: float, beside: tuple[bytes, int] | None = None
) -> tuple[float, int, list[float]]:
    """Requests per second, errors and latencies of the requests sent after the warm-up. When a
    request takes longer than the whole window (a broad search over a large corpus), every
    request is counted, warm-up included, over the time they took. ``beside``: (request, n) sent
    meanwhile on n more connections, unmeasured, until the measured ones are done."""
    conns = [await Connection.open(port) for _ in range(clients)]
    background = [await Connection.open(port) for _ in range(beside[1] if beside else 0)]
    sent_at: list[tuple[float, float, int]] = []
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration
    done = asyncio.Event()

    async def loop(conn: Connection) -> None:
        while True:
            sent = time.perf_counter()
            if sent >= stop_at:
                return
            status, _ = await conn.request(raw)
            sent_at.append((sent, time.perf_counter() - sent, status))

    async def load(conn: Connection, other: bytes) -> None:
        while not done.is_set():
            await conn.request(other)

    async def measured() -> None:
        await asyncio.gather(*(loop(c) for c in conns))
        done.set()

    try:
        await asyncio.gather(measured(), *(load(c, beside[0]) for c in background if beside))
    finally:
        for c in [*conns, *background]:
            c.close()
    kept = [m for m in sent_at if m[0] >= measure_from]
    if len(kept) >= clients:
        rps = len(kept) / duration
    else:
        kept, rps = sent_at, len(sent_at) / (time.perf_counter() - start)
    return rps, sum(1 for m in kept if m[2] != 200), [m[1] for m in kept]


def measure(
    port: int,
    raw: bytes,
    clients: int,
    duration: float,
    size: int,
    endpoint: str,
    beside: tuple[bytes, int] | None = None,
) -> Cell:
    rps, errors, lat = asyncio.run(_drive(port, raw, clients, duration, warmup=min(0.5, duration / 4), beside=beside))
    count = len(lat)
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else float("nan")

    return Cell(size, endpoint, clients, count, errors, round(rps, 1), pct(0.50), pct(0.99))


# ------------------------------------------------------------------ servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _wait_ready(port: int, path: str, proc: subprocess.Popen[bytes], timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(encode("GET", path))
                if s.recv(64).startswith(b"HTTP/1.1"):
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start (exit {proc.poll()})")
        time.sleep(0.05)


def start_bare(workdir: Path) -> tuple[subprocess.Popen[bytes], int, float]:
    (workdir / "bare_app.py").write_text(_BARE_APP)
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(port), "--log-level", "warning"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_ready(port, "/bare", proc)
    return proc, port, time.perf_counter() - started


def start_sim(
    corpus: Path,
    stderr_path: Path,
    source: str | None = None,
    database: Path | None = None,
    port: int | None = None,
    reuse_port: bool = False,
) -> tuple[subprocess.Popen[bytes], int, float, str]:
    """``knowledge-sim serve`` on ``corpus``; ``source``: a source tree whose ``simulator`` package to run
    instead; ``database``: the store file to keep (a second start on it reuses what the first kept);
    ``reuse_port``: one of several processes on ``port`` (``--reuse-port``)."""
    port = port or _free_port()
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    started = time.perf_counter()
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simulator.cli",
                "serve",
                "--port",
                str(port),
                "--seed",
                "1",
                "--corpus",
                str(corpus),
                "--no-control",
                *(["--database", str(database)] if database is not None else []),
                *(["--reuse-port"] if reuse_port else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            # Not the caller's folder: `python -m` puts the working folder first on sys.path, so run from
            # a checkout it would import that checkout's simulator, never --compare's source tree.
            cwd=stderr_path.parent,
        )
    _wait_ready(port, f"{API}/knowledge/capabilities", proc)
    while "Agent Session MCP" not in stderr_path.read_text():  # its own banner: another process may share the port
        if proc.poll() is not None:
            raise RuntimeError(f"server did not start (exit {proc.poll()})")
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    tokens = re.findall(r"route demo: account alice, session \S+: (\S+)", stderr_path.read_text())
    if not tokens:
        raise RuntimeError("no demo token in the simulator's start-up lines")
    return proc, port, elapsed, tokens[0]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _prepare(port: int, token: str) -> tuple[str, str]:
    """A run ID and a reference to read, from one turn and one search."""
    conn = await Connection.open(port)
    try:
        status, body = await conn.request(
            encode(
                "POST",
                f"{API}/turns",
                token,
                {
                    "client_conversation_id": "bench",
                    "client_turn_id": f"t{time.time_ns()}",
                    "user_message_id": "m1",
                    "user_input": "benchmark",
                    "knowledge_delivery": "on_demand",
                },
            )
        )
        if status != 200:
            raise RuntimeError(f"turn answered {status}: {body[:200]!r}")
        run_id = json.loads(body)["run_id"]
        status, body = await conn.request(
            encode("POST", f"{API}/knowledge/search", token, {"run_id": run_id, "query": BROAD, "limit": 3})
        )
        hints = json.loads(body).get("hints", []) if status == 200 else []
        if not hints:
            raise RuntimeError(f"search answered {status} without hints: {body[:200]!r}")
        return run_id, hints[0]["ref"]
    finally:
        conn.close()


# ------------------------------------------------------------------ main
def run(
    sizes: list[int],
    clients: list[int],
    duration: float,
    seed: int,
    compare: dict[str, str] | None = None,
    processes: int = 1,
) -> dict[str, Any]:
    """Every cell of every size; with ``compare`` (label -> source tree), those simulators too, each
    cell measured on each simulator in turn so that a busy machine weighs on all of them alike;
    ``processes`` > 1: also this tree as that many processes on one kept store and one port."""
    cells: list[Cell] = []
    servers: list[dict[str, Any]] = []
    variants: dict[str, str | None] = {"": None, **(compare or {})}
    many = f"{processes} processes"
    if processes > 1:
        variants[many] = None
    with tempfile.TemporaryDirectory(prefix="sim-throughput-") as tmp:
        work = Path(tmp)
        bare, bare_port, bare_start = start_bare(work)
        servers.append({"server": "bare", "size": 0, "startup_s": round(bare_start, 2), "rss_mb": _rss_mb(bare.pid)})
        try:
            for size in sizes:
                corpus = work / f"corpus-{size}.jsonl"
                common = write_corpus(corpus, size, seed)
                requests: dict[str, list[tuple[str, int, bytes]]] = {"bare": [("", bare_port, encode("GET", "/bare"))]}
                started: list[tuple[str, subprocess.Popen[bytes], float]] = []
                restarts: dict[str, float] = {}
                broad: dict[int, bytes] = {}
                tokens: dict[int, str] = {}
                try:
                    for label, source in variants.items():
                        kept = work / f"kept-{size}{label}.sqlite"
                        sim, port, startup, token = start_sim(corpus, work / f"sim-{size}{label}.err", source, kept)
                        _stop(sim)  # the first start loads the corpus into the kept store; the second reuses it
                        sim, port, restart, token = start_sim(
                            corpus, work / f"sim-{size}{label}.err", source, kept, reuse_port=label == many
                        )
                        restarts[label] = restart
                        started.append((label, sim, startup))
                        for n in range(1, processes if label == many else 1):
                            more, _, _, _ = start_sim(
                                corpus, work / f"sim-{size}{label}-{n}.err", source, kept, port, reuse_port=True
                            )
                            started.append((f"{label} #{n + 1}", more, restart))
                        run_id, ref = asyncio.run(_prepare(port, token))
                        for name, raw in _requests(token, run_id, ref, common).items():
                            requests.setdefault(name, []).append((label, port, raw))
                        broad[port], tokens[port] = _requests(token, run_id, ref, common)["search broad"], token
                    for n in clients:
                        for name, targets in requests.items():  # each endpoint on each simulator in turn
                            for label, port, raw in targets:
                                if name == MIXED and n == 1:
                                    continue
                                if (
                                    name == "read"
                                ):  # a fresh reference: a slow cell before may have outlived the last one
                                    run_id, ref = asyncio.run(_prepare(port, tokens[port]))
                                    raw = _requests(tokens[port], run_id, ref, common)["read"]
                                beside = (broad[port], n - 1) if name == MIXED else None
                                cell = measure(
                                    port,
                                    raw,
                                    1 if beside else n,
                                    duration,
                                    size,
                                    f"{name} [{label}]" if label else name,
                                    beside,
                                )
                                cell.clients = n  # all connections, the measured one and the rest
                                cells.append(cell)
                                print(
                                    f"  {size:>7} {cell.endpoint:28} c={n:<3} {cell.rps:>8} req/s  p50 {cell.p50_ms} ms  "
                                    f"p99 {cell.p99_ms} ms  errors {cell.errors}",
                                    file=sys.stderr,
                                )
                    for label, _sim, startup in started:
                        if "#" in label:
                            continue
                        servers.append(
                            {
                                "server": f"simulator {label}".strip(),
                                "size": size,
                                "startup_s": round(startup, 2),
                                "restart_s": round(restarts[label], 2),
                                "rss_mb": round(
                                    sum(_rss_mb(p.pid) for name, p, _ in started if name.split(" #")[0] == label), 1
                                ),
                            }
                        )
                finally:
                    for _, sim, _ in started:
                        _stop(sim)
                corpus.unlink()
        finally:
            _stop(bare)
    return {
        "cells": [asdict(c) for c in cells],
        "servers": servers,
        "duration_s": duration,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _requests(token: str, run_id: str, ref: str, common: list[str]) -> dict[str, bytes]:
    def search(query: str) -> bytes:
        return encode("POST", f"{API}/knowledge/search", token, {"run_id": run_id, "query": query, "limit": 3})

    return {
        "capabilities": encode("GET", f"{API}/knowledge/capabilities", token),
        "search selective": search(SELECTIVE),
        "search broad": search(BROAD),
        "search mid x3": search(" ".join(common[32:35])),
        "search broad x32": search(" ".join(common[:32])),
        "read": encode("POST", f"{API}/knowledge/read", token, {"run_id": run_id, "ref": ref}),
        MIXED: encode("GET", f"{API}/knowledge/capabilities", token),
    }


def _split(endpoint: str) -> tuple[str, str]:
    """("search broad", "before") from "search broad [before]"; this tree's rows have the label ""."""
    name, _, label = endpoint.partition(" [")
    return name, label.rstrip("]")


def table(result: dict[str, Any]) -> str:
    """One row per corpus size, client count and endpoint; with compared simulators, one column
    group per simulator: req/s, its ratio to the bare endpoint's in the same run, p50 and p99."""
    cells = [Cell(**c) for c in result["cells"]]
    bare = {(c.size, c.clients): c.rps for c in cells if c.endpoint == "bare"}
    labels = list(dict.fromkeys(_split(c.endpoint)[1] for c in cells if c.endpoint != "bare"))
    by_key = {(c.size, c.clients, *_split(c.endpoint)): c for c in cells}
    heads = [f"{label or 'this tree'}" for label in labels]
    lines = [
        "| docs | clients | endpoint | "
        + " | ".join(f"{h}: req/s (× bare), p50 / p99 ms" for h in heads)
        + " | errors |",
        "|---:|---:|---|" + "---:|" * len(labels) + "---:|",
    ]
    rows = dict.fromkeys((c.size, c.clients, _split(c.endpoint)[0]) for c in cells)
    for size, clients, name in rows:
        if name == "bare":
            b = by_key[(size, clients, "bare", "")]
            lines.append(
                f"| {size} | {clients} | bare Starlette | "
                + " | ".join([f"{b.rps:.0f} (1.00), {b.p50_ms} / {b.p99_ms}"] + [""] * (len(labels) - 1))
                + f" | {b.errors} |"
            )
            continue
        groups, errors = [], 0
        for label in labels:
            c = by_key.get((size, clients, name, label))
            if c is None:
                groups.append("")
                continue
            ratio = c.rps / bare[(size, clients)] if bare.get((size, clients)) else float("nan")
            groups.append(
                f"{c.rps:.0f} ({ratio:.2f}), {c.p50_ms} / {c.p99_ms}"
                if c.rps >= 100
                else f"{c.rps:.2g} ({ratio:.3f}), {c.p50_ms} / {c.p99_ms}"
            )
            errors += c.errors
        lines.append(f"| {size} | {clients} | {name} | " + " | ".join(groups) + f" | {errors} |")
    lines += [
        "",
        "| server | docs | start-up s (fresh corpus) | start-up s (kept store) | RSS MB |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s['server']} | {s['size']} | {s['startup_s']} | {s.get('restart_s', '')} | {s['rss_mb']} |"
        for s in result["servers"]
    ]
    sizes = sorted({c.size for c in cells})
    if len(sizes) > 1:
        lines += ["", f"Search p50 growth at 1 client, {sizes[0]} → {sizes[-1]} documents:"]
        for name in dict.fromkeys(c.endpoint for c in cells if c.endpoint.startswith("search")):
            first = [c.p50_ms for c in cells if c.endpoint == name and c.size == sizes[0] and c.clients == 1]
            last = [c.p50_ms for c in cells if c.endpoint == name and c.size == sizes[-1] and c.clients == 1]
            if first and last and first[0] > 0:
                lines.append(f"- {name}: {first[0]} → {last[0]} ms ({last[0] / first[0]:.0f}×)")
    lines += [
        "",
        f"{result['cpus']} CPUs, load average at the end {result['load_average']}, {result['duration_s']} s per cell.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000", help="corpus sizes, comma-separated (default 1000,10000)")
    parser.add_argument(
        "--with-100k", action="store_true", help="add 100000 documents (minutes of start-up, about 1 GB)"
    )
    parser.add_argument("--clients", default="1,16", help="concurrent connections per cell, comma-separated")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per cell (after a warm-up)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic corpus")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also serve the simulator package of the source tree DIR (e.g. a checkout of an earlier commit), "
        "its rows labelled [LABEL] (repeatable)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="also serve this tree as N knowledge-sim processes on one kept store and one port (--reuse-port)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([100_000] if args.with_100k else [])
    compare = dict(item.split("=", 1) for item in args.compare)
    result = run(
        sizes, [int(c) for c in args.clients.split(",") if c], args.duration, args.seed, compare, args.processes
    )
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
