"""A hostile or broken MCP server cannot exhaust the suite's memory, hang it, or turn its own fault
into a harness error: over stdio and streamable HTTP (loopback only) a server answers
``initialize`` correctly and then misbehaves, one way a case. A message over the cap, an answer to
another id, a batch, garbage or JSON nested too deeply fails the path's rule (MCP-001) on one line;
silence or a trickle is a harness error within the timeout and a grace; a child a stdio server
leaves behind does not outlive the session. One end-to-end run shows the verdict, the wall time
and the peak memory of a whole suite run against a server that answers 200 MB."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import sys
import time
import warnings
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.common.open import serve_over_loopback
from conformance.common.outcomes import ContractViolation, HarnessError
from conformance.mcp.records import MESSAGE_CAP, Endpoint, NotServing
from conformance.mcp.session import connect
from tests.measured import run_measured
from tests.suite_command import SUITE

TOOL = "search_business_knowledge"
BIG = 200 * 1024 * 1024  # what the server answered
TIMEOUT = 1.0

STDIO_SERVER = r"""
import json, os, sys, time
MODE, out = sys.argv[1], sys.stdout.buffer
def send(obj):
    out.write(json.dumps(obj).encode() + b"\n"); out.flush()
def result(rid, value):
    send({"jsonrpc": "2.0", "id": rid, "result": value})
for line in sys.stdin.buffer:
    msg = json.loads(line)
    rid, method = msg.get("id"), msg.get("method")
    if rid is None:
        continue
    if method == "server/discover":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize" and MODE == "init-garbage":
        out.write(b"\x1b[2J::add-mask::not json\n"); out.flush()
    elif method == "initialize":
        info = {"name": "hostile", "version": "1"}
        result(rid, {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info})
        if MODE == "fork" and os.fork() == 0 and os.fork() == 0:
            open(sys.argv[2], "w").write(str(os.getpid()))
            os.close(1)
            time.sleep(600)
    elif method == "tools/list":
        result(rid, {"tools": [{"name": "TOOL_NAME", "inputSchema": {"type": "object"}}]})
    elif MODE == "big":
        out.write(b'{"jsonrpc": "2.0", "id": %d, "result": {"content": [{"type": "text", "text": "' % rid)
        for _ in range(BIG_SIZE // (1 << 20)):
            out.write(b"x" * (1 << 20))
        out.write(b'"}]}}\n'); out.flush()
    elif MODE == "wrong-id":
        result(rid + 1000, {"content": []})
    elif MODE == "batch":
        send([{"jsonrpc": "2.0", "id": rid, "result": {"content": []}}])
    elif MODE == "garbage":
        out.write(b"this is not json\n"); out.flush()
    elif MODE == "deep":
        out.write(b'{"jsonrpc": "2.0", "id": %d, "result": {"content": ' % rid + b"[" * 100000 + b"]" * 100000 + b"}}\n")
        out.flush()
    elif MODE == "exits":
        sys.exit(0)
    elif MODE == "silent":
        time.sleep(600)
    elif MODE == "trickle":
        while True:
            out.write(b" "); out.flush(); time.sleep(0.2)
    else:
        result(rid, {"content": [{"type": "text", "text": "ok"}]})
""".replace("TOOL_NAME", TOOL).replace("BIG_SIZE", str(BIG))


def _stdio(tmp_path: Path, mode: str, *extra: str) -> Endpoint:
    script = tmp_path / "hostile_mcp.py"
    script.write_text(STDIO_SERVER, "utf-8")
    return Endpoint("stdio", argv=(sys.executable, str(script), mode, *extra))


# ----------------------------------------------------------------- the HTTP server

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _rpc(rid: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()


async def _chunks(head: bytes, size: int, tail: bytes) -> AsyncIterator[bytes]:
    yield head
    for _ in range(size // (1 << 20)):
        yield b"x" * (1 << 20)
    yield tail


async def _trickle() -> AsyncIterator[bytes]:
    while True:
        yield b" "
        await asyncio.sleep(0.2)


def _bomb() -> bytes:
    """256 MiB of JSON text inside some 250 KB of gzip."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "')]
    parts += [packer.compress(b"x" * (1 << 20)) for _ in range(256)]
    return b"".join([*parts, packer.compress(b'"}]}}'), packer.flush()])


async def _reply(send: Send, body: bytes | AsyncIterator[bytes], *headers: tuple[bytes, bytes]) -> None:
    kind = (b"content-type", b"text/event-stream" if (b"content-type", b"sse") in headers else b"application/json")
    extra = [h for h in headers if h[0] != b"content-type"]
    await send({"type": "http.response.start", "status": 200, "headers": [kind, (b"mcp-session-id", b"s1"), *extra]})
    if isinstance(body, bytes):
        await send({"type": "http.response.body", "body": body})
        return
    async for chunk in body:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _answer(mode: str, rid: int, send: Send) -> None:
    """The misbehaving answer to a tools/call."""
    head = b'{"jsonrpc": "2.0", "id": %d, "result": {"content": [{"type": "text", "text": "' % rid
    if mode == "big":
        await _reply(send, _chunks(head, BIG, b'"}]}}'))
    elif mode == "sse-big":
        await _reply(send, _chunks(b"event: message\ndata: " + head, BIG, b'"}]}}\n\n'), (b"content-type", b"sse"))
    elif mode == "gzip-bomb":
        await _reply(send, _bomb(), (b"content-encoding", b"gzip"))
    elif mode == "brotli":
        await _reply(send, b"\x0b\x02\x80{}\x03", (b"content-encoding", b"br"))
    elif mode == "wrong-id":
        await _reply(send, _rpc(rid + 1000, {"content": []}))
    elif mode == "batch":
        await _reply(send, b"[" + _rpc(rid, {"content": []}) + b"]")
    elif mode == "garbage":
        await _reply(send, b"\x1b]52;c;aGk=\x07this is not json")
    elif mode == "deep":
        await _reply(send, b'{"jsonrpc": "2.0", "id": %d, "result": {"content": ' % rid + b"[" * 100000)
    elif mode == "notification":
        await _reply(send, json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"}).encode())
    elif mode == "silent":
        await asyncio.sleep(600)
    elif mode == "trickle":
        await _reply(send, _trickle())
    else:
        await _reply(send, _rpc(rid, {"content": [{"type": "text", "text": "ok"}]}))


async def hostile_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Send) -> None:
    """An MCP server whose first path segment names how it misbehaves after a correct initialize."""
    if scope["type"] != "http":
        return
    if scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 405, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    raw, more = b"", True
    while more:
        message = await receive()
        raw, more = raw + message.get("body", b""), bool(message.get("more_body"))
    msg = json.loads(raw)
    rid, method, mode = msg.get("id"), msg.get("method"), scope["path"].strip("/").split("/")[0]
    if rid is None:
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    elif method == "server/discover":
        error = {"code": -32601, "message": "Method not found"}
        await _reply(send, json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}).encode())
    elif method == "initialize":
        info = {"name": "hostile", "version": "1"}
        version = msg["params"]["protocolVersion"]
        await _reply(send, _rpc(rid, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}))
    elif method == "tools/list":
        await _reply(send, _rpc(rid, {"tools": [{"name": TOOL, "inputSchema": {"type": "object"}}]}))
    else:
        await _answer(mode, rid, send)


