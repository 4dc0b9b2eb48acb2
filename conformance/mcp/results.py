"""Reading the Agent Session tools' results: what a success, a failure and the two MCP flags
must be (MCP-006, MCP-009, MCP-010), shared by every area of the MCP surface's tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.common.outcomes import NotVerified
from conformance.common.rules import Rule, expect
from conformance.common.secrets import clip
from conformance.mcp import relayed
from conformance.mcp import rules as mcp
from conformance.mcp.endpoints import agent_endpoints, skipped
from conformance.mcp.records import Endpoint, NotServing, ToolResult
from conformance.server.world import Who
from knowledge_schemas import load_registry

if TYPE_CHECKING:
    from conformance.mcp.session import McpSession

SEARCH, READ, TURN = "search_business_knowledge", "read_business_knowledge", "start_business_turn"


@dataclass
class Agent:
    """A warm Agent Session MCP session and what it answered before its first turn."""

    transport: str
    session: McpSession
    fresh: bool
    tools_before: list[Any]
    search_before: ToolResult
    read_before: ToolResult
    turn: ToolResult | None = None
    who: Who | None = None  # the Agent Session the MCP session acts for
    schemas: dict[str, Any] = field(default_factory=dict)
    strict: bool = False  # codes.strict: this project's result schemas too (CHOICES.md)

    def start_turn(self, text: str) -> ToolResult:
        result = self.session.call(TURN, {"user_input": text})
        expect(not result.is_error and result.protocol_error is None, mcp.MCP_004, f"{TURN} failed: {clipped(result)}")
        return result


def clipped(result: ToolResult) -> str:
    """A result on one short line, for a message."""
    if result.protocol_error is not None:
        return result.protocol_error[:300]
    return json.dumps(result.structured if result.has_structured else list(result.texts), ensure_ascii=False)[:300]


def said(result: ToolResult) -> Any:
    """What the result says: its structuredContent, else its JSON text block."""
    return result.structured if result.has_structured else result.text_json()


def refused(result: ToolResult) -> bool:
    """A refusal: ``isError`` or a JSON-RPC error (as MCP itself answers an argument a tool does not declare)."""
    return result.is_error or result.protocol_error is not None


def call(session: McpSession, name: str, arguments: dict[str, Any]) -> ToolResult | str:
    """A tool call's result, or what went wrong when none came back: a protocol error or a
    dropped session is the server crashing where it owes the agent an ``isError`` result."""
    try:
        return session.call(name, arguments)
    except Exception as exc:  # any exception here is the server crashing (a protocol error, a dropped session)
        return f"{type(exc).__name__}: {str(exc)[:200]}"


@contextmanager
def serving(rule: Rule, endpoints: Sequence[Endpoint], timeout: float) -> Iterator[list[McpSession]]:
    """Sessions with the servers under test, started side by side (:func:`connect_all`); one that
    does not answer ``initialize`` fails the rule of its path (MCP-001 for the Agent Session path,
    MCP-002 for the job path)."""
    from conformance.mcp.session import connect_all

    with ExitStack() as stack:
        try:
            opened = stack.enter_context(connect_all(endpoints, timeout))
        except NotServing as exc:
            rule.fail(f"the {'Fixed Client Token' if rule == mcp.MCP_002 else 'Agent Session'} MCP server {exc}")
        yield opened


def flags(result: ToolResult, what: str) -> dict[str, Any]:
    """The result's JSON object, which carries ``dispatch: not_dispatched`` and
    ``business_operation_performed: false`` (MCP-006)."""
    body = said(result)
    expect(
        isinstance(body, dict),
        mcp.MCP_006,
        f"{what}: no JSON object to carry dispatch and business_operation_performed",
    )
    expect(body.get("dispatch") == "not_dispatched", mcp.MCP_006, f"{what}: dispatch is {body.get('dispatch')!r}")
    expect(
        body.get("business_operation_performed") is False,
        mcp.MCP_006,
        f"{what}: business_operation_performed is {body.get('business_operation_performed', '<missing>')!r}",
    )
    return dict(body)


def listed_tool(agent: Agent, name: str) -> Any:
    tools = {t.name: t for t in agent.session.tools()}
    expect(name in tools, mcp.MCP_001, f"the Agent Session MCP path does not list {name}")
    return tools[name]


SEED_MEMBERS = {  # what the seed names of a search and of a read ("hints and a status"; "original ref, revision, content, and next_cursor")
    "mcp-search-result": ("hints", "status"),
    "mcp-read-result": ("ref", "revision", "content", "next_cursor"),
}


def success(agent: Agent, name: str, result: ToolResult, stem: str) -> dict[str, Any]:
    """A success: both flags, structuredContent valid against the declared outputSchema, the members the
    seed names of a search or a read, and a text block with the same JSON. Strict also holds it to this
    project's schema of the result (the HTTP body's shape): the conventions say only "structuredContent"."""
    expect(not result.is_error and result.protocol_error is None, mcp.MCP_001, f"{name} failed: {clipped(result)}")
    if stem == "mcp-search-result" and isinstance(said(result), dict):  # the seed's rules before the tool's schema
        relayed.search(said(result), agent.transport, name)
    body = flags(result, name)
    expect(result.has_structured, mcp.MCP_009, f"{name} succeeded without structuredContent")
    declared = listed_tool(agent, name).output_schema
    expect(isinstance(declared, dict), mcp.MCP_009, f"{name} declares no outputSchema")
    try:
        errors = sorted(_reason(e) for e in Draft202012Validator(declared).iter_errors(result.structured))
    except SchemaError as exc:
        errors = [f"the outputSchema itself is invalid: {exc.message}"]
    expect(
        not errors, mcp.MCP_009, f"{name} structuredContent does not match its outputSchema: {'; '.join(errors[:3])}"
    )
    missing = [
        m for m in SEED_MEMBERS.get(stem, ()) if not isinstance(result.structured, dict) or m not in result.structured
    ]
    expect(not missing, mcp.MCP_009, f"{name} structuredContent lacks {missing}, which the seed names of its result")
    if agent.strict:
        errors = load_registry().errors(stem, result.structured)
        expect(not errors, mcp.MCP_009, f"strict: {name} structuredContent is not a {stem}: {errors[:3]} (CHOICES.md)")
    expect(result.text_json() == result.structured, mcp.MCP_009, f"{name} has no text block carrying the same JSON")
    return body


def _reason(error: Any) -> str:
    """One schema error as where and why, on one short line: jsonschema's message repeats the whole
    instance, which for a page is kilobytes of escaped text."""
    where = "/".join(map(str, error.absolute_path)) or "(the result)"
    return f"at {where}: {error.validator} {clip(repr(error.validator_value), 80)} failed"


def failure(name: str, result: ToolResult, *, reference: bool = False) -> dict[str, Any]:
    """A failure: an ``isError`` result (not a JSON-RPC error) with both flags and the feedback
    object; a reference failure says ``next_action: search_knowledge`` (MCP-010)."""
    expect(
        result.protocol_error is None,
        mcp.MCP_010,
        f"{name} answered a failing call with a JSON-RPC error, not an isError result with feedback: {clipped(result)}",
    )
    expect(result.is_error, mcp.MCP_010, f"{name} answered a failing call without isError: {clipped(result)}")
    body = flags(result, name)
    feedback = body.get("feedback", body)
    errors = load_registry().errors("feedback", feedback)
    expect(
        not errors, mcp.MCP_010, f"{name} failure carries no feedback object (bailing.agent-feedback.v1): {errors[:3]}"
    )
    if reference:
        expect(
            feedback.get("next_action") == "search_knowledge",
            mcp.MCP_010,
            f"{name} reference failure says next_action {feedback.get('next_action')!r}, expected search_knowledge",
        )
    return dict(feedback)


def hints(result: ToolResult) -> list[dict[str, Any]]:
    """The hints of a search result that carry a reference."""
    body = said(result)
    found = body.get("hints") if isinstance(body, dict) else None
    return [h for h in found or [] if isinstance(h, dict) and isinstance(h.get("ref"), str)]


def hits(agent: Agent, query: str) -> list[dict[str, Any]]:
    """The hints of a search that must succeed."""
    result = agent.session.call(SEARCH, {"query": query})
    success(agent, SEARCH, result, "mcp-search-result")
    return hints(result)


class Transcript(Protocol):
    """What reached the Core on some routes (the control extension's transcript)."""

    def mark(self, *routes: str) -> int: ...

    def since(self, mark: int, *routes: str) -> list[dict[str, Any]]: ...


def turn_mode(
    session: McpSession, who: Who, wire: Transcript | None, injected: dict[str, Any] | None = None
) -> tuple[ToolResult | str, str | None]:
    """A ``start_business_turn`` of ``session`` (acting for ``who``) and its delivery mode, from what
    reached the Core (the transcript, where control offers it: no ``knowledge_delivery`` is the
    Core's default, inline) or else from the turn's result; None when it is refused or neither says."""
    mark = wire.mark(who.route) if wire else 0
    turn = call(session, TURN, {"user_input": "knowledge", **(injected or {})})
    if isinstance(turn, str) or refused(turn):
        return turn, None
    sent = [
        e.get("body")
        for e in (wire.since(mark, who.route) if wire else [])
        if str(e["path"]).endswith("/turns") and e.get("session_id") in (None, who.session or e.get("session_id"))
    ]
    modes = {str(b.get("knowledge_delivery", "inline")) for b in sent if isinstance(b, dict)}
    if len(modes) == 1:
        return turn, modes.pop()
    delivery = (said(turn) or {}).get("knowledge_delivery")
    mode = delivery.get("mode") if isinstance(delivery, dict) else None
    return turn, str(mode) if mode in ("inline", "on_demand") else None


def route_endpoint(
    chosen: str | None, config: TargetConfig, target: Target, who: Who, transports: tuple[str, ...], why: str
) -> Endpoint:
    """The Agent Session MCP server for ``who`` on its own (fresh) route, over the first of
    ``transports`` offered (``chosen``: the ``--mcp-target`` option). Not verified when MCP checks
    are skipped, when the configured server is bound to its own route (no ``{route}`` in its URL or
    command), or when none is offered."""
    if skipped(chosen):
        raise NotVerified("MCP checks skipped: --mcp-target none")
    configured = [chosen] if chosen else [config.mcp.get("url") or "", *(config.mcp.get("command") or [])]
    if any(configured) and not any("{route}" in str(part) for part in configured):
        raise NotVerified(
            f"the configured MCP server acts on its own route; {why} needs one per route "
            "({route} in its URL or command)"
        )
    offered = agent_endpoints(config, target, chosen, str(who.token), who.route)
    endpoint = next((offered[t] for t in transports if t in offered), None)
    if endpoint is None:
        raise NotVerified(f"no Agent Session MCP server over {' or '.join(transports)} for a fresh workspace")
    return endpoint


def ref_of(agent: Agent, token: str) -> str | None:
    """The reference of an MCP search for ``token`` whose page reads as the document that holds it."""
    for hint in hits(agent, token):
        page = agent.session.call(READ, {"ref": hint["ref"]})
        if not page.is_error and token in str((said(page) or {}).get("content", "")):
            return str(hint["ref"])
    return None


McpFor = Callable[[Who, tuple[str, ...], str], Endpoint]
"""The ``mcp_for`` fixture: ``route_endpoint`` with the run's configuration and ``--mcp-target``."""
