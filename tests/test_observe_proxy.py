"""The observe proxy is safe in front of production: it forwards every request and answer
unchanged (headers, streamed bodies, content codings), it never waits for a judge that lags or
breaks (a bounded queue; what it drops is counted and reported), it answers 502 only when the
upstream gave no answer, and no secret it saw reaches a report or a recording."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common.config import TargetConfig
from conformance.observe import server_rules
from conformance.observe.credentials import Credentials
from conformance.observe.har import HarRecorder
from conformance.observe.judge import Judge
from conformance.observe.pipeline import Pipeline
from conformance.observe.proxy import ObserveProxy
from conformance.observe.report import Source, build, write
from conformance.observe.seen import EMPTY, Body, Seen
from tests.test_observe_support import served

ROUTE = "/agent-api/v1/workspaces/acme"
TOKEN = "bha_" + "s3cr3tT0ken" * 4
FIXED = gzip.compress(bytes(range(256)) * 400, mtime=0)
HOP_BY_HOP = {"connection"}  # the client's own connection header: a proxy never forwards it (RFC 9110 7.6.1)


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An upstream that answers what it received, a gzip body, and headers a proxy must keep."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    seen = {
        "method": scope["method"],
        "path": scope["raw_path"].decode("latin-1"),
        "query": scope["query_string"].decode("latin-1"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"] if k != b"host"],
        "body": base64.b64encode(body).decode(),
    }
    fixed = scope["path"].endswith("/read")  # a fixed answer, the same whoever asks
    payload = FIXED if fixed else gzip.compress(json.dumps(seen).encode(), mtime=0)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-encoding", b"gzip"),
        (b"x-repeated", b"one"),
        (b"x-repeated", b"two"),
        (b"set-cookie", b"session=abc; Path=/"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(payload)).encode()),
    ]
    await send({"type": "http.response.start", "status": 207, "headers": headers})
    for i in range(0, len(payload), 1000):  # streamed in pieces
        await send({"type": "http.response.body", "body": payload[i : i + 1000], "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _judge() -> Judge:
    return Judge(TargetConfig(), Credentials(), base_url="http://core.example")


@pytest.fixture
def upstream() -> Iterator[str]:
    with served(echo) as url:
        yield url


def _raw(url: str, body: bytes, path: str = "/knowledge/search") -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    headers = [
        ("Authorization", f"Bearer {TOKEN}"),
        ("X-Custom", "kept as sent"),
        ("X-Dup", "a"),
        ("X-Dup", "b"),
        ("Content-Type", "application/octet-stream"),
    ]
    with (
        httpx.Client() as client,
        client.stream("POST", f"{url}{ROUTE}{path}?q=%2Fa%20b&x=1", headers=headers, content=body) as r,
    ):
        return r.status_code, [(k.lower(), v) for k, v in r.headers.raw], b"".join(r.iter_raw())


def test_forwarding_changes_neither_the_request_nor_the_answer(upstream: str) -> None:
    body = bytes(range(256)) * 1000  # past every cap a rule keeps
    judge = _judge()
    pipeline = Pipeline(judge).start()
    with served(ObserveProxy(upstream, pipeline.submit, judge.ctx.credentials)) as proxy:
        direct, through = _raw(upstream, body), _raw(proxy, body)
        fixed_direct, fixed_through = _raw(upstream, body, "/knowledge/read"), _raw(proxy, body, "/knowledge/read")
    pipeline.close()
    assert through[0] == direct[0] == 207
    length = b"content-length"  # the echo's own length differs by the header below, and only by it
    assert [h for h in through[1] if h[0] != length] == [h for h in direct[1] if h[0] != length]
    sent, forwarded = (json.loads(gzip.decompress(x[2])) for x in (direct, through))
    sent["headers"] = [h for h in sent["headers"] if h[0] not in HOP_BY_HOP]
    assert forwarded == sent  # method, raw path, query, every end-to-end header but Host, every body byte
    assert base64.b64decode(forwarded["body"]) == body
    assert fixed_through == fixed_direct == (207, fixed_direct[1], FIXED)  # every header, raw gzip bytes as sent
    assert [v for k, v in fixed_through[1] if k == b"x-repeated"] == [b"one", b"two"]
    assert judge.tally.exchanges == 2 and judge.tally.judged == 2  # the copies were judged, gzip undone


def test_a_body_without_a_length_goes_out_chunked_as_it_came(upstream: str) -> None:
    def pieces() -> Iterator[bytes]:
        yield from (bytes([i]) * 5000 for i in range(20))

    with served(ObserveProxy(upstream, lambda seen: None, Credentials())) as proxy:
        answers = [httpx.post(f"{url}{ROUTE}/knowledge/search", content=pieces()) for url in (upstream, proxy)]
    direct, through = (
        json.loads(gzip.decompress(a.content) if a.content[:2] == b"\x1f\x8b" else a.content) for a in answers
    )
    assert ["transfer-encoding", "chunked"] in through["headers"] and through["body"] == direct["body"]


def test_a_judge_that_lags_or_breaks_never_stops_forwarding(upstream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    judge = _judge()
    original = judge.judge

    def lagging(seen: Seen) -> None:
        release.wait(30)
        original(seen)

    monkeypatch.setattr(judge, "judge", lagging)
    monkeypatch.setattr(server_rules, "search", lambda ob: 1 / 0)  # every search judgement breaks
    pipeline = Pipeline(judge, size=2).start()
    with served(ObserveProxy(upstream, pipeline.submit, judge.ctx.credentials)) as proxy:
        answers = [_raw(proxy, b"{}") for _ in range(8)]
    release.set()
    pipeline.close()
    assert all(a[0] == 207 for a in answers)
    assert judge.tally.unjudged["the judge's queue was full"] >= 5
    assert judge.tally.exchanges == 8 and judge.tally.error_count >= 1
    run = build(judge.tally.snapshot(), Source("proxy", upstream), sessions=1)
    assert run.verdict == "error"
    assert any("dropped unjudged" in w for w in run.warnings) and any("queue was full" in w for w in run.warnings)


def test_a_sink_that_raises_is_never_the_clients_problem(upstream: str) -> None:
    def broken(seen: Seen) -> None:
        raise RuntimeError("the observing side broke")

    with served(ObserveProxy(upstream, broken, Credentials())) as proxy:
        assert _raw(proxy, b"{}")[0] == 207


def test_no_answer_from_the_upstream_is_a_502_and_is_seen() -> None:
    kept: list[Seen] = []
    with served(echo) as gone:
        pass  # its port is closed now
    with served(ObserveProxy(gone, kept.append, Credentials())) as proxy:
        response = httpx.post(f"{proxy}{ROUTE}/knowledge/search", json={"query": "x"})
    assert response.status_code == 502 and response.json()["error"] == "bad_gateway"
    assert kept[0].status == 0


async def leaky(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A hostile Core: a search answer with four hints that echo the caller's token, raw and in base64."""
    auth = dict(scope["headers"]).get(b"authorization", b"").decode()
    hints = [
        {"title": f"::set-output name=x::{auth}", "summary": base64.b64encode(auth.encode()).decode(), "ref": f"r{i}"}
        for i in range(4)
    ]
    hints[0]["title"] = "\x1b[31m<script>alert(1)</script>``` ## hi"
    body = json.dumps({"status": "ok", "trust": "reference_only", "hints": hints, "message": auth}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def test_no_secret_and_no_hostile_text_reaches_a_report_or_a_recording(tmp_path: Path) -> None:
    judge = _judge()
    recording = tmp_path / "seen.har"
    with served(leaky) as core:
        recorder = HarRecorder(recording, core)
        pipeline = Pipeline(judge, record=recorder.add).start()
        with served(ObserveProxy(core, pipeline.submit, judge.ctx.credentials)) as proxy:
            httpx.post(
                f"{proxy}{ROUTE}/knowledge/search",
                json={"query": "x", "run_id": "r"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        pipeline.close()
        recorder.close()
    assert "SRCH-003" in judge.tally.findings
    paths = write(build(judge.tally.snapshot(), Source("proxy", core), sessions=1), tmp_path / "reports")
    encoded = base64.b64encode(f"Bearer {TOKEN}".encode()).decode()
    for path in [*paths.values(), recording]:
        text = path.read_text("utf-8")
        assert TOKEN[4:20] not in text and encoded[8:30] not in text, path.name
        assert "\x1b" not in text, path.name  # a terminal escape shown as text, never sent as a byte
        assert path.suffix != ".html" or "<script>alert" not in text, path.name  # markup escaped
        assert not [line for line in text.splitlines() if line.lstrip().startswith("::")], path.name


def _seen(number: int, at: float, path: str, request: dict[str, Any], status: int, answer: Any) -> Seen:
    def body(data: Any) -> Body:
        raw = json.dumps(data).encode()
        return Body(raw, len(raw), True) if data is not None else EMPTY

    return Seen(
        number, at, at + 0.01, "POST", f"{ROUTE}{path}", "", "c1", body(request), status, body(answer),
        (("content-type", "application/json"), ("cache-control", "no-store")),
    )  # fmt: skip


def test_expiry_is_judged_from_when_the_proxy_saw_a_reference_issued_and_used() -> None:
    """Issued at 0 s: read at 400 s it must be refused (REF-001); refused as expired at 100 s it was
    still valid (REF-002)."""
    hint = {"title": "t", "summary": "s", "ref": "ref-1"}
    search = {"status": "ok", "trust": "reference_only", "hints": [hint, {**hint, "ref": "ref-2"}]}
    page = {"ref": "ref-1", "revision": "1", "content": "x", "next_cursor": None, "trust": "reference_only"}
    expired = {"error": "knowledge_reference_expired", "message": "gone", "next_action": "search_knowledge"}
    judge = _judge()
    judge.judge(_seen(1, 0.0, "/knowledge/search", {"query": "q", "run_id": "r1"}, 200, search))
    judge.judge(_seen(2, 100.0, "/knowledge/read", {"ref": "ref-2", "run_id": "r1"}, 410, expired))
    judge.judge(_seen(3, 400.0, "/knowledge/read", {"ref": "ref-1", "run_id": "r1"}, 200, page))
    assert set(judge.tally.findings) == {"REF-001", "REF-002"}
    assert judge.tally.findings["REF-001"][0].exchange is not None
    assert "curl" in judge.tally.findings["REF-001"][0].exchange
