"""HTTP plumbing: an in-process ASGI transport for sync tests, a bounded transport for a target
the suite cannot trust (a whole-request deadline, a cap on every body after decoding, answers
read as strict JSON), a rate limit, a watchdog that stops a run against a target that no longer
answers, and a recorder that keeps every exchange (secrets redacted) for the reports."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import importlib
import itertools
import json
import random
import re
import ssl
import threading
import time
import unittest
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

import httpcore
import httpx

from conformance.common import aside, fanout
from conformance.common.outcomes import HarnessError, NotVerified
from conformance.common.secrets import SECRETS, clip, scrub
from conformance.common.untrusted import shown

REDACTED = "Bearer ***"
BODY_KEEP = 2048


class InProcessTransport(httpx.BaseTransport):
    """Runs an ASGI app on a private event loop through ``httpx.ASGITransport``: no sockets."""

    def __init__(self, app: Any) -> None:
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def send() -> httpx.Response:
            inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
            response = await self._asgi.handle_async_request(inner)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)

        with self._lock:
            return self._loop.run_until_complete(send())

    def close(self) -> None:
        self._loop.close()


# ------------------------------------------------------------------ a target the suite cannot trust

Clock = Callable[[], float]
"""Seconds on a monotonic scale (``time.monotonic``; a test passes its own)."""

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""Default cap on a response body after decoding (``[target].max_response_bytes``): the contract's
answers are tens of kilobytes at most, so anything near the cap is broken, and the suite's memory
stays bounded whatever a server sends (a gzip bomb, an endless chunked body)."""
MAX_JSON_DEPTH = 64
"""Deepest nesting an answer may have: no answer of the contract nests more than a few levels, and
deeper ones would exhaust the interpreter's stack in the checks that walk them."""

BROKEN = "kc_broken"
"""The key under which a response's extensions say why it is not an answer the checks can read
(over the cap, undecodable, headers too large); its status and body are then synthetic."""
TOO_LARGE = "kc_too_large"
"""The key under which a broken response's extensions say its body was over the cap."""

_DEADLINE: ContextVar[float | None] = ContextVar("kc_request_deadline", default=None)
"""When the request this thread is sending must be over, on the transport's clock (None: no bound)."""


def _within(timeout: float | None, clock: Clock, error: type[Exception]) -> float | None:
    """The socket timeout of one network step: never past the request's deadline (``error`` once it passed)."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - clock()
    if left <= 0:
        raise error("the whole request passed its deadline")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the current request's deadline:
    a server that trickles a byte now and then cannot hold a request past it."""

    def __init__(self, inner: httpcore.NetworkStream, clock: Clock) -> None:
        self._inner, self._clock = inner, clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _within(timeout, self._clock, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _within(timeout, self._clock, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bounded = _within(timeout, self._clock, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded), self._clock)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """The standard socket backend, each connection bounded by the current request's deadline."""

    def __init__(self, clock: Clock) -> None:
        self._inner, self._clock = httpcore.SyncBackend(), clock

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _within(timeout, self._clock, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return _DeadlineStream(stream, self._clock)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        bounded = _within(timeout, self._clock, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options), self._clock)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProxyError, httpx.ProxyError),
)


@contextlib.contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    """httpcore's errors as the httpx ones every caller (and the Watchdog) already handles."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise _mapped(exc, httpx.TimeoutException)(str(exc) or type(exc).__name__, request=request) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, httpcore.ProxyError) as exc:
        raise _mapped(exc, httpx.TransportError)(str(exc) or type(exc).__name__, request=request) from exc


def _mapped(exc: Exception, fallback: type[httpx.TransportError]) -> type[httpx.TransportError]:
    return next((mine for theirs, mine in _HTTPX_ERRORS if isinstance(exc, theirs)), fallback)


def _headers_too_large(exc: BaseException) -> bool:
    """Whether a protocol error is h11's refusal of a header block over its buffer (hint 431)."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "error_status_hint", None) == 431:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _cut_json(headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
    """A body its Content-Type calls JSON that does not parse."""
    kind = b",".join(v for k, v in headers if k.lower() == b"content-type").lower()
    if b"json" not in kind or not body:
        return False
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return True
    return False


def _lost(exc: BaseException) -> bool:
    """The server closed the connection without an answer: a lost response (a fault the control
    extension can inject on purpose), never read again; garbage in place of an answer is not."""
    return "disconnected" in str(exc).lower()


