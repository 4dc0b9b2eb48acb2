"""What an MCP server can make the suite read, bounded: a cap on every message (a stdio line, an
HTTP body after decompression, an SSE event), a deadline on every HTTP exchange, and a verdict
on every message that is not one JSON-RPC answer to what was asked.

The SDK reads a stdio line or an HTTP body whole, however long, and drops an answer to an id it
did not ask (its caller then waits out the timeout); a broken read inside its task group ends
as an ``ExceptionGroup``. So the suite reads both transports through this module instead: a
server's fault is noted in the session's :class:`Faults` (the session turns it into the rule it
breaks) and the waiting request is answered at once with a stand-in JSON-RPC error, so no read
is unbounded and nothing raises inside the SDK's tasks.
"""

from __future__ import annotations

import json
import signal
import subprocess
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from conformance.common.groups import signal_group
from conformance.common.untrusted import shown
from conformance.mcp.records import MESSAGE_CAP

STDERR_KEEP = 2000  # the end of a stdio server's stderr kept for a message
EXIT_GRACE = 2.0  # how long a stdio server gets to exit after its stdin closes, then after SIGTERM
ENCODINGS = "gzip, deflate"  # the content codings asked for, decoded here under the cap


def size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"


def over_cap(limit: int) -> str:
    return f"a message over the {size(limit)} cap on one MCP message (more than {limit} bytes)"


@dataclass(frozen=True)
class Fault:
    """What went wrong reading a server: ``malformed`` (the server broke JSON-RPC or MCP's framing),
    ``timeout`` (no whole answer in time) or ``unreachable`` (the network, not an answer)."""

    kind: str
    reason: str


class Faults:
    """The first fault noted since the session last took it, and the end of a stdio server's stderr."""

    def __init__(self) -> None:
        self._first: Fault | None = None
        self.stderr = b""

    def note(self, kind: str, reason: str) -> None:
        if self._first is None:
            self._first = Fault(kind, reason)

    def take(self) -> Fault | None:
        first, self._first = self._first, None
        return first

    def stderr_tail(self) -> str:
        return shown(self.stderr.decode("utf-8", "replace").strip(), 300)


class Malformed(Exception):
    """A message that is not one JSON-RPC message; ``reason`` says why, on one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_message(raw: bytes) -> types.JSONRPCMessage:
    """One JSON-RPC message, or :class:`Malformed` naming what it is instead."""
    if raw.lstrip()[:1] == b"[":
        raise Malformed("a JSON-RPC batch (an array) where one message belongs")
    try:
        return types.jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValidationError as exc:
        raise Malformed(_why(exc, raw)) from None


def _why(exc: ValidationError, raw: bytes) -> str:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        head = shown(repr(raw[:40].decode("utf-8", "replace")))
        if "recursion" in first["msg"]:
            return f"JSON nested too deeply ({first['msg']})"
        return f"not JSON ({first['msg']}; it starts {head})"
    where = ".".join(str(part) for part in first["loc"])
    return f"not a JSON-RPC message ({where}: {first['msg']})"


def answer_fault(message: types.JSONRPCMessage, asked: object) -> str | None:
    """Why ``message`` is not the answer to the request ``asked``, or None."""
    if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
        return f"a {type(message).__name__.removeprefix('JSONRPC').lower()} where the answer to id {asked!r} belongs"
    if str(message.id) != str(asked):
        return f"an answer to id {message.id!r}, which was not asked (the request was id {asked!r})"
    return None


def stand_in(request_id: types.RequestId, reason: str) -> types.JSONRPCError:
    """The error that answers a request whose real answer could not be read (its fault is noted)."""
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=types.PARSE_ERROR, message=reason)
    )


# ----------------------------------------------------------------- streamable HTTP


class BoundedClient(httpx2.AsyncClient):
    """An HTTP client for the SDK's streamable-HTTP transport whose every exchange has a deadline
    (connect, headers and a JSON body together) and whose bodies are read under the cap, decoded
    here (never by an unbounded decoder). A JSON answer to a request must be that request's one
    answer. Event streams are left to the SDK, which caps each event. A fault is noted and the
    request answered with a stand-in error, so the SDK's tasks never raise."""

    def __init__(self, faults: Faults, deadline: float, cap: int = MESSAGE_CAP, **kwargs: Any) -> None:
        headers = {"Accept-Encoding": ENCODINGS, **dict(kwargs.pop("headers", None) or {})}
        super().__init__(headers=headers, **kwargs)
        self.faults, self.deadline, self.cap = faults, deadline, cap

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        asked, body = _request_id(request), b""
        try:
            with anyio.fail_after(self.deadline):
                response = await super().send(request, **{**kwargs, "stream": True})
                if _content_type(response) != "text/event-stream":
                    body = await _read_bounded(response, self.cap)
        except TimeoutError:
            return self._failed(request, asked, "timeout", f"no answer within {self.deadline:g} s")
        except Malformed as exc:
            return self._failed(request, asked, "malformed", exc.reason)
        except httpx2.TransportError as exc:
            return self._failed(request, asked, "unreachable", f"{type(exc).__name__}: {exc}".rstrip(": "))
        if asked is not None and response.is_success and _content_type(response) == "application/json":
            self._judge(response, asked, body)
        return response

    def _judge(self, response: httpx2.Response, asked: types.RequestId, body: bytes) -> None:
        """A JSON answer to a request: one JSON-RPC message, the answer to that request."""
        try:
            reason = answer_fault(read_message(body), asked)
        except Malformed as exc:
            reason = exc.reason
        if reason is not None:
            self.faults.note("malformed", reason)
            _replace_body(response, stand_in(asked, reason).model_dump_json(by_alias=True).encode())

    def _failed(
        self, request: httpx2.Request, asked: types.RequestId | None, kind: str, reason: str
    ) -> httpx2.Response:
        self.faults.note(kind, reason)
        if asked is None:  # a notification (or the SDK's own GET or DELETE): nothing waits for an answer
            return httpx2.Response(202, request=request)
        body = stand_in(asked, reason).model_dump_json(by_alias=True).encode()
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body, request=request)


