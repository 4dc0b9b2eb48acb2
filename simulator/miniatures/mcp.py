"""Quirks of the MCP surfaces: each a small subclass of the clean Agent Session tools or of
the clean job tools that overrides one behaviour (``agent_class`` / ``job_class`` mix the
named ones in, as ``compose`` does for the Core)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from knowledge_schemas.mcp import AGENT_TOOLS, KNOWLEDGE_TOOLS, tool_schema
from simulator.mcp.jobs import JobTools
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


class McpDiffersFromHttp(AgentTools):
    """MCP read pages carry NFC-normalised content: combining sequences differ from the HTTP chain."""

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        page = await super().read(session, run_id, arguments)
        return {**page, "content": unicodedata.normalize("NFC", str(page.get("content", "")))}


class McpKnowledgeOnJobPath(JobTools):
    """The Fixed Client Token stdio server also lists search_business_knowledge."""

    def tools(self) -> list[types.Tool]:
        name = "search_business_knowledge"
        from knowledge_schemas.mcp import tool_schema

        extra = types.Tool(
            name=name, description="Search business knowledge.", input_schema=tool_schema(AGENT_TOOLS[name][0])
        )
        return [*super().tools(), extra]


class McpErrorAsJsonRpc(AgentTools):
    """A Core error comes back as a JSON-RPC error, not as an ``isError`` result with its feedback."""

    def failure(self, name: str, err: ToolError) -> types.CallToolResult:
        raise MCPError(-32000, f"{name}: {err}")


class McpOwnPageSize(AgentTools):
    """Seed-allowed: the MCP read tool pages at 8192 bytes unless asked otherwise (HTTP's default is
    16384), so its chain of a document has more pages than HTTP's; the content is the same."""

    async def read(self, session: Session, run_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await super().read(session, run_id, {"max_bytes": 8192, **arguments})


class McpSearchKnowledgeListed(AgentTools):
    """tools/list names the hidden search_knowledge tool (still callable as before)."""

    def tools(self) -> list[types.Tool]:
        listed = types.Tool(
            name="search_knowledge",
            description="Search or read published Knowledge revisions.",
            input_schema=tool_schema("search-knowledge-input"),
        )
        return [*super().tools(), listed]


AGENT_MINIATURES: dict[str, type[AgentTools]] = {
    "mcp_missing_flag": McpMissingFlag,
    "mcp_no_structured_content": McpNoStructuredContent,
    "mcp_identity_argument_honoured": McpIdentityArgumentHonoured,
    "mcp_read_before_turn": McpReadBeforeTurn,
    "mcp_differs_from_http": McpDiffersFromHttp,
    "mcp_error_as_jsonrpc": McpErrorAsJsonRpc,
    "mcp_own_page_size": McpOwnPageSize,
    "mcp_search_knowledge_listed": McpSearchKnowledgeListed,
}
JOB_MINIATURES: dict[str, type[JobTools]] = {"mcp_knowledge_on_job_path": McpKnowledgeOnJobPath}
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


def job_class(quirks: Iterable[str]) -> type[JobTools]:
    found: type[JobTools] = _mix(JobTools, tuple(JOB_MINIATURES[q] for q in sorted(set(quirks)) if q in JOB_MINIATURES))
    return found