def _inflate(wbits: int) -> Callable[[bytes, int], bytes]:
    def decode(raw: bytes, limit: int) -> bytes:
        return zlib.decompressobj(wbits).decompress(raw, limit)

    return decode


def _deflate(raw: bytes, limit: int) -> bytes:
    """``deflate`` as httpx reads it: zlib-wrapped, else a raw deflate stream (servers send both)."""
    try:
        return _inflate(zlib.MAX_WBITS)(raw, limit)
    except zlib.error:
        return _inflate(-zlib.MAX_WBITS)(raw, limit)


def _brotli(raw: bytes, limit: int) -> bytes:
    """``br`` with the output bounded (brotli 1.2's output_buffer_limit; an older one cannot bound it)."""
    module: Any = importlib.import_module("brotli")
    return bytes(module.Decompressor().process(raw, output_buffer_limit=limit))


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _inflate(zlib.MAX_WBITS | 16),
    "x-gzip": _inflate(zlib.MAX_WBITS | 16),
    "deflate": _deflate,
    "br": _brotli,
}


def decode_body(raw: bytes, codings: str, cap: int) -> tuple[bytes, str | None, bool]:
    """The body with its content codings undone (the last applied first), each stage's output at
    most ``cap`` + 1 bytes; why it is broken (over the cap, or not what its coding says), or None;
    and whether it was over the cap. A coding the suite does not know is left as httpx leaves it."""
    for coding in reversed([c.strip().lower() for c in codings.split(",") if c.strip()]):
        decoder = _DECODERS.get(coding)
        if coding == "identity":
            continue
        if decoder is None:
            return raw, None, False
        try:
            raw = decoder(raw, cap + 1)
        except (ImportError, TypeError):
            return raw, None, False  # no brotli that can bound its output: the body stays as sent
        except Exception as exc:  # zlib.error, brotli.error: what the server sent is not that coding
            return b"", f"the body does not decode as its Content-Encoding {coding!r} says ({shown(exc, 120)})", False
        if len(raw) > cap:
            return b"", f"the response body is over {cap} bytes once decoded ({coding})", True
    return raw, None, False


def _read_capped(stream: Iterable[bytes], cap: int) -> bytes | None:
    """At most ``cap`` bytes of a body as sent, or None once it is longer: never more in memory."""
    body = bytearray()
    for chunk in stream:
        body += chunk
        if len(body) > cap:
            return None
    return bytes(body)


class MalformedJSON(ValueError):
    """A body that is not JSON the suite can judge: nested too deep, a member named twice in one
    object, NaN or Infinity. A ValueError, so every reader that takes non-JSON as a broken answer
    takes this one the same way."""


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        twice = next(name for name, _ in pairs if name in seen or seen.add(name))  # type: ignore[func-returns-value]
        raise MalformedJSON(
            f"the member {shown(twice, 80)!r} appears twice in one object (RFC 8259: names should be unique; "
            "which one a reader takes is undefined)"
        )
    return members


def _no_constant(name: str) -> Any:
    raise MalformedJSON(f"{name} is not a JSON value (RFC 8259 has no NaN or Infinity)")


def _depth(value: Any) -> int:
    """How deep ``value`` nests, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def strict_json(content: bytes | str) -> Any:
    """A body read as JSON the checks can walk safely, or :class:`MalformedJSON` (a ValueError)
    saying why not; malformed text is ``json.JSONDecodeError`` as before."""
    try:
        value = json.loads(content, object_pairs_hook=_unique_members, parse_constant=_no_constant)
    except RecursionError:
        raise MalformedJSON(f"the body nests deeper than the suite reads (at most {MAX_JSON_DEPTH} levels)") from None
    depth = _depth(value)
    if depth > MAX_JSON_DEPTH:
        raise MalformedJSON(f"the body nests {depth} levels deep, over the {MAX_JSON_DEPTH} the suite reads")
    return value


class Answer(httpx.Response):
    """A response from a target the suite cannot trust: ``json()`` is :func:`strict_json`, and
    :func:`broken` says when the body is a stand-in for one that could not be read."""

    def json(self, **kwargs: Any) -> Any:
        return strict_json(self.content)

    @property
    def encoding(self) -> str | None:
        """The charset the answer names when it is a text encoding Python knows, else UTF-8: a
        ``charset`` of ``rot13``, ``zlib`` or ``base64`` named a codec that is no text decoder, and
        reading the text raised inside the suite's own checks instead of being judged."""
        named = super().encoding or "utf-8"
        try:
            return named if codecs.lookup(named)._is_text_encoding else "utf-8"
        except LookupError:
            return "utf-8"

    @encoding.setter
    def encoding(self, value: str) -> None:
        httpx.Response.encoding.fset(self, value)  # type: ignore[attr-defined]

    @property
    def text(self) -> str:
        """The body as text, never an exception: a body that its charset does not decode (UTF-16
        without a byte order mark) reads as UTF-8 with replacement characters."""
        try:
            return super().text
        except (UnicodeError, LookupError, TypeError, ValueError, AssertionError):
            return self.content.decode("utf-8", "replace")


