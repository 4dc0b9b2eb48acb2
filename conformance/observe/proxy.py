"""The reverse proxy: an ASGI application forwarding each request to the upstream with httpcore
(httpx's own transport: the same TLS, pooling and HTTP/1.1, without the client layer's request
and response models, which cost a third of the proxy's time per exchange), streaming both bodies
chunk by chunk as they come, and copying what a rule needs beside them.

It changes nothing end to end: the method, path, query, every end-to-end header and every body
byte go out as they came (only the hop-by-hop headers a proxy must not forward, and ``Host``,
which names the upstream, differ; a body without a length goes out chunked, as it came), and the
upstream's status, headers and raw body bytes (still content-coded) come back the same. The copy is bounded (``seen.BodyCapture``) and handed over
without waiting (``pipeline.Pipeline.submit``); a failure on the observing side never reaches
the exchange. When the upstream gives no answer the proxy says so itself: 502 with a one-line
JSON body, as any gateway does."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpcore

from conformance.observe.credentials import Credentials
from conformance.observe.seen import KEPT_HEADERS, REQUEST_KEEP, RESPONSE_KEEP, BodyCapture, Seen

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Headers that describe one connection, not the message (RFC 9110 7.6.1): never forwarded."""
NO_ANSWER = b'{"error":"bad_gateway","message":"knowledge-conformance observe: the upstream gave no answer"}'


def upstream_client(timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None) -> Upstream:
    """The connections to the upstream: TLS verified (the system's trust store, or ``ssl_context``)."""
    return Upstream(ssl_context or ssl.create_default_context(), timeout)