def _request_id(request: httpx2.Request) -> types.RequestId | None:
    """The JSON-RPC id of the request a POST carries (None for a notification or another method)."""
    if request.method != "POST":
        return None
    try:
        sent = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    found = sent.get("id") if isinstance(sent, dict) and "method" in sent else None
    return found if isinstance(found, str | int) else None


def _content_type(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


async def _read_bounded(response: httpx2.Response, cap: int) -> bytes:
    """Read the body whole, decoded, at most ``cap`` bytes; the response then holds it undecoded
    (its content coding is removed), so the SDK reads exactly what was checked here."""
    decode = _decoder(response.headers.get("content-encoding", ""))
    body = bytearray()
    try:
        async for chunk in response.aiter_raw():
            body += decode(chunk, cap + 1 - len(body))
            if len(body) > cap:
                raise Malformed(over_cap(cap))
    finally:
        await response.aclose()
    _replace_body(response, bytes(body))
    return bytes(body)


def _replace_body(response: httpx2.Response, body: bytes) -> None:
    for name in ("content-encoding", "content-length", "transfer-encoding"):
        response.headers.pop(name, None)
    response.headers["content-length"] = str(len(body))
    response.stream = httpx2.ByteStream(body)
    response.is_stream_consumed = response.is_closed = False
    response.__dict__.pop("_content", None)


def _decoder(coding: str) -> Callable[[bytes, int], bytes]:
    """A decoder of one content coding that refuses to produce more than it is given room for."""
    coding = coding.strip().lower()
    if coding in ("", "identity"):
        return lambda chunk, _room: chunk
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise Malformed(f"a body in content coding {shown(coding, 40)!r}, which was not asked for ({ENCODINGS})")
    inflate = zlib.decompressobj(wbits=47)  # gzip or zlib framing, told apart by the header

    def decode(chunk: bytes, room: int) -> bytes:
        """At most ``room`` bytes: the caller gives one more than the cap leaves, so a body that
        fills it is over the cap, and the input left undecoded is never decoded."""
        try:
            return inflate.decompress(chunk, max(room, 1))
        except zlib.error as exc:
            raise Malformed(f"a {coding} body that does not decode ({exc})") from None

    return decode


# ----------------------------------------------------------------- stdio

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@asynccontextmanager
async def stdio_streams(
    argv: tuple[str, ...], env: Mapping[str, str], faults: Faults, cap: int = MESSAGE_CAP
) -> AsyncIterator[Streams]:
    """The SDK's stdio transport, bounded: the server runs in a process group of its own (ended as a
    whole when the session ends), each line it prints is read under ``cap``, an answer to an id
    not asked is a fault, and its stderr is kept (its end only) instead of reaching the console."""
    process = await anyio.open_process(
        list(argv), env={**get_default_environment(), **env}, stderr=subprocess.PIPE, start_new_session=True
    )
    inbox, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, outbox = anyio.create_memory_object_stream[SessionMessage](0)
    asked: dict[str, types.RequestId] = {}
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_read_stdout, process, inbox, asked, faults, cap)
        tasks.start_soon(_write_stdin, process, outbox, inbox, asked)
        tasks.start_soon(_keep_stderr, process, faults)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await end_group(process)
            tasks.cancel_scope.cancel()