def broken(response: object) -> str | None:
    """Why ``response`` is not an answer the checks can read (its body over the cap, undecodable,
    its headers too large), or None."""
    extensions = getattr(response, "extensions", None)
    why = extensions.get(BROKEN) if isinstance(extensions, dict) else None
    return why if isinstance(why, str) else None


def too_large(response: object) -> bool:
    """Whether ``response`` is broken because its body was over the cap (a size rule may name it)."""
    extensions = getattr(response, "extensions", None)
    return isinstance(extensions, dict) and extensions.get(TOO_LARGE) is True


def _stand_in(
    request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]], why: str, *, large: bool = False
) -> Answer:
    """A response the checks judge as the broken answer it was: the real status (0 when none was
    read), the real headers, and a body that only says why (never JSON, so no reader takes it for one)."""
    body = f"knowledge-conformance: {why}; the body was not kept".encode()
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-encoding", b"content-length")]
    return Answer(status, headers=kept, content=body, request=request, extensions={BROKEN: why, TOO_LARGE: large})


@cache
def verifying_tls() -> ssl.SSLContext:
    """One verifying TLS context (httpx's, certifi's CA bundle) for the suite's HTTP clients of the
    process: each new one reads the bundle again (some 25-50 ms), and a run makes a client per raw
    MCP post; a context is safe to share, and none is changed after it is made. (MCP sessions
    keep the MCP client library's own, conformance.mcp.session.)"""
    return httpx.create_ssl_context()


class BoundedTransport(httpx.BaseTransport):
    """HTTP/1.1 to a target the suite cannot trust. Each request is over within ``timeout_seconds``
    as a whole (connect, headers, body: every socket step waits at most until the deadline), its
    body is read into at most ``max_bytes`` after decoding (a larger one, or one whose header
    block is over h11's buffer, becomes a stand-in :func:`broken` names), and its answer reads as
    strict JSON (:class:`Answer`). httpx bounds only each read; a trickling server held a request
    for as long as it liked, and a 2 MB gzip bomb expanded to gigabytes."""

    def __init__(
        self,
        timeout_seconds: float,
        max_bytes: int = MAX_RESPONSE_BYTES,
        *,
        clock: Clock = time.monotonic,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        self.timeout = timeout_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._pool = httpcore.ConnectionPool(
            ssl_context=verifying_tls(),
            socket_options=socket_options,
            network_backend=_DeadlineBackend(clock),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = self._clock() + self.timeout
        bound = _DEADLINE.set(deadline)
        try:
            with _as_httpx(request):
                return self._exchange(request, deadline)
        except httpx.TimeoutException as exc:
            if self._clock() < deadline:
                raise  # one step's own timeout, shorter than the whole
            raise type(exc)(
                f"no whole answer within {self.timeout:g} s (connect, headers and body)", request=request
            ) from exc
        finally:
            _DEADLINE.reset(bound)

    def _exchange(self, request: httpx.Request, deadline: float) -> httpx.Response:
        try:
            sent = self._send(request, deadline)
        except httpcore.RemoteProtocolError as exc:
            if _headers_too_large(exc):
                why = "the response's header block is over the 100 KiB HTTP/1.1 reader's bound"
            elif _lost(exc):
                raise
            else:
                why = f"the response is not HTTP/1.1 (twice, the second time on a new connection): {exc}"
            return _stand_in(request, 0, [], why)
        assert isinstance(sent.stream, Iterable)
        try:
            raw = _read_capped(sent.stream, self.max_bytes)
        finally:
            if hasattr(sent.stream, "close"):
                sent.stream.close()  # an unfinished body closes its connection: it is never reused
        status, headers = sent.status, sent.headers
        if raw is None:
            return _stand_in(request, status, headers, f"the response body is over {self.max_bytes} bytes", large=True)
        codings = b",".join(v for k, v in headers if k.lower() == b"content-encoding").decode("latin-1")
        body, undecoded, large = decode_body(raw, codings, self.max_bytes) if codings else (raw, None, False)
        if undecoded is not None:
            return _stand_in(request, status, headers, undecoded, large=large)
        kept = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]  # decoded here, not again
        if _cut_json(kept, body):
            self._drop_idle()
        return Answer(status, headers=kept, content=body, request=request, extensions=sent.extensions)

    def _drop_idle(self) -> None:
        """Close the pool's idle connections: an answer that is JSON by its type but not whole JSON
        may have been cut short by a Content-Length that undercounts it, its rest left on the
        kept-alive connection to be read as the next request's answer."""
        for connection in self._pool.connections:
            if connection.is_idle():
                connection.close()

    def _send(self, request: httpx.Request, deadline: float) -> httpcore.Response:
        """One request, tried again once on a new connection when the answer broke HTTP/1.1: a Core
        whose earlier answer overran its Content-Length left bytes on the kept-alive connection
        that the next request then reads as its answer. The earlier answer failed its own check;
        this one gets a fair reading (the broken connection was dropped). Twice broken is this
        answer's own fault, judged by the check that reads it."""
        try:
            return self._pool.handle_request(self._core_request(request, deadline))
        except httpcore.RemoteProtocolError as exc:
            if _headers_too_large(exc) or _lost(exc):
                raise
            return self._pool.handle_request(self._core_request(request, deadline))

    def _core_request(self, request: httpx.Request, deadline: float) -> httpcore.Request:
        """The request for httpcore, every timeout it names no longer than the time left."""
        left = max(0.0, deadline - self._clock())
        asked = request.extensions.get("timeout", {})
        timeouts = {k: left if asked.get(k) is None else min(float(asked[k]), left) for k in TIMEOUT_KINDS}
        return httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions={**request.extensions, "timeout": timeouts},
        )

    def close(self) -> None:
        self._pool.close()


