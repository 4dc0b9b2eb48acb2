"""Quirks of the MCP surfaces: each a small subclass of the clean Agent Session tools or of
the clean job tools that overrides one behaviour (``agent_class`` / ``job_class`` mix the
named ones in, as ``compose`` does for the Core)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from functools import cache
from typing import Any

import mcp_types as types
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from knowledge_schemas.mcp import AGENT_TOOLS, CHOSEN_ARGUMENTS, DELIVERY_ARGUMENTS, KNOWLEDGE_TOOLS, tool_schema
from simulator.mcp.jobs import JobTools
from simulator.mcp.server import LOOPBACK_HOSTS, LOOPBACK_ORIGINS
from simulator.mcp.tools import AgentTools, Session, ToolError


class McpMissingFlag(AgentTools):
    """Results say dispatch not_dispatched but leave business_operation_performed out."""

    def flags(self) -> dict[str, Any]:
        return {"dispatch": "not_dispatched"}


class McpNoStructuredContent(AgentTools):
    """A success carries only the JSON text block, no structuredContent."""

    def success(self, body: dict[str, Any]) -> types.CallToolResult:
        result = super().success(body)
        return types.CallToolResult(content=result.content)


class McpIdentityArgumentHonoured(AgentTools):
    """The knowledge tools declare and honour run_id and route arguments: a model chooses the run."""

    def input_schema(self, name: str) -> dict[str, Any]:
        schema = super().input_schema(name)
        if name in KNOWLEDGE_TOOLS:
            schema["properties"] = {**schema["properties"], "run_id": {"type": "string"}, "route": {"type": "string"}}
        return schema

    def check_arguments(self, name: str, arguments: dict[str, Any]) -> None:
        super().check_arguments(name, {k: v for k, v in arguments.items() if k not in ("run_id", "route")})

    async def search(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await super().search(self._chosen(session, arguments), str(arguments.pop("run_id", run_id)), arguments)

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await super().read(self._chosen(session, arguments), str(arguments.pop("run_id", run_id)), arguments)

    @staticmethod
    def _chosen(session: Session, arguments: dict[str, Any]) -> Session:
        route = arguments.pop("route", None)
        return Session(session.token, str(route), session.run_id, session.supported) if route else session


class McpHiddenArgumentsHonoured(AgentTools):
    """The input schemas declare no identity argument, yet a call's run_id, route and token are honoured
    (stripped before validation): a model that guesses the names chooses the run, route and identity."""

    def check_arguments(self, name: str, arguments: dict[str, Any]) -> None:
        super().check_arguments(name, {k: v for k, v in arguments.items() if k not in CHOSEN_ARGUMENTS})

    async def search(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        chosen, run_id = self._chosen(session, run_id, arguments)
        return await super().search(chosen, run_id, self._rest(arguments))

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        chosen, run_id = self._chosen(session, run_id, arguments)
        return await super().read(chosen, run_id, self._rest(arguments))

    @staticmethod
    def _rest(arguments: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in arguments.items() if k not in CHOSEN_ARGUMENTS}

    @staticmethod
    def _chosen(session: Session, run_id: str, arguments: dict[str, Any]) -> tuple[Session, str]:
        token = str(arguments.get("token") or session.token)
        route = str(arguments.get("route") or session.route)
        return Session(token, route, session.run_id, session.supported), str(arguments.get("run_id") or run_id)


class McpDeliveryArgumentHonoured(AgentTools):
    """start_business_turn takes knowledge_delivery from the model's arguments (undeclared, stripped
    before validation): a model picks inline or on_demand instead of the trusted host."""

    def check_arguments(self, name: str, arguments: dict[str, Any]) -> None:
        super().check_arguments(name, {k: v for k, v in arguments.items() if k not in DELIVERY_ARGUMENTS})

    async def start_turn(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        chosen = arguments.get("knowledge_delivery") or arguments.get("knowledgeDelivery")
        if chosen not in ("inline", "on_demand"):
            return await super().start_turn(session, arguments)
        supported = session.supported
        session.supported = chosen == "on_demand"  # the model's mode, not what capabilities said
        try:
            return await super().start_turn(session, {"user_input": arguments["user_input"]})
        finally:
            session.supported = supported


class McpReadToolUnlisted(AgentTools):
    """tools/list leaves read_business_knowledge out (it is still callable)."""

    def tools(self) -> list[types.Tool]:
        return [t for t in super().tools() if t.name != "read_business_knowledge"]


class McpToolsAfterFirstTurn(AgentTools):
    """The knowledge tools are listed only once a turn has been started on this server: a session that
    lists its tools first sees no knowledge tools."""

    def tools(self) -> list[types.Tool]:
        listed = super().tools()
        return listed if self.__dict__.get("_turned") else [t for t in listed if t.name not in KNOWLEDGE_TOOLS]

    async def start_turn(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        self.__dict__["_turned"] = True
        return await super().start_turn(session, arguments)


class McpPresenceMeansSupport(AgentTools):
    """In front of a Core that does not speak the knowledge protocol, the knowledge tools answer empty
    successes (an ok search with no hints, an empty complete page): their presence taken as support."""

    async def call(self, session: Session, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name not in KNOWLEDGE_TOOLS or session.supported is not False:
            return await super().call(session, name, arguments)
        if name == "search_business_knowledge":
            return self.success({"status": "ok", "hints": [], "trust": "reference_only"})
        page = {"ref": str(arguments.get("ref", "")), "revision": "0", "content": "", "next_cursor": None}
        return self.success({**page, "truncated": False, "trust": "reference_only"})


class McpOnDemandToOldCore(AgentTools):
    """start_business_turn asks every Core for on_demand delivery, whatever its capabilities say:
    an old Core refuses the unknown field, so no turn can start behind it."""

    async def negotiate(self, session: Session) -> bool:
        await super().negotiate(session)
        return True


class McpOldCore501AsFailure(AgentTools):
    """Capabilities answering 501 is taken for a failure, not for an old Core (only 404 and 405
    are): start_business_turn fails instead of starting a plain turn."""

    legacy_statuses = (404, 405)


class McpReadBeforeTurn(AgentTools):
    """A knowledge call before any turn is accepted: the tool starts a turn of its own."""

    def current_run(self, session: Session) -> str:
        return session.run_id or ""

    async def search(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if not run_id:
            run_id = (await self.start_turn(session, {"user_input": str(arguments.get("query", "knowledge"))}))[
                "run_id"
            ]
        return await super().search(session, run_id, arguments)

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if not run_id:
            run_id = (await self.start_turn(session, {"user_input": "read"}))["run_id"]
        return await super().read(session, run_id, arguments)


class McpSessionPerWorkspace(AgentTools):
    """One MCP session per workspace, not per Agent Session: the first Agent Session on a route lends its
    credential and current run to every later one there (two sessions of one account share a run)."""

    async def call(self, session: Session, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        shared: dict[str | None, Session] = self.__dict__.setdefault("_by_route", {})
        return await super().call(shared.setdefault(session.route, session), name, arguments)


class McpDiffersFromHttp(AgentTools):
    """MCP read pages carry NFC-normalised content: combining sequences differ from the HTTP chain."""

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        page = await super().read(session, run_id, arguments)
        return {**page, "content": unicodedata.normalize("NFC", str(page.get("content", "")))}


class McpScopeChangeNoSearchAgain(AgentTools):
    """The feedback of a changed reference says search_knowledge only for knowledge_revision_changed: a read
    after a scope change (knowledge_scope_changed, or any other knowledge_*changed) gets next_action null."""

    def feedback(self, name: str, err: ToolError) -> dict[str, Any]:
        found = super().feedback(name, err)
        if (
            err.code.startswith("knowledge_")
            and err.code.endswith("changed")
            and err.code != "knowledge_revision_changed"
        ):
            found.update(next_action=None, retryable=False)
        return found


class McpTurnRetryNewIdentity(AgentTools):
    """start_business_turn retries a turn whose response was lost with a new client_turn_id and
    user_message_id: the Core commits a second run, and the tool returns that one, not the committed one."""

    def turn_identity(self, session: Session, attempt: int) -> tuple[str, str]:
        turn_id, message_id = super().turn_identity(session, attempt)
        return (turn_id, message_id) if not attempt else (f"{turn_id}-retry-{attempt}", f"{message_id}-retry-{attempt}")


class McpKnowledgeOnJobPath(JobTools):
    """The Fixed Client Token stdio server also lists search_business_knowledge."""

    def tools(self) -> list[types.Tool]:
        name = "search_business_knowledge"
        from knowledge_schemas.mcp import tool_schema

        extra = types.Tool(
            name=name, description="Search business knowledge.", input_schema=tool_schema(AGENT_TOOLS[name][0])
        )
        return [*super().tools(), extra]


class McpKnowledgeCallableOnJobPath(JobTools):
    """The Fixed Client Token stdio server lists only the job tools, yet serves search_business_knowledge
    when called (an empty ok search: it has no Agent Session behind it)."""

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name != "search_business_knowledge":
            return await super().call(name, arguments)
        body = {"status": "ok", "hints": [], "trust": "reference_only", "dispatch": "not_dispatched"}
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body)


class McpErrorAsJsonRpc(AgentTools):
    """A Core error comes back as a JSON-RPC error, not as an ``isError`` result with its feedback."""

    def failure(self, name: str, err: ToolError) -> types.CallToolResult:
        raise MCPError(-32000, f"{name}: {err}")


class McpIgnoresMaxBytes(AgentTools):
    """The read tool accepts max_bytes and drops it: every page comes at the Core's default size (16384)."""

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await super().read(session, run_id, {k: v for k, v in arguments.items() if k != "max_bytes"})


