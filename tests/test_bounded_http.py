"""A Core the suite cannot trust, over HTTP: every request ends within ``timeout_seconds`` as a
whole (a server that trickles its headers or body cannot hold it), every body is read into at
most ``max_response_bytes`` after decoding (a 200 MB body, an endless chunked one and a gzip or
brotli bomb never expand in memory), and an answer that is not JSON the suite can walk (nested
too deep, a member named twice, NaN, members of the wrong type) is judged a broken answer, never
a crash. The transport is tested against a raw socket server on loopback; two runs of the suite
(a trickling read, a gzip bomb on reads) show the whole run ending, judged, with reports."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import resource
import socket
import subprocess
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import simulator
from conformance.common.config import ConfigError, load_config
from conformance.common.control import Control, ControlError
from conformance.common.open import serve_over_loopback
from conformance.common.outcomes import ContractViolation
from conformance.common.transport import (
    MAX_JSON_DEPTH,
    MAX_RESPONSE_BYTES,
    Answer,
    BoundedTransport,
    MalformedJSON,
    TargetUnresponsive,
    Watchdog,
    bounded_client,
    broken,
    strict_json,
    too_large,
)
from conformance.server import checks
from conformance.server.rules import READ_001, SRCH_001, SRCH_008, WIRE_002
from simulator.config import SimConfig
from tests.measured import kill, launch, peak_mib
from tests.suite_command import SUITE

CAP = 1 << 20  # a small cap keeps the transport tests fast; the default is tested by the suite runs
TIMEOUT = 1.5


# ------------------------------------------------------------------ a raw hostile server on loopback

Handler = Callable[[socket.socket], None]


def _head(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Content-Type: application/json", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.fixture
def hostile() -> Iterator[Callable[[Handler], str]]:
    """Serves one handler per call on a loopback port (only 127.0.0.1): it reads the request's
    head and answers however it likes; a connection the client dropped ends the handler."""
    sockets: list[socket.socket] = []

    def serve(handler: Handler) -> str:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        sockets.append(server)

        def one(conn: socket.socket) -> None:
            with conn:
                seen = b""
                while b"\r\n\r\n" not in seen:
                    data = conn.recv(65536)
                    if not data:
                        return
                    seen += data
                try:
                    handler(conn)
                except OSError:
                    return  # the client closed the connection: the bound held

        def accept() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                threading.Thread(target=one, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{server.getsockname()[1]}"

    yield serve
    for server in sockets:
        server.close()


def trickle_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{")
    for _ in range(1000):
        time.sleep(0.2)
        conn.sendall(b" ")


def trickle_headers(conn: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"s" * 1000:
        time.sleep(0.2)
        conn.sendall(bytes([byte]))


def large_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 209715200\r\n\r\n")
    for _ in range(3200):
        conn.sendall(b" " * 65536)


def endless_chunks(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"[" * 65536 + b"\r\n"
    for _ in range(16384):  # 1 GiB, unless the client stops reading first
        conn.sendall(chunk)


def gzip_bomb(decoded_mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(bytes(1 << 20)) for _ in range(decoded_mib)) + packer.flush()


BOMB = gzip_bomb(64)  # 64 MiB of zeros in about 64 KiB


def answers(body: bytes, *headers: str) -> Handler:
    def handler(conn: socket.socket) -> None:
        conn.sendall(_head(body, *headers))

    return handler


def _get(url: str, cap: int = CAP, timeout: float = TIMEOUT) -> httpx.Response:
    with bounded_client(timeout, cap) as client:
        return client.get(url + "/x")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ time: a whole-request deadline


@pytest.mark.parametrize("handler", [trickle_body, trickle_headers], ids=["body", "headers"])
def test_a_trickling_server_times_out_at_the_whole_request_deadline(
    hostile: Callable[[Handler], str], handler: Handler
) -> None:
    """One byte every 0.2 s never lets a per-read timeout fire; the whole request still ends."""
    url = hostile(handler)
    began = time.monotonic()
    with pytest.raises(httpx.ReadTimeout, match=r"no whole answer within 1\.5 s"):
        _get(url)
    assert time.monotonic() - began < TIMEOUT + 5, "the deadline bounds the whole request"


def test_a_silent_server_times_out_at_the_deadline(hostile: Callable[[Handler], str]) -> None:
    url = hostile(lambda conn: time.sleep(10))
    began = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        _get(url)
    assert time.monotonic() - began < TIMEOUT + 5


def test_the_deadline_is_read_on_the_injected_clock(hostile: Callable[[Handler], str]) -> None:
    """A clock that jumps past the deadline after the request started: the next network step
    fails at once, whatever the socket timeout would have allowed."""
    readings = iter([0.0, 0.0, 0.0, 0.0])
    transport = BoundedTransport(30.0, CAP, clock=lambda: next(readings, 1000.0))
    url = hostile(trickle_body)
    with httpx.Client(transport=transport, timeout=30.0) as client, pytest.raises(httpx.TimeoutException):
        client.get(url + "/x")


def test_a_trickling_server_trips_the_watchdog(hostile: Callable[[Handler], str]) -> None:
    """Deadline timeouts count like any other: three in a run stop it, answers between them or not."""
    slow, fine = hostile(trickle_body), hostile(answers(b"{}"))
    watchdog = Watchdog(BoundedTransport(0.5, CAP), 0.5)
    with httpx.Client(transport=watchdog, timeout=0.5) as client:
        for _ in range(2):
            with pytest.raises(httpx.ReadTimeout):
                client.get(slow + "/read")
            assert client.get(fine + "/search").status_code == 200
        with pytest.raises(TargetUnresponsive, match=r"let 3 requests of this run go unanswered within 0\.5 s each"):
            client.get(slow + "/read")
        with pytest.raises(TargetUnresponsive, match="go unanswered"):
            client.get(fine + "/search")


# ------------------------------------------------------------------ memory: a cap after decoding


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (large_body, f"the response body is over {CAP} bytes"),
        (endless_chunks, f"the response body is over {CAP} bytes"),
        (answers(BOMB, "Content-Encoding: gzip"), f"over {CAP} bytes once decoded (gzip)"),
    ],
    ids=["200-MB", "endless-chunked", "gzip-bomb"],
)
def test_a_body_over_the_cap_is_a_broken_answer_never_read_whole(
    hostile: Callable[[Handler], str], handler: Handler, reason: str
) -> None:
    url = hostile(handler)
    before = _peak_mib()
    response = _get(url)
    assert response.status_code == 200 and too_large(response)
    assert reason in (broken(response) or ""), broken(response)
    assert len(response.content) < 200 and reason.encode() in response.content, "a stand-in body says why"
    with pytest.raises(ValueError):
        response.json()  # never taken for JSON
    assert _peak_mib() - before < 64, "the body was never held whole"


def test_a_brotli_bomb_is_bounded_too(hostile: Callable[[Handler], str]) -> None:
    brotli = pytest.importorskip("brotli")
    bomb = brotli.compress(bytes(256 << 20), quality=5)
    response = _get(hostile(answers(bomb, "Content-Encoding: br")))
    assert too_large(response) and "once decoded (br)" in (broken(response) or "")


def test_a_body_within_the_cap_is_decoded_once_and_kept(hostile: Callable[[Handler], str]) -> None:
    body = json.dumps({"hints": [], "status": "ok"}).encode()
    response = _get(hostile(answers(gzip.compress(body), "Content-Encoding: gzip")))
    assert broken(response) is None and response.json() == {"hints": [], "status": "ok"}
    assert "content-encoding" not in response.headers, "decoded here: httpx must not decode it again"


def test_a_body_that_is_not_its_coding_is_a_broken_answer(hostile: Callable[[Handler], str]) -> None:
    response = _get(hostile(answers(b"not gzip at all", "Content-Encoding: gzip")))
    assert "does not decode as its Content-Encoding 'gzip' says" in (broken(response) or "")
    assert not too_large(response)


def test_a_header_block_over_the_bound_is_a_broken_answer(hostile: Callable[[Handler], str]) -> None:
    response = _get(hostile(answers(b"{}", "X-Big: " + "h" * (10 << 20))))
    assert response.status_code == 0 and "header block is over" in (broken(response) or "")


def test_the_default_cap_is_a_few_mib_and_configurable(tmp_path: Path) -> None:
    assert MAX_RESPONSE_BYTES == 4 << 20 and load_config(None).max_response_bytes == MAX_RESPONSE_BYTES
    config = tmp_path / "t.toml"
    config.write_text("[target]\nmax_response_bytes = 65536\n", "utf-8")
    assert load_config(str(config)).max_response_bytes == 65536
    for bad in ("0", "-1", "1.5", '"big"', "true", "99999999999"):
        config.write_text(f"[target]\nmax_response_bytes = {bad}\n", "utf-8")
        with pytest.raises(ConfigError, match="max_response_bytes"):
            load_config(str(config))


# ------------------------------------------------------------------ malformed JSON: judged, not crashing


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 100_000, "nests deeper than the suite reads"),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), f"nests {MAX_JSON_DEPTH + 1} levels deep"),
        ('{"ref": "a", "ref": "b"}', "the member 'ref' appears twice in one object"),
        ('{"x": [{"a": 1, "a": 1}]}', "the member 'a' appears twice"),
        ('{"n": NaN}', "NaN is not a JSON value"),
        ('{"n": -Infinity}', "-Infinity is not a JSON value"),
    ],
    ids=["100k-deep", "just-too-deep", "duplicate", "nested-duplicate", "nan", "infinity"],
)
def test_json_the_suite_cannot_walk_is_malformed(text: str, why: str) -> None:
    with pytest.raises(MalformedJSON, match=why):
        strict_json(text)


def test_json_within_the_bounds_reads_as_before() -> None:
    deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert strict_json(deep) is not None and strict_json('{"a": {"a": 1}}') == {"a": {"a": 1}}


def _answer(status: int, body: bytes, **extensions: Any) -> httpx.Response:
    request = httpx.Request("POST", "http://core.test/agent-api/v1/workspaces/w/knowledge/search")
    return httpx.Response(status, content=body, request=request, extensions=extensions)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100_000, "body is not JSON the suite can judge: the body nests deeper"),
        (b'{"hints": [], "hints": [], "status": "ok"}', "the member 'hints' appears twice"),
    ],
    ids=["deep", "duplicate"],
)
def test_a_check_judges_malformed_json_as_the_rule_it_reads(body: bytes, message: str) -> None:
    with pytest.raises(ContractViolation, match=message) as caught:
        checks.search_response(_answer(200, body))
    assert caught.value.requirement == SRCH_001


def test_a_check_judges_a_body_over_the_cap_by_the_size_rule() -> None:
    too_big = _answer(
        200, b"knowledge-conformance: over", kc_broken="the response body is over 9 bytes", kc_too_large=True
    )
    with pytest.raises(ContractViolation, match="HTTP 200: the response body is over 9 bytes") as caught:
        checks.search_response(too_big)
    assert caught.value.requirement == SRCH_008
    undecodable = _answer(200, b"x", kc_broken="the body does not decode", kc_too_large=False)
    with pytest.raises(ContractViolation) as caught:
        checks.page(undecodable, ref="r", max_bytes=None, requirement_bound=SRCH_008)
    assert caught.value.requirement == READ_001


WRONG_TYPES: list[tuple[str, dict[str, Any]]] = [
    ("hints-not-objects", {"hints": ["a", 1], "status": "ok", "trust": "reference_only"}),
    ("ref-a-number", {"hints": [{"title": "t", "summary": "s", "ref": 7}], "status": "ok", "trust": "reference_only"}),
    ("status-a-list", {"hints": [], "status": ["ok"], "trust": "reference_only"}),
    ("body-a-list", [{"hints": []}]),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("name", "body"), WRONG_TYPES, ids=[n for n, _ in WRONG_TYPES])
def test_a_search_answer_with_wrong_member_types_fails_a_rule(name: str, body: Any) -> None:
    with pytest.raises(ContractViolation) as caught:
        checks.search_response(_answer(200, json.dumps(body).encode()))
    assert caught.value.requirement in {SRCH_001, "SRCH-004", "SRCH-005", WIRE_002}, caught.value


PAGES: list[tuple[str, dict[str, Any]]] = [
    ("cursor-an-object", {"ref": "r", "revision": "1", "content": "x", "next_cursor": {"a": 1}}),
    ("content-a-number", {"ref": "r", "revision": "1", "content": 5, "next_cursor": None}),
    (
        "budget-a-string",
        {"ref": "r", "revision": "1", "content": "x", "next_cursor": None, "read_chain_max_bytes": "9"},
    ),
    ("ref-unhashable", {"ref": ["r"], "revision": "1", "content": "x", "next_cursor": None}),
]


@pytest.mark.parametrize(("name", "body"), PAGES, ids=[n for n, _ in PAGES])
def test_a_page_with_wrong_member_types_fails_a_rule(name: str, body: dict[str, Any]) -> None:
    with pytest.raises(ContractViolation):
        checks.page(_answer(200, json.dumps(body).encode()), ref="r", max_bytes=None, requirement_bound=SRCH_008)


def test_a_page_that_is_a_list_fails_a_rule() -> None:
    with pytest.raises(ContractViolation):
        checks.page(_answer(200, b"[1, 2]"), ref="r", max_bytes=None, requirement_bound=SRCH_008)


def test_a_control_answer_that_is_broken_is_a_control_error(hostile: Callable[[Handler], str]) -> None:
    for handler in (answers(b'{"now": 1, "now": 2}'), large_body):
        control = Control.of_core(hostile(handler), "ctl-token-for-a-test", timeout=TIMEOUT)
        try:
            with pytest.raises(ControlError, match=r"appears twice|over"):
                control.now()
        finally:
            control.close()


# ------------------------------------------------------------------ whole runs against a hostile Core

CONTROL_TOKEN = "ctl-" + "b" * 28
Send = Callable[[dict[str, Any]], Awaitable[None]]
Scenario = Callable[[Send, dict[str, Any], bytes], Awaitable[None]]
"""How a hostile Core answers one request: ``send``, and the simulator's own answer (its
``http.response.start`` message and body) for a scenario that breaks a real answer."""


class HostileCore:
    """The simulator, except that every answer to one operation (a path ending in ``suffix``) is
    the scenario's: a proxy that answers one route with an attack, as a hostile Core would."""

    def __init__(self, app: Any, scenario: Scenario, suffix: str = "/knowledge/read") -> None:
        self.app, self.scenario, self.suffix = app, scenario, suffix
        self.attacks = 0
        self.first: float | None = None  # when the first attack began (time.monotonic)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(self.suffix):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        self.attacks += 1
        self.first = self.first or time.monotonic()
        try:
            await self.scenario(send, start, b"".join(chunks))
        except Exception:  # the suite hung up: the bound held
            return