TIMEOUT_KINDS = ("connect", "read", "write", "pool")


class _Body(httpx.SyncByteStream):
    """A streamed answer's body as httpx reads it, httpcore's errors as httpx's."""

    def __init__(self, stream: Iterable[bytes], request: httpx.Request) -> None:
        self._stream, self._request = stream, request

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx(self._request):
            yield from self._stream

    def close(self) -> None:
        if hasattr(self._stream, "close"):
            self._stream.close()


class StreamedTransport(BoundedTransport):
    """:class:`BoundedTransport`'s deadline over connecting and the whole header block, the body
    left to the caller to read, each read waiting at most what was left of the deadline when the
    headers came: for an event stream read up to the message it waits for. A server that trickled
    its headers held a plain httpx client for as long as it liked."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = self._clock() + self.timeout
        bound = _DEADLINE.set(deadline)
        try:
            with _as_httpx(request):
                sent = self._pool.handle_request(self._core_request(request, deadline))
        finally:
            _DEADLINE.reset(bound)
        assert isinstance(sent.stream, Iterable)
        return httpx.Response(
            sent.status, headers=sent.headers, stream=_Body(sent.stream, request), extensions=sent.extensions
        )


def bounded_client(timeout_seconds: float, max_bytes: int = MAX_RESPONSE_BYTES, **kwargs: Any) -> httpx.Client:
    """An httpx client whose every request is bounded in time and memory (:class:`BoundedTransport`)."""
    transport = BoundedTransport(timeout_seconds, max_bytes)
    return httpx.Client(transport=transport, timeout=timeout_seconds, **kwargs)


def bounded_get(
    url: str | httpx.URL, headers: Mapping[str, str], timeout_seconds: float, max_bytes: int = MAX_RESPONSE_BYTES
) -> httpx.Response:
    """One GET through :func:`bounded_client` (a check before the run: its client is closed again)."""
    with bounded_client(timeout_seconds, max_bytes) as client:
        return client.get(url, headers=headers)


UNREGISTERED = "unregistered"
"""The identity of a credential no identity of the run holds (one a test made up or altered)."""


class Identities:
    """The name of every credential the run uses, by its value: a configured identity's name
    (``primary``, ``other_route``, ...) or, for a token minted outside a world, the account it was
    minted for. A curl reproduction names whose request it was, never the credential itself."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def name(self, token: str | None, name: str) -> None:
        if token:
            with self._lock:
                self._names[token] = name

    def of(self, token: str) -> str | None:
        with self._lock:
            return self._names.get(token)


IDENTITIES = Identities()


def token_variable(identity: str) -> str:
    """The environment variable a reproduction reads the identity's token from: ``CORE_TOKEN_PRIMARY``."""
    return "CORE_TOKEN_" + re.sub(r"[^A-Z0-9]+", "_", identity.upper()).strip("_")