class McpOwnPageSize(AgentTools):
    """Seed-allowed: the MCP read tool pages at 8192 bytes unless asked otherwise (HTTP's default is
    16384), so its chain of a document has more pages than HTTP's; the content is the same."""

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await super().read(session, run_id, {"max_bytes": 8192, **arguments})


class McpNoRebindingProtection(AgentTools):
    """The streamable-HTTP endpoint without DNS-rebinding protection: any Origin and any Host are served
    (the tools themselves are clean; ``security_for`` gives the app these transport settings)."""

    SECURITY = TransportSecuritySettings(enable_dns_rebinding_protection=False)


class _OriginPrefixes(list[str]):
    """An allow-list that "contains" every origin starting with one of its entries."""

    def __contains__(self, origin: object) -> bool:
        return any(str(origin).startswith(entry) for entry in self)


class McpOriginCheckedByPrefix(AgentTools):
    """The Origin check compares prefixes: an origin that starts with a loopback origin is trusted,
    so ``http://localhost.evil.example``, a domain anyone can register, passes as this machine."""

    SECURITY = TransportSecuritySettings.model_construct(  # as built: validation would copy the list
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(LOOPBACK_HOSTS),
        allowed_origins=_OriginPrefixes(o for o in LOOPBACK_ORIGINS if not o.endswith(":*")),
    )


