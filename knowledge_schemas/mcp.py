"""The MCP surfaces as data: tool names and their self-contained input and output schemas.

Both the simulator (which declares them) and the suite (which checks a server against
them) read the tools from here. MCP clients validate ``structuredContent`` against a
tool's ``outputSchema`` without any registry of other documents, so every schema handed
out here has its ``$ref`` s inlined.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from knowledge_schemas._files import BASE_URI
from knowledge_schemas.registry import load_registry

AGENT_TOOLS: dict[str, tuple[str, str]] = {
    "start_business_turn": ("mcp-turn-input", "mcp-turn-result"),
    "search_business_knowledge": ("mcp-search-input", "mcp-search-result"),
    "read_business_knowledge": ("mcp-read-input", "mcp-read-result"),
}
"""Agent Session path tools this project serves: name -> (input schema, output schema)."""

KNOWLEDGE_TOOLS = ("search_business_knowledge", "read_business_knowledge")
"""The seed's two knowledge tools (MCP-001): never on the Client Token path (MCP-002)."""

JOB_TOOLS = ("submit_governed_job", "get_governed_job", "wait_for_governed_job")
"""The Fixed Client Token stdio server's tools, exactly (MCP-002, vendor convention)."""

IDENTITY_ARGUMENTS = (
    "token",
    "access_token",
    "authorization",
    "identity",
    "account",
    "session_id",
    "session",
    "hub",
    "hub_url",
    "workspace",
    "route",
    "connection",
    "connection_key",
    "connectionKey",
    "run_id",
    "runId",
    "expected_binding",
    "expectedBinding",
)
"""Argument names that would let a model choose an identity, route, connection or run (MCP-008)."""

DELIVERY_ARGUMENTS = ("knowledge_delivery", "knowledgeDelivery", "delivery", "delivery_mode", "deliveryMode")
"""Argument names that would let a model choose the turn's delivery mode: ``knowledgeDelivery`` is a
trusted host option, never model-controlled turn input (MCP-008)."""

CHOSEN_ARGUMENTS = (*IDENTITY_ARGUMENTS, *DELIVERY_ARGUMENTS)
"""Every argument name no model-visible tool may declare or honour (MCP-008)."""

ERROR_RESULT = "mcp-error-result"
JOB_RESULT = "mcp-job-result"


def _inline(node: Any, base: str, seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(v, base, seen) for v in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        resolver = load_registry().registry.resolver(base_uri=base)
        resolved = resolver.lookup(node["$ref"])
        target = str(resolved.resolver._base_uri) or base  # the document the ref landed in
        key = target + "#" + node["$ref"].partition("#")[2]
        if key in seen:
            raise ValueError(f"recursive $ref {node['$ref']} cannot be inlined")
        inner = _inline(resolved.contents, target, (*seen, key))
        rest = {k: _inline(v, base, seen) for k, v in node.items() if k != "$ref"}
        return {**inner, **rest} if not rest else {"allOf": [inner], **rest}
    base = str(node.get("$id", base))
    return {k: _inline(v, base, seen) for k, v in node.items() if k not in ("$id", "$schema", "$defs")}


@cache
def _self_contained(stem: str, pointer: str) -> dict[str, Any]:
    doc = load_registry().contents[f"{stem}.schema.json"]
    node: Any = doc
    for part in pointer.strip("/").split("/") if pointer else []:
        node = node[part]
    out: dict[str, Any] = _inline(node, BASE_URI + f"{stem}.schema.json", ())
    return out


def tool_schema(stem: str, pointer: str = "") -> dict[str, Any]:
    """The schema ``stem`` (or its part at ``pointer``, e.g. ``$defs/get_governed_job``)
    with every ``$ref`` inlined: a self-contained document an MCP peer can use as is."""
    return copy.deepcopy(_self_contained(stem, pointer))


def job_input_schema(tool: str) -> dict[str, Any]:
    return tool_schema("mcp-job-input", f"$defs/{tool}")


TRANSPORTS = ("http", "stdio")
"""The Agent Session path's transports: streamable HTTP and stdio."""