OPERATIONS = {"capabilities": "capabilities", "turns": "turn", "search": "search", "read": "read"}
"""The Core's operations by their key in ``[wire.paths]``, named as the catalogue's ``observe.via`` names them."""


def operation_of(path: str, paths: Mapping[str, str]) -> str:
    """Which Core operation a request path is (``search``, ``read``, ...), or ``other``."""
    bare = path.split("?", 1)[0]
    for key, operation in OPERATIONS.items():
        template = paths.get(key)
        if template and re.fullmatch(re.escape(template).replace(re.escape("{route}"), "[^/]+"), bare):
            return operation
    return "other"


TIMEOUTS_IN_A_ROW = 3
"""Transport timeouts in a row after which the target is taken to have stopped answering: every
later request fails at once, and the run stops as a harness error (never hours of waiting)."""
TIMEOUTS_IN_ALL = 3
"""Timeouts in one run, answers between them or not, after which it stops the same way: a Core
that trickles one route's answers costs each test that reads it the whole deadline, and the
first timeout already made the verdict an error."""


class InFlight(httpx.BaseTransport):
    """Holds each request to the bound of requests in flight of the fan-out it was sent from
    (:func:`conformance.common.fanout.in_flight`), from its first byte to its whole answer."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with fanout.in_flight():
            return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


class TargetUnresponsive(HarnessError):
    """The target let several requests in a row time out: the suite can judge nothing more."""


class Watchdog(httpx.BaseTransport):
    """Wraps a transport and counts transport timeouts, in a row (any answer resets that count)
    and in all.

    Once ``limit`` requests in a row, or ``in_all`` in the run, have timed out it trips: that
    request and every later one raise :class:`TargetUnresponsive` at once, with one line saying
    what happened."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        timeout_seconds: float,
        limit: int = TIMEOUTS_IN_A_ROW,
        in_all: int = TIMEOUTS_IN_ALL,
    ) -> None:
        self._inner = inner
        self._timeout = timeout_seconds
        self._limit = limit
        self._in_all_limit = in_all
        self._lock = threading.Lock()
        self._in_a_row = 0
        self._in_all = 0
        self._first: str | None = None  # the first request of the streak: where a hang began
        self._first_ever: str | None = None
        self.tripped: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.tripped is not None:
            raise TargetUnresponsive(self.tripped)
        try:
            response = self._inner.handle_request(request)
        except httpx.TimeoutException as exc:
            with self._lock:
                tripped = self._count(request, exc)
            if tripped is not None:
                raise TargetUnresponsive(tripped) from None
            raise
        with self._lock:
            self._in_a_row, self._first = 0, None
        return response

    def _count(self, request: httpx.Request, exc: Exception) -> str | None:
        """One more timeout; the line that stops the run once a limit is reached (held by ``tripped``)."""
        this = f"{request.method} {scrub(request.url.path)}"
        self._in_a_row += 1
        self._in_all += 1
        self._first = self._first or this
        self._first_ever = self._first_ever or this
        if self.tripped is None and self._in_a_row >= self._limit:
            self.tripped = (
                f"the target did not answer {self._in_a_row} requests in a row within {self._timeout:g} s "
                f"(first: {self._first}; last: {this}, {type(exc).__name__}); the run stopped. The seeds set no "
                "time bound, so this names no rule: the Core hung on the first of them, or the network to it is down"
            )
        elif self.tripped is None and self._in_all >= self._in_all_limit:
            self.tripped = (
                f"the target let {self._in_all} requests of this run go unanswered within {self._timeout:g} s each "
                f"(first: {self._first_ever}; last: {this}, {type(exc).__name__}); the run stopped. The seeds set "
                "no time bound, so this names no rule: the Core hangs or trickles some answers, or the network to it "
                "is failing"
            )
        return self.tripped

    def close(self) -> None:
        self._inner.close()


