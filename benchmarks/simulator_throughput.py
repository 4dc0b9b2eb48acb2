"""Throughput and CPU per request of the served simulator beside two yardsticks, in one run.

A script, not a test: it measures and prints a table, it asserts nothing. Every server runs as a
subprocess on the same HTTP stack (uvicorn with the same settings, one process: the simulator
through ``knowledge-sim serve``, the yardsticks through the same serving function), on the same
machine as the client:

- ``bare``: ``GET`` of a constant JSON object from a Starlette route, nothing else: what this
  machine, this client and the stack allow;
- ``anchor``: a minimal Starlette app doing only the essential work of each endpoint (token check,
  JSON body, the same tantivy query over the same corpus, HMAC-signed references, the same page
  fit; see ``_ANCHOR_APP``): what the simulator's generality costs is its distance to this.

Each simulator row is read as ratios to them: of requests per second, and of CPU time per request
(the server's processes and threads, from /proc), which a busy machine disturbs less.

    python benchmarks/simulator_throughput.py                       # 1k and 10k documents, 1 and 16 clients
    python benchmarks/simulator_throughput.py --with-100k           # and 100k (a few minutes, about 1 GB)
    python benchmarks/simulator_throughput.py --sizes 1000 --clients 1,4 --duration 2
    python benchmarks/simulator_throughput.py --json                # machine-readable
    git archive COMMIT simulator | tar -x -C ../before             # before/after in one run:
    python benchmarks/simulator_throughput.py --compare before=../before

Per corpus size the script writes a synthetic JSONL corpus (documents of about 2 KB drawn from a
Zipf-like vocabulary, generated from ``--seed``), starts the simulator and the anchor on it, and
measures:

- ``capabilities``: the capabilities endpoint (token and route checks);
- ``search selective``: a search for a word in about one document in a thousand;
- ``search varied``: two words of middle to low frequency, a different pair for every request
  (the same sequence on every server): no answer is ever a repeat, so no cache serves it;
- ``search broad``: a search for a word in nearly every document;
- ``search broad x3``: that word and the two commonest words (each in nearly every document);
- ``search mid x3``: three words of middle frequency (each in about one document in ten to twenty),
  as a person types a query;
- ``search broad x32``: 32 words, each in most documents (the contract's longest useful query);
- ``read``: the first page (16 KB max) of a referenced document;
- ``capabilities beside broad searches``: at N clients, one client's capabilities requests while
  the other N - 1 send broad searches: does a slow search hold up an unrelated request?

Each cell runs ``--clients`` keep-alive connections, each sending its next request when the last
answer is in, for ``--duration`` seconds after a short warm-up. Repeated requests are what they
are: a server that caches answers (the simulator caches search rankings) serves them from its
cache, the anchor never does; "search varied" is the row without that difference. The client is
a minimal HTTP/1.1 client over asyncio streams (no HTTP library in the loop), so its own cost
stays small next to the servers'. Also reported: start-up time (process start to first answer,
corpus loaded), the start-up again on the store the first start kept (``--database``: the corpus
and its index are reused, not loaded), the resident memory after the run, and how search latency
grows with the corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
# The same-work anchor: what each Core endpoint cannot do without, in a minimal Starlette app and
# nothing else (no schema validation, no store, no middleware, one identity, one workspace): the
# token check, the JSON body, the run's owner, the same tantivy query (schema, weights, top-k, ties
# by row) over the same corpus, HMAC-signed references and cursors of the same claims, the search
# response fitted to 4096 bytes and the read page fitted to its byte budget by bisection, orjson
# for every encoding. What the simulator costs beyond it is what its generality costs.
_ANCHOR_APP = r"""
import base64, bisect, hashlib, hmac, os, re, time, uuid

import orjson
import tantivy
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

TOKEN, ROUTE, HUB, ACCOUNT, SESSION = os.environ["ANCHOR_TOKEN"], "demo", "https://hub.example", "alice", "s-1"
KEY = hashlib.sha256(b"anchor").digest()
RUNS = set()
SPLIT = re.compile(r"[^\W_]+")
KNOWLEDGE = "bailing.agent-knowledge.v1"