@pytest.fixture(scope="module")
def hostile_url() -> Iterator[str]:
    url, stop = serve_over_loopback(hostile_app)
    try:
        yield url
    finally:
        stop()


def _http(url: str, mode: str) -> Endpoint:
    return Endpoint("http", url=f"{url}/{mode}/mcp", token="hostile-test-token")


def _call(endpoint: Endpoint, timeout: float = 30.0) -> str:
    """What one tools/call ends in: the violation or harness error it raised, on one line."""
    with connect(endpoint, timeout) as session:
        session.call(TOOL, {"query": "x"})
    raise AssertionError("the call was taken as an answer")


# ----------------------------------------------------------------- judged failures

MALFORMED = {
    "big": rf"a message over the 4 MiB cap on one MCP message \(more than {MESSAGE_CAP} bytes\)",
    "wrong-id": r"an answer to id 1003, which was not asked",
    "batch": r"a JSON-RPC batch \(an array\) where one message belongs",
    "garbage": r"not JSON \(Invalid JSON: .*\)",
    "deep": r"JSON nested too deeply|not JSON",
}
HTTP_ONLY = {
    "sse-big": rf"SSE stream failed: Server-sent event exceeded the {MESSAGE_CAP} byte limit",
    "gzip-bomb": r"a message over the 4 MiB cap on one MCP message",
    "brotli": r"a body in content coding 'br', which was not asked for",
    "notification": r"a notification where the answer to id 3 belongs",
}


def _judged(endpoint: Endpoint, reason: str) -> None:
    started = time.monotonic()
    with pytest.raises(ContractViolation) as caught:
        _call(endpoint)
    message = str(caught.value)
    assert caught.value.requirement == "MCP-001", message
    assert message.startswith("[MCP-001] the Agent Session MCP server ("), message
    assert "broke JSON-RPC answering tools/call search_business_knowledge: " in message, message
    assert re.search(reason, message), message
    assert "\n" not in message and "\x1b" not in message and len(message) < 600, message
    assert time.monotonic() - started < 25, "judged at once, not after the timeout"


@pytest.mark.parametrize("mode", sorted(MALFORMED))
def test_a_malformed_stdio_answer_fails_the_path_s_rule(tmp_path: Path, mode: str) -> None:
    _judged(_stdio(tmp_path, mode), MALFORMED[mode])