class McpSearchKnowledgeListed(AgentTools):
    """tools/list names the hidden search_knowledge tool (still callable as before)."""

    def tools(self) -> list[types.Tool]:
        listed = types.Tool(
            name="search_knowledge",
            description="Search or read published Knowledge revisions.",
            input_schema=tool_schema("search-knowledge-input"),
        )
        return [*super().tools(), listed]


class McpSearchKnowledgeTextSummary(AgentTools):
    """A search_knowledge success carries a summary for a human as its text block ("Found 3
    results: ..."), not the JSON; structuredContent still carries the result."""

    async def search_knowledge(self, session: Session, arguments: dict[str, Any]) -> types.CallToolResult:
        result = await super().search_knowledge(session, arguments)
        body = result.structured_content
        if result.is_error or not isinstance(body, dict):
            return result
        if body.get("type") == "knowledge_search":
            hits = [h for h in body.get("results", []) if isinstance(h, dict)]
            lines = [f"Found {len(hits)} results:"]
            lines += [f"{n}. {h.get('title')} ({h.get('knowledge_item_id')})" for n, h in enumerate(hits, 1)]
        else:
            lines = [
                f"{body.get('title')} ({body.get('knowledge_item_id')}, revision {body.get('knowledge_revision_id')}), "
                f"characters {body.get('content_offset')} of {body.get('content_total_chars')}:",
                str(body.get("content", "")),
            ]
        return types.CallToolResult(
            content=[types.TextContent(text="\n".join(lines))], structured_content=body, is_error=result.is_error
        )