builder = tantivy.SchemaBuilder()
builder.add_unsigned_field("rid", stored=True, indexed=True, fast=True)
builder.add_text_field("base_id", tokenizer_name="raw", index_option="basic")
builder.add_text_field("title", index_option="freq")
builder.add_text_field("content", index_option="freq")
SCHEMA = builder.build()
INDEX = tantivy.Index(SCHEMA, sort_by_field="rid")
DOCS, BY_ITEM = [], {}
writer = INDEX.writer(heap_size=200_000_000, num_threads=1)
with open(os.environ["ANCHOR_CORPUS"], "rb") as lines:
    for rid, row in enumerate(sorted(map(orjson.loads, lines), key=lambda row: row["id"]), 1):
        DOCS.append((row["id"], f"rev-{rid}", row["title"], row["content"]))
        BY_ITEM[row["id"]] = rid - 1
        doc = tantivy.Document()
        doc.add_unsigned("rid", rid)
        doc.add_text("base_id", row["base"])
        doc.add_text("title", row["title"])
        doc.add_text("content", row["content"])
        writer.add_document(doc)
writer.commit()
writer.wait_merging_threads()
del writer
INDEX.reload()
SEARCHER = INDEX.searcher()


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign(prefix, claims):
    payload = b64(orjson.dumps(claims, option=orjson.OPT_SORT_KEYS))
    mac = b64(hmac.new(KEY, f"{prefix}.{payload}".encode(), hashlib.sha256).digest()[:18])
    return f"{prefix}.{payload}.{mac}"


def verify(prefix, token):
    parts = token.split(".") if isinstance(token, str) and len(token) <= 4096 else []
    if len(parts) != 3 or parts[0] != prefix:
        return None
    mac = b64(hmac.new(KEY, f"{prefix}.{parts[1]}".encode(), hashlib.sha256).digest()[:18])
    if not hmac.compare_digest(mac, parts[2]):
        return None
    return orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))


def escaped(text):
    return len(orjson.dumps(text)) - 2


def fit(text, budget, raw=None):
    if budget <= 0:
        return 0
    def over(n):
        chunk = text[:n]
        return escaped(chunk) > budget or (raw is not None and len(chunk.encode()) > raw)
    if len(text) <= budget and not over(len(text)):
        return len(text)
    return bisect.bisect_left(range(min(len(text), budget) + 1), True, key=over) - 1


def trim(text, budget):
    return text if escaped(text) <= budget else text[: fit(text, budget - 3)] + "…"


def error(status, code):
    return Response(orjson.dumps({"error": code}), status, media_type="application/json")


async def caller(request):
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or token.strip() != TOKEN:
        return None, error(401, "unauthorized")
    if request.path_params["route"] != ROUTE:
        return None, error(403, "route_not_allowed")
    if request.method == "GET":
        return {}, None
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return None, error(400, "invalid_request")
    if not isinstance(body, dict):
        return None, error(400, "invalid_request")
    return body, None


def bound(claims, run):
    return (claims.get("w"), claims.get("h"), claims.get("s"), claims.get("a"), claims.get("r")) == (
        ROUTE, HUB, SESSION, ACCOUNT, run)


async def capabilities(request):
    body, refused = await caller(request)
    if refused:
        return refused
    return Response(orjson.dumps({"schema_version": "bailing.agent-knowledge-capabilities.v1", "route": ROUTE,
        "enabled": True, "delivery_modes": ["inline", "on_demand"]}), media_type="application/json")


async def turns(request):
    body, refused = await caller(request)
    if refused:
        return refused
    run = str(uuid.uuid4())
    RUNS.add(run)
    return Response(orjson.dumps({"run_id": run}), media_type="application/json")