async def _lines(stream: ByteReceiveStream, cap: int) -> AsyncIterator[bytes | None]:
    """Each line of ``stream`` (None for one longer than ``cap``, whose rest is skipped unread)."""
    line, skipping = bytearray(), False
    async for chunk in stream:
        while chunk:
            end = chunk.find(b"\n")
            part, chunk = (chunk, b"") if end < 0 else (chunk[:end], chunk[end + 1 :])
            if not skipping:
                line += part
                if len(line) > cap:
                    line.clear()
                    skipping = True
                    yield None
            if end >= 0:
                if not skipping:
                    yield bytes(line)
                line.clear()
                skipping = False


async def _read_stdout(
    process: Process,
    inbox: MemoryObjectSendStream[SessionMessage | Exception],
    asked: dict[str, types.RequestId],
    faults: Faults,
    cap: int,
) -> None:
    assert process.stdout is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with inbox:
            async for line in _lines(process.stdout, cap):
                if line is not None and not line.strip():
                    continue
                try:
                    message = _message(line, asked, cap)
                except Malformed as exc:
                    await _fail_asked(inbox, asked, faults, exc.reason)
                    continue
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    asked.pop(str(message.id), None)
                await inbox.send(SessionMessage(message))
            if asked:
                await _fail_asked(inbox, asked, faults, "closed its output before answering (did it exit?)")


def _message(line: bytes | None, asked: Mapping[str, types.RequestId], cap: int) -> types.JSONRPCMessage:
    if line is None:
        raise Malformed(over_cap(cap))
    message = read_message(line)
    if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and str(message.id) not in asked:
        waiting = ", ".join(repr(i) for i in asked.values()) or "none"
        raise Malformed(f"an answer to id {message.id!r}, which was not asked (waiting for: {waiting})")
    return message


async def _fail_asked(
    inbox: MemoryObjectSendStream[SessionMessage | Exception],
    asked: dict[str, types.RequestId],
    faults: Faults,
    reason: str,
) -> None:
    """Note the fault and answer every request in flight with a stand-in, so none waits for its timeout."""
    faults.note("malformed", reason)
    waiting = list(asked.values())
    asked.clear()
    for request_id in waiting:
        await inbox.send(SessionMessage(stand_in(request_id, reason)))


async def _write_stdin(
    process: Process,
    outbox: MemoryObjectReceiveStream[SessionMessage],
    inbox: MemoryObjectSendStream[SessionMessage | Exception],
    asked: dict[str, types.RequestId],
) -> None:
    assert process.stdin is not None
    try:
        async with outbox:
            async for item in outbox:
                message = item.message
                if isinstance(message, types.JSONRPCRequest):
                    asked[str(message.id)] = message.id
                await process.stdin.send(message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await inbox.aclose()  # the server stopped reading: the session sees the connection end


async def _keep_stderr(process: Process, faults: Faults) -> None:
    assert process.stderr is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async for chunk in process.stderr:
            faults.stderr = (faults.stderr + chunk)[-STDERR_KEEP:]


async def end_group(process: Process) -> None:
    """Close the server's stdin, give it a moment to exit, then end its whole process group
    (SIGTERM, then SIGKILL): a child it left behind does not outlive the session."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    await _gone(process, EXIT_GRACE, group=False)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not signal_group(process.pid, sig) or await _gone(process, EXIT_GRACE, group=True):
            break
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


async def _gone(process: Process, seconds: float, *, group: bool) -> bool:
    """Whether the process (with ``group``, every process of its group) ended within ``seconds``.
    Polled: waiting on the process also waits for its pipes, which a child may hold open."""
    with anyio.move_on_after(seconds):
        while process.returncode is None or (group and signal_group(process.pid, 0)):
            await anyio.sleep(0.02)
        return True
    return False