def _start(status: int, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), *headers],
    }


async def trickling(send: Send, start: dict[str, Any], body: bytes) -> None:
    """A byte every 5 s: no single read ever waits long enough to time out."""
    await send(_start(200, (b"content-length", b"1000")))
    for _ in range(1000):
        await send({"type": "http.response.body", "body": b" ", "more_body": True})
        await asyncio.sleep(5)


def bombing(bomb: bytes) -> Scenario:
    async def scenario(send: Send, start: dict[str, Any], body: bytes) -> None:
        length = str(len(bomb)).encode()
        await send(_start(200, (b"content-encoding", b"gzip"), (b"content-length", length)))
        await send({"type": "http.response.body", "body": bomb})

    return scenario


def replacing(make: Callable[[bytes], bytes], *headers: tuple[bytes, bytes]) -> Scenario:
    """The simulator's status, with the body ``make`` turns its own into."""

    async def scenario(send: Send, start: dict[str, Any], body: bytes) -> None:
        new = make(body)
        await send(
            {
                **_start(start["status"], *headers),
                "headers": [*_start(0)["headers"], *headers, (b"content-length", str(len(new)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": new})

    return scenario


def wrong_types(body: bytes) -> bytes:
    data = json.loads(body)
    if isinstance(data, dict) and "content" in data:
        data.update(content=5, next_cursor={"cursor": True}, revision=["r"])
    return json.dumps(data).encode()


SCENARIOS: dict[str, Scenario] = {
    "trickle": trickling,
    "gzip-bomb": bombing(b""),  # the bomb is made when a run needs it (seconds of CPU)
    "deep-json": replacing(lambda body: b"[" * 100_000),
    "duplicate-keys": replacing(lambda body: b'{"content": "", ' + body[1:] if body.startswith(b"{") else body),
    "wrong-types": replacing(wrong_types),
    "huge-header": replacing(lambda body: body, (b"x-huge", b"h" * (10 << 20))),
}


def serve_hostile(scenario: Scenario, suffix: str = "/knowledge/read") -> tuple[str, HostileCore, Callable[[], None]]:
    """The simulator (with its control extension) behind a hostile proxy, on a loopback port."""
    app = simulator.create_app(SimConfig(control_token=CONTROL_TOKEN, demo=False, seed=5))
    hostile = HostileCore(app, scenario, suffix)
    url, stop = serve_over_loopback(hostile)
    return url, hostile, stop


def run_suite(url: str, root: Path, *args: str, timeout_seconds: float = 30, limit: float = 900) -> dict[str, Any]:
    """One run of the suite against ``url`` in a process of its own: its exit code, wall time,
    peak RSS (MiB, of the suite's process and what it waited for), output, verdict and reports."""
    config = root / "target.toml"
    config.write_text(
        f'[target]\ntimeout_seconds = {timeout_seconds}\n[control]\nurl = "{url}/_control/v1"\n'
        'token = {env = "KC_CONTROL"}\n',
        "utf-8",
    )
    cmd = [*SUITE, "--no-shrink", "--target", url, "--target-config", str(config), "--mcp-target", "none"]
    env = {**os.environ, "KC_CONTROL": CONTROL_TOKEN}
    began = time.monotonic()
    peak = root / "peak"
    proc = launch(
        [*cmd, "--report-dir", str(root / "r"), *args], peak, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    killer = threading.Timer(limit, kill, (proc,))  # a run that hangs fails the test instead of hanging it
    killer.start()
    try:
        assert proc.stdout is not None
        out = proc.stdout.read().decode("utf-8", "replace")
        proc.wait()
    finally:
        killer.cancel()
    took = time.monotonic() - began
    results = root / "r" / "results.json"
    return {
        "exit": proc.returncode,
        "seconds": took,
        "ended": time.monotonic(),
        "peak_mib": peak_mib(peak),
        "out": out,
        "verdict": json.loads(results.read_text("utf-8"))["verdict"] if results.is_file() else None,
        "reports": sorted(p.name for p in (root / "r").glob("*")) if (root / "r").is_dir() else [],
    }


def test_a_core_that_trickles_its_reads_ends_the_run_as_a_harness_error(tmp_path: Path) -> None:
    """Every read answered a byte every 5 s: each read ends at the deadline, and three of them end
    the run (exit 7) with every report written, within 2 x timeout_seconds + 30 s of the first."""
    url, hostile, stop = serve_hostile(trickling)
    try:
        run = run_suite(url, tmp_path, timeout_seconds=3, limit=300)
    finally:
        stop()
    assert run["exit"] == 7 and run["verdict"] == "error", run["out"][-3000:]
    assert "go unanswered within 3 s each" in run["out"] or "in a row within 3 s" in run["out"], run["out"][-3000:]
    assert run["reports"] == ["junit.xml", "report.html", "report.md", "results.json"]
    assert "INTERNALERROR" not in run["out"] and "Traceback" not in run["out"]
    held = run["ended"] - (hostile.first or 0)
    assert held < 2 * 3 + 30, f"the trickle held the run {held:.0f} s"  # from its first trickled read
    assert run["seconds"] < 180, f"took {run['seconds']:.0f} s"  # the suite's own start counted, on a loaded machine
    print(
        f"\ntrickle: exit {run['exit']} in {run['seconds']:.1f} s ({held:.1f} s from the first trickled read), "
        f"peak {run['peak_mib']:.0f} MiB, {hostile.attacks} reads"
    )


def test_a_gzip_bomb_on_every_read_fails_the_read_rules_in_bounded_memory(tmp_path: Path) -> None:
    """A 2 MB gzip bomb (2 GiB of zeros) for every read: each is a failed check naming the size,
    never an expansion in memory, never a crash (exit 1, not 3 or 7)."""
    url, hostile, stop = serve_hostile(bombing(gzip_bomb(2048)))
    try:
        run = run_suite(url, tmp_path, limit=600)
    finally:
        stop()
    assert run["exit"] == 1 and run["verdict"] == "non-conformant", run["out"][-3000:]
    assert "once decoded (gzip)" in run["out"], run["out"][-3000:]
    assert "INTERNALERROR" not in run["out"] and "harness error in" not in run["out"], run["out"][-3000:]
    assert run["peak_mib"] < 1024, f"peak RSS {run['peak_mib']:.0f} MiB"
    print(
        f"\ngzip bomb: exit {run['exit']} in {run['seconds']:.1f} s, peak {run['peak_mib']:.0f} MiB, {hostile.attacks} reads"
    )


@pytest.mark.parametrize("charset", ["utf-16", "rot13", "zlib", "base64", "hex", "bz2", "uu", "idna", "nonsense"])
def test_an_answer_s_text_never_raises_whatever_its_charset(charset: str) -> None:
    """A charset that names no text decoder (rot13, zlib), or one the body does not decode as
    (UTF-16 without a byte order mark), reads as UTF-8: the checks judge the answer, never crash on it."""
    body = b'{"error": "invalid_request", "message": "x"}'
    answer = Answer(400, headers=[("content-type", f"application/json; charset={charset}")], content=body)
    assert answer.text == body.decode("utf-8")
    assert answer.json() == {"error": "invalid_request", "message": "x"}