async def search(request):
    body, refused = await caller(request)
    if refused:
        return refused
    query, run, limit = body.get("query"), body.get("run_id"), body.get("limit", 3)
    if not isinstance(query, str) or type(limit) is not int or not 1 <= limit:
        return error(400, "invalid_request")
    if run not in RUNS:
        return error(404, "run_not_found")
    words = list(dict.fromkeys(p.lower() for w in re.findall(r"\w+", query)[:32] for p in SPLIT.findall(w)))
    hints = []
    if words:
        should = []
        for word in words:
            title = tantivy.Query.term_query(SCHEMA, "title", word, index_option="freq")
            should.append((tantivy.Occur.Should, tantivy.Query.boost_query(title, 2.0)))
            should.append((tantivy.Occur.Should, tantivy.Query.term_query(SCHEMA, "content", word, index_option="freq")))
        hits = SEARCHER.search(tantivy.Query.boolean_query(should), limit=min(limit, 3), count=False).hits
        rids = SEARCHER.fast_field_values("rid", [address for _, address in hits])
        now = time.time()
        for _, rid in sorted(zip((s for s, _ in hits), rids), key=lambda pair: (-pair[0], pair[1])):
            item, revision, title, content = DOCS[rid - 1]
            claims = {"w": ROUTE, "h": HUB, "s": SESSION, "a": ACCOUNT, "r": run, "i": item, "v": revision, "sv": 0,
                "t": now}
            hints.append({"title": title, "summary": content[:240].rstrip() + "…", "ref": sign("kr1", claims)})
    envelope = {"schema_version": KNOWLEDGE, "status": "ok", "trust": "reference_only"}
    bare = [{**h, "title": "", "summary": ""} for h in hints]
    each = (4096 - len(orjson.dumps({**envelope, "hints": bare})) - 16 * len(hints)) // max(1, len(hints))
    fitted = []
    for h in hints:
        title = trim(h["title"], max(8, each // 4))
        fitted.append({**h, "title": title, "summary": trim(h["summary"], max(8, each - escaped(title) - 2))})
    return Response(orjson.dumps({**envelope, "hints": fitted}), media_type="application/json")


async def read(request):
    body, refused = await caller(request)
    if refused:
        return refused
    run, ref, max_bytes = body.get("run_id"), body.get("ref"), body.get("max_bytes", 16384)
    if type(max_bytes) is not int or not 4096 <= max_bytes <= 32768:
        return error(400, "invalid_request")
    if run not in RUNS:
        return error(404, "run_not_found")
    claims = verify("kr1", ref)
    if not isinstance(claims, dict):
        return error(400, "knowledge_reference_invalid")
    if not bound(claims, run):
        return error(403, "knowledge_reference_mismatch")
    now = time.time()
    if not now - claims.get("t", 0) < 300:
        return error(410, "knowledge_reference_expired")
    rid = BY_ITEM.get(claims.get("i"))
    if rid is None or DOCS[rid][1] != claims.get("v"):
        return error(409, "knowledge_revision_changed")
    item, revision, title, doc = DOCS[rid]
    offset, consumed = 0, 0
    digest = b64(hashlib.sha256(ref.encode()).digest()[:9])
    if "cursor" in body:
        cursor = verify("kc1", body["cursor"])
        if not isinstance(cursor, dict) or not bound(cursor, run) or cursor.get("p") != digest:
            return error(400, "knowledge_reference_invalid")
        if not now - cursor.get("t", 0) < 300:
            return error(410, "knowledge_reference_expired")
        offset, consumed = cursor["o"], cursor["b"]
    doc_bytes = len(doc.encode())

    def cursor_at(at, used):
        return sign("kc1", {"w": ROUTE, "h": HUB, "s": SESSION, "a": ACCOUNT, "r": run, "p": digest, "o": at,
            "b": used, "t": now})

    shell = {"schema_version": KNOWLEDGE, "ref": ref, "revision": revision, "content": "",
        "next_cursor": cursor_at(doc_bytes, 10 * 131072), "truncated": False, "budget_exhausted": False,
        "trust": "reference_only", "total_content_bytes": doc_bytes, "read_chain_max_bytes": 131072}
    room = max_bytes - len(orjson.dumps(shell))
    window = doc[offset : offset + max(room, 0)]
    remaining = 131072 - consumed
    keep = fit(window, room, remaining)
    content = window[:keep]
    end, size = offset + keep, len(content.encode())
    at_end = end >= len(doc)
    page = {**shell, "content": content, "truncated": not at_end, "next_cursor": None}
    if not at_end and remaining - size < len(doc[end].encode()):
        page["budget_exhausted"] = True
    elif not at_end:
        page["next_cursor"] = cursor_at(end, consumed + size)
    return Response(orjson.dumps(page), media_type="application/json")


API = "/agent-api/v1/workspaces/{route}"
app = Starlette(routes=[
    Route(API + "/knowledge/capabilities", capabilities, methods=["GET"]),
    Route(API + "/knowledge/search", search, methods=["POST"]),
    Route(API + "/knowledge/read", read, methods=["POST"]),
    Route(API + "/turns", turns, methods=["POST"]),
])
"""
# Serves a yardstick app through the simulator's own serving function (simulator.cli.serve_socket):
# the bare endpoint, the anchor and the simulator run on one HTTP stack with the same settings.
_LAUNCHER = """
import importlib, sys
from simulator.cli import serve_on_port
module, _, name = sys.argv[1].partition(":")
serve_on_port(getattr(importlib.import_module(module), name), "127.0.0.1", int(sys.argv[2]))
"""
ANCHOR_TOKEN = "anchor-token"


# ------------------------------------------------------------------ corpus
def _vocabulary(rng: Random, size: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "qui", "ny", "pha", "zet", "ob", "ri", "gan", "ul"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


MID_RANKS = (150, 300, 600)  # Zipf ranks of the "mid x3" words: each in roughly 5-15% of documents
VARIED_RANKS = (1000, 20_000)  # the "varied" words: each in about 0.1% to 3% of documents


def write_corpus(path: Path, documents: int, seed: int) -> list[str]:
    """A JSONL corpus of ``documents`` items of about 2 KB; returns its vocabulary, commonest word first."""
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
    return vocab


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


Request = bytes | Callable[[], bytes]
"""What a cell sends: the same request every time, or a new one made for each request."""


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
    cpu_ms: float = float("nan")  # the server's CPU time per request (all its processes and threads)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes used so far (every thread of each)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat
    return total


async def _drive(
    port: int,
    raw: Request,
    clients: int,
    duration: float,
    warmup: float,
    pids: list[int],
    beside: tuple[bytes, int] | None = None,
) -> tuple[float, int, list[float], float]:
    """Requests per second, errors and latencies of the requests sent after the warm-up, and the
    server's CPU seconds per request answered in the measured window. When a request takes longer
    than the whole window (a broad search over a large corpus), every request is counted, warm-up
    included, over the time they took. ``beside``: (request, n) sent meanwhile on n more
    connections, unmeasured, until the measured ones are done."""
    conns = [await Connection.open(port) for _ in range(clients)]
    background = [await Connection.open(port) for _ in range(beside[1] if beside else 0)]
    sent_at: list[tuple[float, float, int]] = []
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration
    done = asyncio.Event()
    cpu_from: list[tuple[float, float]] = []  # (when, CPU seconds) at the start of the measured window

    async def loop(conn: Connection) -> None:
        while True:
            sent = time.perf_counter()
            if sent >= stop_at:
                return
            status, _ = await conn.request(raw if isinstance(raw, bytes) else raw())
            sent_at.append((sent, time.perf_counter() - sent, status))

    async def load(conn: Connection, other: bytes) -> None:
        while not done.is_set():
            await conn.request(other)

    async def sample() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        cpu_from.append((time.perf_counter(), cpu_seconds(pids)))

    async def measured() -> None:
        await asyncio.gather(sample(), *(loop(c) for c in conns))
        done.set()

    try:
        await asyncio.gather(measured(), *(load(c, beside[0]) for c in background if beside))
    finally:
        for c in [*conns, *background]:
            c.close()
    cpu_to = cpu_seconds(pids)
    answered = sum(1 for sent, took, _ in sent_at if sent + took >= cpu_from[0][0])
    cpu = (cpu_to - cpu_from[0][1]) / answered if answered and not beside else float("nan")
    kept = [m for m in sent_at if m[0] >= measure_from]
    if len(kept) >= clients:
        rps = len(kept) / duration
    else:
        kept, rps = sent_at, len(sent_at) / (time.perf_counter() - start)
    return rps, sum(1 for m in kept if m[2] != 200), [m[1] for m in kept], cpu


def measure(
    target: Target,
    raw: Request,
    clients: int,
    duration: float,
    size: int,
    endpoint: str,
    beside: tuple[bytes, int] | None = None,
) -> Cell:
    rps, errors, lat, cpu = asyncio.run(
        _drive(target.port, raw, clients, duration, min(0.5, duration / 4), target.pids, beside=beside)
    )
    count = len(lat)
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else float("nan")

    return Cell(size, endpoint, clients, count, errors, round(rps, 1), pct(0.50), pct(0.99), round(cpu * 1000, 3))


# ------------------------------------------------------------------ servers
@dataclass
class Target:
    """A server under measurement: its label in the table, its port, its processes."""

    label: str
    port: int
    pids: list[int]
    token: str = ""


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


def start_yardstick(
    workdir: Path, name: str, source: str, path: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int, float]:
    """The app ``source`` (module ``name``) served by the launcher: the simulator's serving code."""
    (workdir / f"{name}.py").write_text(source)
    (workdir / "launcher.py").write_text(_LAUNCHER)
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "launcher.py", f"{name}:app", str(port)],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    _wait_ready(port, path, proc)
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
ANCHOR = "anchor"
ANCHORED = ("capabilities", "search", "read")  # the endpoints the anchor serves (each search row)


def run(
    sizes: list[int],
    clients: list[int],
    duration: float,
    seed: int,
    compare: dict[str, str] | None = None,
    processes: int = 1,
    anchor: bool = True,
    endpoints: tuple[str, ...] = (),
    repeat: int = 1,
) -> dict[str, Any]:
    """Every cell of every size; with ``compare`` (label -> source tree), those simulators too, each
    cell measured on each server in turn so that a busy machine weighs on all of them alike;
    ``processes`` > 1: also this tree as that many processes on one kept store and one port;
    ``anchor``: also the same-work anchor, per size, on the same corpus; ``endpoints``: only those
    (default: every one); ``repeat``: rounds of every cell, each figure the median of its rounds."""
    cells: list[Cell] = []
    servers: list[dict[str, Any]] = []
    variants: dict[str, str | None] = {"": None, **(compare or {})}
    many = f"{processes} processes"
    if processes > 1:
        variants[many] = None
    with tempfile.TemporaryDirectory(prefix="sim-throughput-") as tmp:
        work = Path(tmp)
        bare, bare_port, bare_start = start_yardstick(work, "bare_app", _BARE_APP, "/bare")
        servers.append({"server": "bare", "size": 0, "startup_s": round(bare_start, 2), "rss_mb": _rss_mb(bare.pid)})
        try:
            for size in sizes:
                corpus = work / f"corpus-{size}.jsonl"
                vocab = write_corpus(corpus, size, seed)
                targets: list[Target] = []
                started: list[tuple[str, subprocess.Popen[bytes], float]] = []
                restarts: dict[str, float] = {}
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
                        pids = [sim.pid]
                        for n in range(1, processes if label == many else 1):
                            more, _, _, _ = start_sim(
                                corpus, work / f"sim-{size}{label}-{n}.err", source, kept, port, reuse_port=True
                            )
                            started.append((f"{label} #{n + 1}", more, restart))
                            pids.append(more.pid)
                        targets.append(Target(label, port, pids, token))
                    if anchor:
                        proc, port, startup = start_yardstick(
                            work,
                            "anchor_app",
                            _ANCHOR_APP,
                            f"{API}/knowledge/capabilities",
                            {"ANCHOR_CORPUS": str(corpus), "ANCHOR_TOKEN": ANCHOR_TOKEN},
                        )
                        started.append((ANCHOR, proc, startup))
                        targets.append(Target(ANCHOR, port, [proc.pid], ANCHOR_TOKEN))
                    for n in clients:
                        rounds: dict[str, list[Cell]] = {}
                        for _ in range(repeat):  # every cell once a round: a busy spell weighs on all of them
                            bare_cell = measure(
                                Target("bare", bare_port, [bare.pid]), encode("GET", "/bare"), n, duration, size, "bare"
                            )
                            _report(rounds, bare_cell, n)
                            for name in (e for e in ENDPOINTS if not endpoints or e in endpoints):
                                for target in targets:  # each endpoint on each server in turn
                                    if (name == MIXED and n == 1) or (
                                        target.label == ANCHOR and (name == MIXED or not name.startswith(ANCHORED))
                                    ):
                                        continue
                                    # a fresh run and reference each cell: a slow cell before may have outlived
                                    # the last ones
                                    run_id, ref = asyncio.run(_prepare(target.port, target.token))
                                    raw = _request(name, target.token, run_id, ref, vocab, seed)
                                    broad = _request("search broad", target.token, run_id, ref, vocab, seed)
                                    assert isinstance(broad, bytes)
                                    cell = measure(
                                        target,
                                        raw,
                                        1 if name == MIXED else n,
                                        duration,
                                        size,
                                        f"{name} [{target.label}]" if target.label else name,
                                        (broad, n - 1) if name == MIXED else None,
                                    )
                                    _report(rounds, cell, n)
                        cells.extend(_median(found) for found in rounds.values())
                    for label, _proc, startup in started:
                        if "#" in label:
                            continue
                        servers.append(
                            {
                                "server": ANCHOR if label == ANCHOR else f"simulator {label}".strip(),
                                "size": size,
                                "startup_s": round(startup, 2),
                                "restart_s": round(restarts[label], 2) if label in restarts else "",
                                "rss_mb": round(
                                    sum(_rss_mb(p.pid) for name, p, _ in started if name.split(" #")[0] == label), 1
                                ),
                            }
                        )
                finally:
                    for _, proc, _ in started:
                        _stop(proc)
                corpus.unlink()
        finally:
            _stop(bare)
    return {
        "cells": [asdict(c) for c in cells],
        "servers": servers,
        "duration_s": duration,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "stack": _stack(),
        "repeat": repeat,
    }


def _report(rounds: dict[str, list[Cell]], cell: Cell, clients: int) -> None:
    cell.clients = clients  # all connections, the measured one and the rest
    rounds.setdefault(cell.endpoint, []).append(cell)
    print(
        f"  {cell.size:>7} {cell.endpoint:36} c={clients:<3} {cell.rps:>8} req/s  p50 {cell.p50_ms} ms  "
        f"p99 {cell.p99_ms} ms  CPU {cell.cpu_ms} ms/req  errors {cell.errors}",
        file=sys.stderr,
    )


def _median(found: list[Cell]) -> Cell:
    """One cell of a cell's rounds: each figure the median of its rounds', requests and errors summed."""

    def mid(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    first = found[0]
    return Cell(
        first.size,
        first.endpoint,
        first.clients,
        sum(c.requests for c in found),
        sum(c.errors for c in found),
        round(mid([c.rps for c in found]), 1),
        round(mid([c.p50_ms for c in found]), 2),
        round(mid([c.p99_ms for c in found]), 2),
        round(mid([c.cpu_ms for c in found]), 3),
    )


def _stack() -> str:
    """The HTTP stack every server ran on: uvicorn's automatic choices, as the launcher and knowledge-sim make them."""
    import importlib.metadata
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"uvicorn {importlib.metadata.version('uvicorn')}, {http}, {loop} loop, one process each"


ENDPOINTS = (
    "capabilities",
    "search selective",
    "search varied",
    "search broad",
    "search broad x3",
    "search mid x3",
    "search broad x32",
    "read",
    MIXED,
)


def _request(name: str, token: str, run_id: str, ref: str, vocab: list[str], seed: int) -> Request:
    """The request (or request maker) of endpoint ``name``. "varied" draws two words of middle to low
    frequency for each request, from a generator of its own seeded alike for every server, so no
    answer is ever the one of a request before (no cache can serve it) and every server gets the
    same queries."""

    def search(query: str) -> bytes:
        return encode("POST", f"{API}/knowledge/search", token, {"run_id": run_id, "query": query, "limit": 3})

    if name == "search varied":
        rng, low, high = Random(seed), *VARIED_RANKS
        return lambda: search(f"{vocab[rng.randrange(low, high)]} {vocab[rng.randrange(low, high)]}")
    requests = {
        "capabilities": encode("GET", f"{API}/knowledge/capabilities", token),
        "search selective": search(SELECTIVE),
        "search broad": search(BROAD),
        "search broad x3": search(f"{BROAD} {vocab[0]} {vocab[1]}"),
        "search mid x3": search(" ".join(vocab[r] for r in MID_RANKS)),
        "search broad x32": search(" ".join(vocab[:32])),
        "read": encode("POST", f"{API}/knowledge/read", token, {"run_id": run_id, "ref": ref}),
        MIXED: encode("GET", f"{API}/knowledge/capabilities", token),
    }
    return requests[name]


def _split(endpoint: str) -> tuple[str, str]:
    """("search broad", "before") from "search broad [before]"; this tree's rows have the label ""."""
    name, _, label = endpoint.partition(" [")
    return name, label.rstrip("]")


def _rate(rps: float) -> str:
    return f"{rps:.0f}" if rps >= 100 else f"{rps:.2g}"


def table(result: dict[str, Any]) -> str:
    """One row per corpus size, client count and endpoint; one column group per server: req/s and its
    ratio to the bare endpoint's in the same run, CPU ms per request and the bare endpoint's CPU per
    request divided by it (both ratios: the fraction of the bare endpoint's throughput the server
    keeps), p50 and p99; then this tree against the anchor, the same two ratios."""
    cells = [Cell(**c) for c in result["cells"]]
    bare = {(c.size, c.clients): c for c in cells if c.endpoint == "bare"}
    labels = list(dict.fromkeys(_split(c.endpoint)[1] for c in cells if c.endpoint != "bare"))
    by_key = {(c.size, c.clients, *_split(c.endpoint)): c for c in cells}
    heads = [f"{label or 'this tree'}" for label in labels]
    anchored = ANCHOR in labels
    lines = [
        "| docs | clients | endpoint | "
        + " | ".join(f"{h}: req/s (× bare), CPU ms/req (× bare), p50 / p99 ms" for h in heads)
        + (" | this tree ÷ anchor: req/s, CPU" if anchored else "")
        + " | errors |",
        "|---:|---:|---|" + "---:|" * (len(labels) + anchored) + "---:|",
    ]
    rows = dict.fromkeys((c.size, c.clients, _split(c.endpoint)[0]) for c in cells)
    for size, clients, name in rows:
        b = bare[(size, clients)]
        if name == "bare":
            lines.append(
                f"| {size} | {clients} | bare Starlette | "
                + " | ".join(
                    [f"{b.rps:.0f} (1.00), {b.cpu_ms} (1.00), {b.p50_ms} / {b.p99_ms}"] + [""] * (len(labels) - 1)
                )
                + (" | " if anchored else "")
                + f" | {b.errors} |"
            )
            continue
        groups, errors = [], 0
        for label in labels:
            c = by_key.get((size, clients, name, label))
            if c is None:
                groups.append("")
                continue
            digits = 2 if c.rps >= 100 else 3
            groups.append(
                f"{_rate(c.rps)} ({c.rps / b.rps:.{digits}f}), {c.cpu_ms} ({b.cpu_ms / c.cpu_ms:.{digits}f}), "
                f"{c.p50_ms} / {c.p99_ms}"
            )
            errors += c.errors
        if anchored:
            mine, theirs = by_key.get((size, clients, name, "")), by_key.get((size, clients, name, ANCHOR))
            groups.append(f"{mine.rps / theirs.rps:.2f}, {theirs.cpu_ms / mine.cpu_ms:.2f}" if mine and theirs else "")
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
    growth = []
    for name in dict.fromkeys(c.endpoint for c in cells if c.endpoint.startswith("search")):
        first = [c.p50_ms for c in cells if c.endpoint == name and c.size == sizes[0] and c.clients == 1]
        last = [c.p50_ms for c in cells if c.endpoint == name and c.size == sizes[-1] and c.clients == 1]
        if len(sizes) > 1 and first and last and first[0] > 0:
            growth.append(f"- {name}: {first[0]} → {last[0]} ms ({last[0] / first[0]:.0f}×)")
    if growth:
        lines += ["", f"Search p50 growth at 1 client, {sizes[0]} → {sizes[-1]} documents:", *growth]
    lines += [
        "",
        f"{result['cpus']} CPUs, load average at the end {result['load_average']}, {result['duration_s']} s per cell"
        f" (the median of {result.get('repeat', 1)} rounds); "
        f"every server on {result.get('stack', 'uvicorn')}.",
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
    parser.add_argument("--no-anchor", action="store_true", help="leave out the same-work anchor")
    parser.add_argument(
        "--endpoints",
        default="",
        help=f"measure only these endpoints, comma-separated (default: all of {', '.join(ENDPOINTS)})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every cell this many times, in rounds, and report the median of each figure "
        "(on a shared machine, a busy spell then weighs on one round of every server, not on one server)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([100_000] if args.with_100k else [])
    compare = dict(item.split("=", 1) for item in args.compare)
    result = run(
        sizes,
        [int(c) for c in args.clients.split(",") if c],
        args.duration,
        args.seed,
        compare,
        args.processes,
        not args.no_anchor,
        tuple(e.strip() for e in args.endpoints.split(",") if e.strip()),
        max(1, args.repeat),
    )
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