@pytest.mark.parametrize("mode", sorted({**MALFORMED, **HTTP_ONLY}))
def test_a_malformed_http_answer_fails_the_path_s_rule(hostile_url: str, mode: str) -> None:
    _judged(_http(hostile_url, mode), {**MALFORMED, **HTTP_ONLY}[mode])


def test_the_job_path_s_server_fails_the_job_path_s_rule(tmp_path: Path) -> None:
    endpoint = Endpoint("stdio", argv=_stdio(tmp_path, "batch").argv, path="jobs")
    with pytest.raises(ContractViolation, match=r"^\[MCP-002\] the Fixed Client Token MCP server .* batch"):
        _call(endpoint)


def test_a_stdio_server_that_exits_instead_of_answering_fails_the_rule(tmp_path: Path) -> None:
    _judged(_stdio(tmp_path, "exits"), r"closed its output before answering")


def test_garbage_for_initialize_is_a_server_that_does_not_serve(tmp_path: Path) -> None:
    with pytest.raises(NotServing) as caught:
        _call(_stdio(tmp_path, "init-garbage"))
    message = str(caught.value)
    assert "did not answer initialize: not JSON" in message and "\n" not in message, message
    assert "\x1b" not in message and "it starts '\\x1b[2J::add-mask" in message, message


# ----------------------------------------------------------------- no answer in time


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_silent_or_trickling_server_ends_the_call_as_a_harness_error(
    tmp_path: Path, hostile_url: str, mode: str
) -> None:
    for endpoint in (_stdio(tmp_path, mode), _http(hostile_url, mode)):
        started = time.monotonic()
        with pytest.raises(HarnessError) as caught:
            _call(endpoint, TIMEOUT)
        took = time.monotonic() - started
        assert not isinstance(caught.value, ContractViolation)
        assert str(caught.value).endswith(f"asked tools/call {TOOL}: no answer within 1 s"), str(caught.value)
        assert took < 60, f"{endpoint.transport}: the call took {took:.0f} s"


def test_a_url_nothing_listens_on_is_one_line() -> None:
    with pytest.raises(HarnessError, match=r"^streamable HTTP: http://127\.0\.0\.1:9/mcp cannot be reached: \w+"):
        _call(Endpoint("http", url="http://127.0.0.1:9/mcp"), TIMEOUT)


# ----------------------------------------------------------------- processes and the well-behaved case


def test_a_child_a_stdio_server_leaves_behind_does_not_outlive_the_session(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    with connect(_stdio(tmp_path, "fork", str(marker)), 10) as session:
        assert [t.name for t in session.tools()] == [TOOL]
        deadline = time.monotonic() + 10
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, "the server's child never started"
            time.sleep(0.05)
    child = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, f"the server's child {child} outlived the session"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


def test_a_well_behaved_server_still_answers(tmp_path: Path, hostile_url: str) -> None:
    for endpoint in (_stdio(tmp_path, "ok"), _http(hostile_url, "ok")):
        with connect(endpoint, 10) as session:
            result = session.call(TOOL, {"query": "x"})
        assert result.texts == ("ok",) and result.protocol_error is None


# ----------------------------------------------------------------- a whole run


def _suite_run(tmp_path: Path, mcp_target: str) -> tuple[dict[str, Any], str, float, int]:
    """A suite run of the MCP-001 checks against ``mcp_target``: its results, output, wall time and
    peak RSS (of its own process, in MB)."""
    reports = tmp_path / "reports"
    run = run_measured(
        [
            *SUITE,  # its peak memory is measured: a fresh interpreter, not a child of the warm server
            "--no-shrink",
            "--mcp-target",
            mcp_target,
            "--report-dir",
            str(reports),
            "--requirement",
            "MCP-001",
        ],
        600,
    )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    return results, run.output, run.seconds, run.peak_mb


def test_a_whole_run_against_a_200_mb_answer_is_a_judged_failure_in_bounded_memory(
    tmp_path: Path, hostile_url: str
) -> None:
    results, out, took, peak = _suite_run(tmp_path, f"{hostile_url}/big/mcp")
    print(f"suite run against a 200 MB MCP answer: {took:.1f} s wall, peak RSS {peak} MB")
    status = {r["id"]: r["status"] for r in results["requirements"]}
    assert status["MCP-001"] == "failed", out[-3000:]
    assert "ExceptionGroup" not in out and "INTERNALERROR" not in out, out[-3000:]
    assert "over the 4 MiB cap on one MCP message" in out, out[-3000:]
    assert peak < 500, f"peak RSS {peak} MB"


def test_an_http_session_leaves_no_connection_open(hostile_url: str) -> None:
    """The SDK leaves an HTTP client it was given open; the session closes it (some 30 sockets a
    run were left to the garbage collector)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(3):
            with connect(_http(hostile_url, "ok"), 10) as session:
                session.call(TOOL, {"query": "x"})
        gc.collect()
    unclosed = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert not unclosed, unclosed[:3]
