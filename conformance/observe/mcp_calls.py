"""MCP tool calls observe sees: JSON-RPC 2.0 over streamable HTTP (a POST to the MCP endpoint,
answered as ``application/json`` or as ``text/event-stream`` with ``data:`` frames).

A ``tools/call`` request (alone or in a batch) is paired with its result by its JSON-RPC id within
the exchange that carried it: a POST's answer carries the answers to the requests it posted, on
the same MCP session (``Mcp-Session-Id``), so the id alone tells them apart there. The Core's
search and read tools' ``structuredContent`` is then judged by :mod:`conformance.mcp.relayed`, the
active suite's own checks, so a deviation gets the same requirement ID as in an active run.

Only what the proxy kept is read (``seen.RESPONSE_KEEP``): an event cut at the cap, or an event
stream's unterminated last event, is left alone, never guessed at.

The references an MCP search issued are remembered (by digest, with when the proxy saw the answer)
apart from the HTTP ones: an MCP read of one more than 300 s later that succeeds breaks REF-001, as
an HTTP read does. Their run and binding are the MCP server's own (never on the wire), so no
binding rule is judged from them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from conformance.common import contract as C
from conformance.common.rules import Rule
from conformance.mcp import relayed
from conformance.mcp import rules as mcp
from conformance.mcp.results import READ, SEARCH
from conformance.observe.context import Context
from conformance.observe.observed import json_of
from conformance.observe.seen import Seen, digest
from conformance.server import rules as server

TRANSPORT = "streamable HTTP"
JUDGED_TOOLS = (SEARCH, READ)
BATCH_MAX = 64
"""Messages of one JSON-RPC batch read at most (a client sends one call a request, or a few)."""


@dataclass(frozen=True)
class Call:
    """One ``tools/call`` request: its id (as JSON, so 1 and "1" stay apart), tool and arguments."""

    key: str
    tool: str
    arguments: dict[str, Any]


def _key(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return json.dumps(value)


def _messages(parsed: Any) -> list[Any]:
    return parsed[:BATCH_MAX] if isinstance(parsed, list) else [parsed]


def calls(seen: Seen) -> list[Call]:
    """The ``tools/call`` requests a POST carried (none when its body is no JSON-RPC, or was cut)."""
    if seen.method != "POST" or not seen.request.complete or seen.request.broken is not None:
        return []
    found = []
    for message in _messages(json_of(seen.request.data)):
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "tools/call":
            continue
        params, key = message.get("params"), _key(message.get("id"))
        if not isinstance(params, dict) or key is None or not isinstance(params.get("name"), str):
            continue
        arguments = params.get("arguments")
        found.append(Call(key, params["name"], arguments if isinstance(arguments, dict) else {}))
    return found


def sse_data(data: bytes) -> Iterator[bytes]:
    """The data of each whole event of an event stream (its ``data:`` lines joined by newlines);
    the last, unterminated piece (an event cut at the cap, or one the stream ended in) is left out."""
    text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    for event in text.split(b"\n\n")[:-1]:
        lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
        if lines:
            yield b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)


def answers(seen: Seen) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of the answer: one JSON body (or a batch), or an event stream's events."""
    body = seen.response
    if body.broken is not None or not body.data:
        return
    kind = (seen.header("content-type") or "").lower()
    stream = "text/event-stream" in kind or (not kind and body.data.lstrip()[:1] in (b"e", b"d", b"i", b":"))
    if stream:
        for data in sse_data(body.data):
            yield from (m for m in _messages(json_of(data)) if isinstance(m, dict))
    elif body.complete:
        yield from (m for m in _messages(json_of(body.data)) if isinstance(m, dict))


def answered(seen: Seen) -> list[tuple[Call, dict[str, Any]]] | None:
    """Each call of the POST with the result the answer gave it; None when the POST made no tool call."""
    asked = {c.key: c for c in calls(seen)}
    if not asked:
        return None
    found = []
    for message in answers(seen):
        call = asked.pop(_key(message.get("id")) or "", None)
        if call is not None and isinstance(message.get("result"), dict):
            found.append((call, message["result"]))
    return found


def page_bound(arguments: dict[str, Any]) -> tuple[int | None, Rule]:
    """The bound a relayed page keeps: the asked ``max_bytes`` (clamped into 4096..32768, as the
    Core clamps it), else the Core's default; the MCP path's rule (MCP-011), as the active suite
    names a relayed page over it."""
    asked = arguments.get("max_bytes")
    if not isinstance(asked, int) or isinstance(asked, bool):
        return None, mcp.MCP_011
    return min(max(asked, C.READ_MIN_MAX_BYTES), C.READ_MAX_MAX_BYTES), mcp.MCP_011


def judge(ctx: Context, seen: Seen, call: Call, result: dict[str, Any]) -> None:
    """A search or read result: its ``structuredContent`` by the Core's rules as relayed (a success),
    and a read's reference against when an MCP search issued it (REF-001)."""
    structured = result.get("structuredContent")
    failed = result.get("isError") is True
    if call.tool == READ:
        expiry(ctx, seen, call, failed)
    if call.tool not in JUDGED_TOOLS or failed or not isinstance(structured, dict):
        return
    if call.tool == SEARCH:
        relayed.search(structured, TRANSPORT, call.tool)
        hints = structured.get("hints")
        for hint in hints if isinstance(hints, list) else []:
            if isinstance(hint, dict) and isinstance(hint.get("ref"), str):
                ctx.traffic.mcp_refs.put(digest(hint["ref"]), seen.answered)
        return
    ref = call.arguments.get("ref")
    if isinstance(ref, str):
        limit, bound = page_bound(call.arguments)
        relayed.page(structured, TRANSPORT, call.tool, ref=ref, max_bytes=limit, bound=bound)


def expiry(ctx: Context, seen: Seen, call: Call, failed: bool) -> None:
    """A reference an MCP search issued, read more than 300 s after (with the judge's margin), is
    refused (REF-001); one read within that time is not judged here (the MCP server may refuse it
    for its own reasons, a run of its own among them)."""
    ref = call.arguments.get("ref")
    issued = ctx.traffic.mcp_refs.get(digest(ref)) if isinstance(ref, str) else None
    if issued is None or seen.sent - issued <= ctx.ttl + ctx.tolerance:
        return
    if failed:
        server.REF_001.held()
        return
    with relayed.over_mcp(TRANSPORT, call.tool):
        server.REF_001.fail(f"a reference at least {seen.sent - issued:.1f} s old (issued by an MCP search) was read")