class Upstream:
    """Keep-alive connections to the upstream (httpcore's own HTTP/1.1 connections), taken and given
    back in constant time. httpcore's pool scans every connection it holds on each request's start
    and end, polling each idle socket (two system calls and an attribute map each): with 16 clients
    a fifth of the proxy's time. Here a request takes the most recently returned idle connection,
    checking that one only. Connect 10 s at most; reading and writing ``timeout`` each; at most
    ``MAX_CONNECTIONS`` open, ``MAX_IDLE`` kept idle for ``KEEPALIVE`` seconds."""

    MAX_CONNECTIONS = 512
    MAX_IDLE = 128
    KEEPALIVE = 30.0

    def __init__(self, ssl_context: ssl.SSLContext, timeout: float) -> None:
        self.ssl_context = ssl_context
        self.timeouts = {"connect": min(timeout, 10.0), "read": timeout, "write": timeout, "pool": timeout}
        self._idle: list[httpcore.AsyncHTTPConnection] = []
        self._slots: asyncio.Semaphore | None = None

    def _take(self, origin: httpcore.Origin) -> tuple[httpcore.AsyncHTTPConnection, list[httpcore.AsyncHTTPConnection]]:
        """An idle connection still open (else a new one), and the stale ones passed on the way."""
        stale: list[httpcore.AsyncHTTPConnection] = []
        while self._idle:
            connection = self._idle.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection, stale
            stale.append(connection)
        new = httpcore.AsyncHTTPConnection(origin, ssl_context=self.ssl_context, keepalive_expiry=self.KEEPALIVE)
        return new, stale

    @contextlib.asynccontextmanager
    async def stream(
        self, method: bytes, url: bytes, *, headers: list[tuple[bytes, bytes]], content: AsyncIterator[bytes] | None
    ) -> AsyncIterator[httpcore.Response]:
        """One exchange on a connection of its own for its duration, given back once its answer is read."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.MAX_CONNECTIONS)
        async with self._slots:
            connection, stale = self._take(httpcore.URL(url).origin)
            for gone in stale:
                await gone.aclose()
            kept = False
            try:
                async with connection.stream(
                    method, url, headers=headers, content=content, extensions={"timeout": self.timeouts}
                ) as response:
                    yield response
                kept = connection.is_idle() and len(self._idle) < self.MAX_IDLE
            finally:
                if kept:
                    self._idle.append(connection)
                else:
                    await connection.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()


def _forwarded(headers: list[tuple[bytes, bytes]], *, request: bool) -> list[tuple[bytes, bytes]]:
    """End-to-end headers as they came: the hop-by-hop ones (and those ``Connection`` names) left
    out, and on a request ``Host`` (the proxy names the upstream's)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    }
    dropped = HOP_BY_HOP | named | ({b"host"} if request else frozenset())
    return [(name, value) for name, value in headers if name.lower() not in dropped]


class ObserveProxy:
    """``ObserveProxy(upstream, sink, credentials)``: an ASGI app; ``sink`` receives each exchange
    (it must not block: ``Pipeline.submit``). ``clock`` stamps the exchanges (injected)."""

    def __init__(
        self,
        upstream: str,
        sink: Callable[[Seen], None],
        credentials: Credentials,
        *,
        client: Upstream | None = None,
        clock: Callable[[], float] = time.time,
        auth_header: str = "Authorization",
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.host = urlsplit(self.upstream).netloc.rpartition("@")[2].encode("ascii")
        self.sink = sink
        self.credentials = credentials
        self.client = client or upstream_client()
        self.clock = clock
        self.auth_header = auth_header.lower().encode("latin-1")
        self._numbers = itertools.count(1)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":  # the contract has no WebSocket; refused, as a plain HTTP proxy would
            await send({"type": "websocket.close", "code": 1003})
            return
        await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        number, sent = next(self._numbers), self.clock()
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        request_copy, response_copy = BodyCapture(REQUEST_KEEP), BodyCapture(RESPONSE_KEEP)
        has_body = any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers)

        async def request_body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    request_copy.add(chunk)
                    yield chunk
                if not message.get("more_body", False):
                    return

        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string", b"")
        url = self.upstream.encode("ascii") + raw_path + ((b"?" + query) if query else b"")
        forwarded = [(b"host", self.host), *_forwarded(headers, request=True)]
        if has_body and not any(name.lower() == b"content-length" for name, _ in headers):
            forwarded.append((b"transfer-encoding", b"chunked"))  # as it came: a body of no stated length
        status, kept, coding = 0, [], ""
        try:
            async with self.client.stream(
                scope["method"].encode("ascii"),
                url,
                headers=forwarded,
                content=request_body() if has_body else None,
            ) as response:
                status = response.status
                raw_headers = list(response.headers)
                kept = [
                    (k.decode("latin-1").lower(), v.decode("latin-1"))
                    for k, v in raw_headers
                    if k.lower().decode("latin-1") in KEPT_HEADERS
                ]
                coding = ", ".join(v for k, v in kept if k == "content-encoding")
                start = [(k.lower(), v) for k, v in _forwarded(raw_headers, request=False)]
                await send({"type": "http.response.start", "status": status, "headers": start})
                async for chunk in response.aiter_stream():
                    response_copy.add(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception:
            if status == 0:  # nothing went back yet: say the upstream gave no answer
                await self._no_answer(send)
            else:  # the answer broke off mid-way: end it as it ended (the client sees a cut body)
                raise
        finally:
            self._hand_over(number, sent, scope, headers, request_copy, status, response_copy, kept, coding)

    async def _no_answer(self, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 502,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(NO_ANSWER)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": NO_ANSWER, "more_body": False})

    def _hand_over(
        self,
        number: int,
        sent: float,
        scope: dict[str, Any],
        headers: list[tuple[bytes, bytes]],
        request_copy: BodyCapture,
        status: int,
        response_copy: BodyCapture,
        kept: list[tuple[str, str]],
        coding: str,
    ) -> None:
        """Build the exchange's record and give it to the sink; whatever fails here stays here."""
        try:
            auth = next((v.decode("latin-1") for k, v in headers if k.lower() == self.auth_header), None)
            request_coding = next((v.decode("latin-1") for k, v in headers if k.lower() == b"content-encoding"), "")
            seen = Seen(
                number,
                sent,
                self.clock(),
                scope["method"],
                scope["path"],
                scope.get("query_string", b"").decode("latin-1"),
                self.credentials.seen(auth),
                request_copy.body(request_coding),
                status,
                response_copy.body(coding),
                tuple(kept),
            )
            self.sink(seen)
        except Exception:  # fail open: observing never breaks forwarding
            return
