"""Bare streamable-HTTP JSON-RPC posts, for probes an SDK client never sends (a foreign
``Origin``, one session's ``Mcp-Session-Id`` on another route's URL or with another credential).
The answer is read up to a cap and within the call's deadline, like every answer of a target:
the body as sent and once decoded (a 1 KB brotli body expanded to 768 MiB in one chunk), and
the whole read (httpx bounds each read only: an event stream, or a header block, that sent a
byte every few seconds held a run for ever). An event stream is read until the message that answers the request."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from conformance.common.transport import StreamedTransport, decode_body
from conformance.mcp.records import MESSAGE_CAP

PROTOCOL = "2025-06-18"
SESSION_HEADER = "mcp-session-id"


@dataclass(frozen=True)
class Posted:
    """What a post got back: the status, the session ID header, and the JSON-RPC message that
    answers the request (from a JSON body or an event stream), if one was read."""

    status: int
    session_id: str | None
    message: dict[str, Any] | None
    html: bool = False  # the answer was a web page (text/html), no MCP endpoint's


def post(
    url: str,
    message: dict[str, Any],
    timeout: float,
    *,
    token: str = "",
    session_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Posted:
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json", **(headers or {})}
    if token:
        sent["authorization"] = f"Bearer {token}"
    if session_id is not None:
        sent[SESSION_HEADER] = session_id
        sent["mcp-protocol-version"] = PROTOCOL
    deadline = clock() + timeout
    with (
        httpx.Client(transport=StreamedTransport(timeout, clock=clock), timeout=timeout) as client,
        client.stream("POST", url, json=message, headers=sent) as response,
    ):
        kind = response.headers.get("content-type", "")
        codings = response.headers.get("content-encoding", "")
        streamed = "event-stream" in kind
        raw, found = b"", None
        for chunk in response.iter_raw():  # as sent: decoded below within the cap
            raw += chunk
            ended = len(raw) > MESSAGE_CAP or clock() > deadline
            if streamed or ended:
                found = _answer(_decoded(raw, codings), kind, message.get("id"))
            if found is not None or ended:
                break
        else:
            found = _answer(_decoded(raw, codings), kind, message.get("id"))
        html = kind.split(";")[0].strip().lower() == "text/html"
        return Posted(response.status_code, response.headers.get(SESSION_HEADER), found, html)


def _decoded(raw: bytes, codings: str) -> bytes:
    """The body with its content codings undone, at most the cap (nothing when it does not decode)."""
    return decode_body(raw, codings, MESSAGE_CAP)[0] if codings else raw


def _answer(body: bytes, kind: str, wanted: Any) -> dict[str, Any] | None:
    """The JSON-RPC message with the request's ``id``: the body itself, or one ``data:`` event."""
    text = body[:MESSAGE_CAP].decode("utf-8", "replace")
    candidates = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    if "event-stream" not in kind:
        candidates = [text]
    for candidate in candidates:
        try:
            found = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(found, dict) and found.get("id") == wanted:
            return found
    return None


def initialize(url: str, timeout: float, *, token: str = "", **headers: str) -> Posted:
    """An ``initialize`` request (with extra headers: ``Origin``, ``Host``)."""
    params = {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "knowledge-conformance", "version": "1"},
    }
    return post(
        url,
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
        timeout,
        token=token,
        headers=headers,
    )


def opened(url: str, token: str, timeout: float) -> str | None:
    """A session initialized (and its ``initialized`` notification sent): its ID, or None when the
    server keeps none (stateless) or refused."""
    answer = initialize(url, timeout, token=token)
    if not 200 <= answer.status < 300 or answer.session_id is None:
        return None
    post(
        url,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        timeout,
        token=token,
        session_id=answer.session_id,
    )
    return answer.session_id


def tool_call(url: str, name: str, arguments: dict[str, Any], timeout: float, *, token: str, session_id: str) -> Posted:
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return post(url, request, timeout, token=token, session_id=session_id)


def succeeded(answer: Posted) -> bool:
    """A tool result that is not ``isError``, on a 2xx."""
    result = (answer.message or {}).get("result")
    return 200 <= answer.status < 300 and isinstance(result, dict) and result.get("isError") is not True