@dataclass
class Exchange:
    method: str
    path: str
    request_body: str
    status: int
    response_body: str
    headers: dict[str, str] = field(default_factory=dict)
    identity: str | None = None  # whose credential it carried (see Identities); None: it carried none
    operation: str = "other"  # capabilities | turn | search | read | other
    judged: int = 0  # the order in which checks last read this response (0: none did); see judged()

    def curl(self, base_url: str, auth_header: str = "Authorization", auth_scheme: str = "Bearer") -> str:
        """A reproduction naming its identity: the credential is read from ``$CORE_TOKEN_<IDENTITY>``
        (never written out), in the target's own auth header; a request sent without one has none."""
        data = (
            f" -H 'Content-Type: application/json' --data-binary @- <<'JSON'\n{self.request_body}\nJSON"
            if self.request_body
            else ""
        )
        if self.identity is None:
            who, credential = "# identity: none (sent without a credential)", ""
        else:
            note = " (a credential no identity of the run holds)" if self.identity == UNREGISTERED else ""
            who = f"# identity: {self.identity}{note}"
            credential = f' -H "{auth_header}: {f"{auth_scheme} ${token_variable(self.identity)}".strip()}"'
        return f"{who}\ncurl -sS -X {self.method} '{base_url.rstrip('/')}{self.path}'{credential}{data}"

    def evidence(self, base_url: str, auth: Mapping[str, str], *, judged: bool = False) -> dict[str, Any]:
        """The exchange as results.json keeps it, with its curl line."""
        kept = {k: v for k, v in asdict(self).items() if k != "judged"}
        return {**kept, "judged": judged, "curl": self.curl(base_url, auth["header"], auth["scheme"])}


SHORTEN_READS = BODY_KEEP * 4
"""How much of a body an exchange keeps: what :func:`_shorten` reads to show ``BODY_KEEP`` characters."""


@dataclass(slots=True)
class Recorded:
    """An exchange as sent and answered, scrubbed into its :class:`Exchange` only when a report
    asks for it: a run records every request and reports a handful, and scrubbing each as it came
    was some 3 % of a run's CPU. Scrubbing late also masks every secret known by then. Bodies are
    kept only as far as :func:`_shorten` reads them, with their whole sizes."""

    # What may hold a secret unscrubbed stays out of repr (a traceback's locals show it).
    method: str
    raw_path: bytes = field(repr=False)
    request: bytes = field(repr=False)
    request_size: int
    status: int
    response: bytes = field(repr=False)
    response_size: int
    headers: tuple[tuple[str, str], ...] = field(repr=False)  # the credential's already redacted, see Recorder
    identity: str | None
    operation: str
    judged: int = 0  # see judged()
    _exchange: Exchange | None = field(default=None, repr=False)

    @property
    def exchange(self) -> Exchange:
        if self._exchange is None:
            scrub = SECRETS.text  # a Core may echo a token anywhere: bodies, paths, headers
            self._exchange = Exchange(
                method=self.method,
                path=scrub(self.raw_path.decode("ascii", "replace")),
                request_body=_shorten(self.request, self.request_size),
                status=self.status,
                response_body=_shorten(self.response, self.response_size),
                headers={k: v if v == REDACTED else scrub(v) for k, v in self.headers},
                identity=self.identity,
                operation=self.operation,
            )
        return self._exchange

    @property
    def path(self) -> str:
        return self.exchange.path

    def evidence(self, base_url: str, auth: Mapping[str, str], *, judged: bool = False) -> dict[str, Any]:
        return self.exchange.evidence(base_url, auth, judged=judged)


JUDGED = "kc_exchange"
"""The key under which a recorded response's extensions hold its :class:`Recorded`."""
_judgements = itertools.count(1)


def judged(response: object) -> None:
    """A check is reading ``response``: if a failure follows, the report shows this exchange."""
    extensions = getattr(response, "extensions", None)
    exchange = extensions.get(JUDGED) if isinstance(extensions, dict) else None
    if isinstance(exchange, Recorded):
        exchange.judged = next(_judgements)


def _shorten(raw: bytes, size: int) -> str:
    """A body for a report: cut on a character boundary, with the size it had (``size``: the
    whole body's, of which ``raw`` is the start)."""
    head = raw[:SHORTEN_READS].decode("utf-8", "replace")
    if size > BODY_KEEP:
        return clip(head, BODY_KEEP) + f"… ({size} bytes in all)"  # scrubbed before the cut
    text = scrub(head)
    if len(text.encode("utf-8")) == size:
        return text
    return text[:BODY_KEEP] + f"… ({size} bytes in all)"


def auth_headers(auth: Mapping[str, Any], token: str | None) -> dict[str, str]:
    """The credential header of a request to the Core: ``auth`` is the wire's ``[auth]`` table
    (its header and scheme), no header without a token."""
    if token is None:
        return {}
    return {str(auth["header"]): f"{auth['scheme']} {token}".strip()}