AGENT_MINIATURES: dict[str, type[AgentTools]] = {
    "mcp_no_rebinding_protection": McpNoRebindingProtection,
    "mcp_origin_checked_by_prefix": McpOriginCheckedByPrefix,
    "mcp_missing_flag": McpMissingFlag,
    "mcp_no_structured_content": McpNoStructuredContent,
    "mcp_identity_argument_honoured": McpIdentityArgumentHonoured,
    "mcp_hidden_arguments_honoured": McpHiddenArgumentsHonoured,
    "mcp_delivery_argument_honoured": McpDeliveryArgumentHonoured,
    "mcp_read_before_turn": McpReadBeforeTurn,
    "mcp_read_tool_unlisted": McpReadToolUnlisted,
    "mcp_tools_after_first_turn": McpToolsAfterFirstTurn,
    "mcp_presence_means_support": McpPresenceMeansSupport,
    "mcp_on_demand_to_old_core": McpOnDemandToOldCore,
    "mcp_old_core_501_as_failure": McpOldCore501AsFailure,
    "mcp_session_per_workspace": McpSessionPerWorkspace,
    "mcp_differs_from_http": McpDiffersFromHttp,
    "mcp_error_as_jsonrpc": McpErrorAsJsonRpc,
    "mcp_own_page_size": McpOwnPageSize,
    "mcp_ignores_max_bytes": McpIgnoresMaxBytes,
    "mcp_search_knowledge_listed": McpSearchKnowledgeListed,
    "mcp_search_knowledge_text_summary": McpSearchKnowledgeTextSummary,
    "mcp_scope_change_no_search_again": McpScopeChangeNoSearchAgain,
    "mcp_turn_retry_new_identity": McpTurnRetryNewIdentity,
}
JOB_MINIATURES: dict[str, type[JobTools]] = {
    "mcp_knowledge_on_job_path": McpKnowledgeOnJobPath,
    "mcp_knowledge_callable_on_job_path": McpKnowledgeCallableOnJobPath,
}
MINIATURES: dict[str, type[AgentTools] | type[JobTools]] = {**AGENT_MINIATURES, **JOB_MINIATURES}


@cache
def _mix(base: type[Any], parts: tuple[type[Any], ...]) -> type[Any]:
    return base if not parts else type(base.__name__ + "+" + "+".join(p.__name__ for p in parts), (*parts, base), {})


def agent_class(quirks: Iterable[str]) -> type[AgentTools]:
    """The Agent Session tools with the named MCP miniatures mixed in (the clean class when none)."""
    found: type[AgentTools] = _mix(
        AgentTools, tuple(AGENT_MINIATURES[q] for q in sorted(set(quirks)) if q in AGENT_MINIATURES)
    )
    return found


def security_for(quirks: Iterable[str], clean: TransportSecuritySettings) -> TransportSecuritySettings:
    """The streamable-HTTP endpoint's transport security: the clean settings unless a quirk replaces them."""
    found = [
        m.SECURITY for q in sorted(set(quirks)) if isinstance(m := MINIATURES.get(q), type) and hasattr(m, "SECURITY")
    ]
    return found[0] if found else clean


def job_class(quirks: Iterable[str]) -> type[JobTools]:
    found: type[JobTools] = _mix(JobTools, tuple(JOB_MINIATURES[q] for q in sorted(set(quirks)) if q in JOB_MINIATURES))
    return found
