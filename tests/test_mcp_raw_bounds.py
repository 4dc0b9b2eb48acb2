"""The bare MCP posts (conformance.mcp.raw) are bounded like every other answer of a target: in
time as a whole, in memory once decoded, and they stop at the message that answers them."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from conformance.mcp import raw

Answer = Callable[[BaseHTTPRequestHandler, threading.Event], None]


@contextmanager
def serving(answer: Answer) -> Iterator[str]:
    """A server on loopback whose every POST ``answer`` writes by hand; its URL."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            try:
                answer(self, stop)
            except OSError:
                pass  # the suite hung up: what it should do

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def _headers(handler: BaseHTTPRequestHandler, kind: str, **more: str) -> None:
    handler.send_response(200)
    handler.send_header("content-type", kind)
    for name, value in more.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.flush()


def _drip(handler: BaseHTTPRequestHandler, stop: threading.Event, byte: bytes) -> None:
    """``byte`` every 0.2 s until the server stops."""
    while not stop.wait(0.2):
        handler.wfile.write(byte)
        handler.wfile.flush()


def _trickle(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """An event stream that never sends an event: a comment byte every 0.2 s, for ever."""
    handler.protocol_version = "HTTP/1.0"
    _headers(handler, "text/event-stream")
    _drip(handler, stop, b":")


def test_an_event_stream_that_trickles_ends_within_the_deadline() -> None:
    with serving(_trickle) as url:
        started = time.monotonic()
        answer = raw.initialize(url, 1.0)
        took = time.monotonic() - started
    assert answer.status == 200 and answer.message is None
    assert took < 3.0, f"the post took {took:.1f} s with a 1 s deadline"


def _answer_then_hold(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """The answer as one event, then the stream held open (the seed's transport only SHOULDs its close)."""
    handler.protocol_version = "HTTP/1.0"
    _headers(handler, "text/event-stream")
    event = {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": raw.PROTOCOL}}
    handler.wfile.write(b"event: message\ndata: " + json.dumps(event).encode() + b"\n\n")
    handler.wfile.flush()
    stop.wait(30)


def test_an_event_stream_is_read_until_its_answer_not_its_end() -> None:
    with serving(_answer_then_hold) as url:
        started = time.monotonic()
        answer = raw.initialize(url, 20.0)
        took = time.monotonic() - started
    assert answer.message is not None and answer.message["result"]["protocolVersion"] == raw.PROTOCOL
    assert took < 5.0, f"the post waited {took:.1f} s for a stream it had its answer from"


def test_a_compressed_answer_is_decoded_within_the_cap() -> None:
    """256 MiB of zeros in a few hundred kilobytes: decoded to the cap at most, never whole."""
    brotli = pytest.importorskip("brotli")  # the http extra's decoder, as the transport's tests take it
    bomb = brotli.compress(b"\0" * (256 * 1024 * 1024), quality=5)

    def _bomb(handler: BaseHTTPRequestHandler, _stop: threading.Event) -> None:
        _headers(handler, "application/json", content_encoding="br", content_length=str(len(bomb)))
        handler.wfile.write(bomb)

    with serving(_bomb) as url:
        tracemalloc.start()
        try:
            answer = raw.initialize(url, 10.0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert answer.status == 200 and answer.message is None
    assert peak < 64 * 1024 * 1024, f"the post held {peak / 2**20:.0f} MiB for a {len(bomb)}-byte body"


def _trickle_headers(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A header block that never ends: a byte of one header's value every 0.2 s."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Slow: ")
    handler.wfile.flush()
    _drip(handler, stop, b"a")


def test_a_header_block_that_trickles_ends_within_the_deadline() -> None:
    with serving(_trickle_headers) as url:
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            raw.initialize(url, 1.0)
        took = time.monotonic() - started
    assert took < 3.0, f"the post took {took:.1f} s with a 1 s deadline"