RATE_LIMITED_TRIES = 8
"""How often one request is sent while the Core answers 429 (Too Many Requests)."""
RETRY_AFTER_LONGEST = 10.0
"""The longest pause one 429 buys before its jitter, whatever its Retry-After says (a hostile Core
may ask for a day); with the jitter at most half as long again."""
RATE_LIMITED_BUDGET = 120.0
"""Seconds one process of a run spends on 429s in all (their answers and the pauses after them);
past them a 429 leaves its check not verified at once."""


def retry_after(value: str | None, attempt: int) -> float:
    """The pause a 429 asks for: its Retry-After in whole seconds, else (absent, a date, junk)
    half a second doubled per attempt; never longer than :data:`RETRY_AFTER_LONGEST`."""
    text = (value or "").strip()
    asked = float(text) if text.isascii() and text.isdigit() and len(text) <= 9 else 0.5 * 2**attempt
    return min(asked, RETRY_AFTER_LONGEST)


class RateLimited(NotVerified, unittest.SkipTest):
    """The Core kept answering 429: the seeds name no rate limit, so that fails no rule, and the
    check that needed the answer is not verified (the run is incomplete, never non-conformant).

    A ``SkipTest`` too, one of the exceptions Hypothesis lets through at once: raised as a plain
    error inside a generated test, Hypothesis would shrink and replay it, and a replay the Core
    no longer refuses ends in its "flaky" error, a harness error of a conformant Core."""


class RateLimiter:
    """At most ``rate`` requests a second (0: no limit), shared by threads: each request takes
    the next slot under a lock, and waiting in order keeps the rate. A 429 from the Core pauses
    every request of the process (:meth:`refused`): the Core's own limit is kept too."""

    def __init__(
        self,
        rate: float = 0.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] | None = None,
        budget: float = RATE_LIMITED_BUDGET,
    ) -> None:
        self._min_gap = 1.0 / rate if rate > 0 else 0.0
        self._last = 0.0
        self._not_before = 0.0
        self.clock, self._sleep, self._budget = clock, sleep, budget
        self._jitter = jitter or random.Random().random  # its own: no other code's draws change it
        self._lock = threading.Lock()
        self._spent = 0.0
        self.refusals = 0  # 429s answered: each a request no response hook saw
        self.paused = 0.0  # seconds this process's requests were held for them (overlapping pauses once)

    def wait(self) -> None:
        if not self._min_gap and not self._not_before:
            return  # every request of an unlimited run, until the Core's first 429
        with self._lock:
            slot = max(self._last + self._min_gap, self.clock(), self._not_before)
            if self._min_gap:
                self._last = slot
        wait = slot - self.clock()
        if wait > 0:
            self._sleep(wait)

    def refused(self, retry_after_header: str | None, attempt: int, took: float, *, again: bool = True) -> bool:
        """Counts a 429 whose exchange took ``took`` seconds. True: every request of the process
        waits out the pause it asked for (jittered, so that the run's processes, which share the
        Core's limit, do not all come back at once), then it is sent again. False when it is not to
        be (``again``) or the run's time for 429s is spent."""
        pause = retry_after(retry_after_header, attempt) * (1 + self._jitter() / 2)
        with self._lock:
            self.refusals += 1
            self._spent += took
            if not again or self._spent + pause > self._budget:
                return False
            self._spent += pause
            now = self.clock()
            until = max(self._not_before, now + pause)
            self.paused += until - max(self._not_before, now)
            self._not_before = until
        return True


def sent_while_refused(send: Callable[[], httpx.Response], limiter: RateLimiter) -> tuple[httpx.Response, int]:
    """``send`` again after each 429's pause (:meth:`RateLimiter.refused`) while tries and the
    run's time for 429s last: the first other answer, or the last 429, and how often it was sent.
    The first send is the caller's to pace; each one after it waits its slot here."""
    for attempt in range(RATE_LIMITED_TRIES):
        if attempt:
            limiter.wait()
        started = limiter.clock()
        response = send()
        if response.status_code != 429:
            break
        again = attempt + 1 < RATE_LIMITED_TRIES
        if not limiter.refused(response.headers.get("retry-after"), attempt, limiter.clock() - started, again=again):
            break
        response.close()
    return response, attempt + 1


