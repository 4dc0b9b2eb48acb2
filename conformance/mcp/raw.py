"""Bare streamable-HTTP JSON-RPC posts, for probes an SDK client never sends (a foreign
``Origin``, one session's ``Mcp-Session-Id`` on another route's URL or with another credential).
The answer is read up to a cap and within the call's deadline, like every answer of a target."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from conformance.common.transport import verifying_tls
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


def post(
    url: str, message: dict[str, Any], timeout: float, *, token: str = "", session_id: str | None = None, **headers: str
) -> Posted:
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json", **headers}
    if token:
        sent["authorization"] = f"Bearer {token}"
    if session_id is not None:
        sent[SESSION_HEADER] = session_id
        sent["mcp-protocol-version"] = PROTOCOL
    with (
        httpx.Client(timeout=timeout, verify=verifying_tls()) as client,
        client.stream("POST", url, json=message, headers=sent) as response,
    ):
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MESSAGE_CAP:
                break
        kind = response.headers.get("content-type", "")
        return Posted(
            response.status_code, response.headers.get(SESSION_HEADER), _answer(body, kind, message.get("id"))
        )


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
        url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}, timeout, token=token, **headers
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