class Backoff(httpx.BaseTransport):
    """A 429 (Too Many Requests) is the Core's rate limit, not its answer to what was asked
    (the seeds name no rate limit, so a conformant Core may have one): the request is sent
    again once the pause it asked for is over, at most :data:`RATE_LIMITED_TRIES` times in all,
    every other request of the process waiting too. Outside the bound of requests in flight,
    so a pause holds no slot. Past the tries or the run's time for 429s, :class:`RateLimited`:
    the check is not verified, as no rule was broken."""

    def __init__(self, inner: httpx.BaseTransport, limiter: RateLimiter) -> None:
        self._inner, self._limiter = inner, limiter

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response, tries = sent_while_refused(lambda: self._inner.handle_request(request), self._limiter)
        if response.status_code != 429:
            return response
        response.close()
        raise RateLimited(
            f"the target answered {request.method} {scrub(request.url.path)} with 429 (Too Many Requests) "
            f"{tries} time(s) in a row{'' if tries == RATE_LIMITED_TRIES else ', and the run had spent its time for 429s'}; "
            "the seeds name no rate limit, so this fails no rule: a lower --concurrency or a --rate-limit "
            "below the Core's lets a run verify it"
        )

    def close(self) -> None:
        self._inner.close()


class Recorder:
    """Counts requests (the per-run figure) and keeps the current test's exchanges."""

    def __init__(
        self,
        rate_limit: float = 0.0,
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        paths: Mapping[str, str] | None = None,
    ) -> None:
        self.count = 0
        self.auth_header = auth_header.lower()
        self.auth_scheme = auth_scheme
        self.paths: Mapping[str, str] = paths or {}
        self.current: list[Recorded] = []
        self.limiter = RateLimiter(rate_limit)
        self._lock = threading.Lock()  # a test may send its independent requests from several threads

    @property
    def requests(self) -> int:
        """Every request this process sent to the target: those answered, and the 429s re-sent."""
        return self.count + self.limiter.refusals

    def throttle(self) -> None:
        self.limiter.wait()

    def record(self, response: httpx.Response) -> None:
        with self._lock:
            self.count += 1
        request = response.request
        if request.extensions.get("kc_control"):
            return  # control exchanges carry credentials and minted tokens: never kept for reports
        if aside.active():
            return  # no running test's exchange (see conformance.common.aside)
        kept = self._credential_and_type(request.headers)
        recorded = Recorded(
            request.method,
            request.url.raw_path,
            request.content[:SHORTEN_READS],
            len(request.content),
            response.status_code,
            response.content[:SHORTEN_READS],
            len(response.content),
            kept,
            self._identity(request.headers.get(self.auth_header)),
            operation_of(request.url.raw_path.decode("ascii", "replace"), self.paths),
        )
        response.extensions[JUDGED] = recorded
        self.current.append(recorded)

    def _credential_and_type(self, headers: httpx.Headers) -> tuple[tuple[str, str], ...]:
        """The headers a report shows: the credential's, redacted under its usual name whatever
        the target calls it, and the content type."""
        return tuple(
            ("authorization", REDACTED) if k.lower() == self.auth_header else (k.lower(), v)
            for k, v in headers.items()
            if k.lower() in (self.auth_header, "content-type")
        )

    def _identity(self, header: str | None) -> str | None:
        if header is None:
            return None
        scheme = f"{self.auth_scheme} " if self.auth_scheme else ""
        token = header[len(scheme) :] if header.startswith(scheme) else header
        return IDENTITIES.of(token.strip()) or UNREGISTERED

    def evidence(
        self, base_url: str, auth: Mapping[str, str], via: str | None, *, keep: int = 4
    ) -> list[dict[str, Any]]:
        """A failure's exchanges: the test's last ``keep``, and the one its failing check judged
        (marked ``judged``; kept even when older than those), see :func:`judged_exchange`."""
        chosen = judged_exchange(self.current, via)
        kept = self.current[-keep:]
        if chosen is not None and not any(e is chosen for e in kept):
            kept = [chosen, *kept[1:]]
        return [e.evidence(base_url, auth, judged=e is chosen) for e in kept]


HTTP_OPERATIONS = frozenset(OPERATIONS.values())


def judged_exchange(exchanges: Sequence[Recorded], via: str | None) -> Recorded | None:
    """The request the failing check judged: among the test's exchanges of the operation that
    shows the violated rule (its catalogue ``observe.via``; any operation when it names none of
    the Core's), the one a check read last, else the last one. A rule shown on the MCP path or
    by the tool was judged on an MCP answer, not on a recorded HTTP exchange: none is chosen."""
    if via in ("mcp", "tool"):
        return None
    mine = exchanges
    if via in HTTP_OPERATIONS:
        mine = [e for e in exchanges if e.operation == via] or exchanges
    if not mine:
        return None
    read = [e for e in mine if e.judged]
    return max(read, key=lambda e: e.judged) if read else mine[-1]
