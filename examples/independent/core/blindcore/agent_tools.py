"""The Agent Session MCP tools, an adapter in front of the Core's Agent API (over HTTP).

Identity, route, connection and run come from the session (its bearer token, the
route of the endpoint and the current run), never from a model argument.  The
current run is the last ``start_business_turn`` of the Agent Session on the route.
"""
from __future__ import annotations

import hashlib
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from . import feedback as fb
from .core_client import CoreAnswer, CoreClient
from .mcp_protocol import UnknownTool, text_result
from .tool_schemas import AGENT_TOOLS, HIDDEN_AGENT_TOOLS

CAPS_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
KNOWLEDGE_SCHEMA = "bailing.agent-knowledge.v1"
LEGACY_STATUSES = (404, 405, 501)
LEGACY_CODES = (None, "not_found", "method_not_allowed", "not_implemented")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
LIMIT_KEYS = ("search_max_hints", "search_max_bytes", "read_default_max_bytes", "read_min_max_bytes",
              "read_max_max_bytes", "reference_max_bytes", "read_chain_max_bytes",
              "reference_ttl_seconds")
SEARCH_KNOWLEDGE_ARGS = ("query", "knowledge_base_id", "knowledge_item_id", "knowledge_revision_id",
                         "offset", "limit_chars", "max_results", "mode", "alpha")
TURN_ATTEMPTS = 3
UNSUPPORTED_CODE = "knowledge_protocol_unsupported"
FLAGS: dict[str, Any] = {"dispatch": "not_dispatched", "business_operation_performed": False}

Result = dict[str, Any]


@dataclass
class SessionContext:
    """What the transport knows of the caller: its token and the endpoint's route."""
    token: str
    route: str
    identity: dict[str, Any] | None = None     # the Core's bootstrap answer, once known


@dataclass
class CurrentRun:
    run_id: str
    knowledge_supported: bool


@dataclass
class IdentityFailure:
    status: int                      # the HTTP status the MCP endpoint answers with
    code: str
    answer: CoreAnswer = field(default_factory=lambda: CoreAnswer(0, None))


def failure(operation: str, code: str, message: str, category: str, *, origin: str = "mcp",
            next_action: str | None = None, core_error: dict[str, Any] | None = None,
            extra: dict[str, Any] | None = None) -> Result:
    structured: dict[str, Any] = dict(extra or {})
    structured["feedback"] = fb.feedback(operation, code, message, category=category, origin=origin,
                                         next_action=next_action)
    if core_error is not None:
        structured["error"] = core_error
    structured.update(FLAGS)
    return text_result(structured, is_error=True)


def core_failure(operation: str, answer: CoreAnswer, extra: dict[str, Any] | None = None) -> Result:
    structured: dict[str, Any] = dict(extra or {})
    structured["feedback"] = fb.from_core(operation, answer.status, answer.body)
    error = fb.core_error_body(answer.body)
    if error is not None:
        structured["error"] = error
    structured.update(FLAGS)
    return text_result(structured, is_error=True)


def unsupported(operation: str, extra: dict[str, Any] | None = None) -> Result:
    return failure(operation, UNSUPPORTED_CODE,
                   "The Core does not offer the knowledge protocol (an older Core); the tool is "
                   "listed but cannot search or read there.", "unsupported", extra=extra)


def is_legacy(answer: CoreAnswer) -> bool:
    return answer.status in LEGACY_STATUSES and answer.error_code in LEGACY_CODES


def capabilities_support(body: Any, route: str) -> bool | None:
    """True/False: the protocol is supported and enabled/disabled; None: not a valid answer."""
    if not isinstance(body, dict):
        return None
    schema = body.get("schema_version", body.get("schema"))
    modes = body.get("delivery_modes")
    limits = body.get("limits")
    if (schema != CAPS_SCHEMA or body.get("knowledge_schema_version") != KNOWLEDGE_SCHEMA
            or body.get("route") != route or not isinstance(body.get("enabled"), bool)
            or not isinstance(modes, list) or sorted(modes) != ["inline", "on_demand"]
            or not isinstance(limits, dict)):
        return None
    for key in LIMIT_KEYS:
        value = limits.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None
    return bool(body["enabled"])


class AgentTools:
    """The tool set of the Agent Session MCP path (HTTP and stdio share it)."""

    def __init__(self, core: CoreClient) -> None:
        self.core = core
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, str, str, str], CurrentRun] = {}
        self.handlers: dict[str, Callable[[SessionContext, dict[str, Any]], Result]] = {
            "start_business_turn": self.start_business_turn,
            "search_business_knowledge": self.search_business_knowledge,
            "read_business_knowledge": self.read_business_knowledge,
            "search_knowledge": self.search_knowledge,
        }

    # ------------------------------------------------------------------ ToolSet
    def list_tools(self, include_hidden: bool) -> list[dict[str, Any]]:
        tools = list(AGENT_TOOLS) + (list(HIDDEN_AGENT_TOOLS) if include_hidden else [])
        return [dict(t) for t in tools]

    def call(self, name: str, arguments: Any, context: Any) -> Result:
        handler = self.handlers.get(name)
        if handler is None:
            raise UnknownTool(name)
        if not isinstance(arguments, dict):
            return failure(name, "invalid_arguments", "The arguments must be a JSON object.",
                           "invalid_request")
        assert isinstance(context, SessionContext)
        if context.identity is None:
            found = self.identify(context.token, context.route)
            if isinstance(found, IdentityFailure):
                if found.code == "core_unavailable":
                    return core_failure(name, found.answer)
                category = {"unauthorized": "authentication", "invalid_route": "invalid_request"}.get(
                    found.code, "authorization")
                return failure(name, found.code, "This Agent Session cannot use this workspace's tools.",
                               category)
            context.identity = found
        return handler(context, arguments)

    # ------------------------------------------------------------------ identity
    def identify(self, token: str, route: str) -> dict[str, Any] | IdentityFailure:
        """Who the token is, and that it belongs to `route` (route scoping)."""
        if not token:
            return IdentityFailure(401, "unauthorized")
        answer = self.core.request("GET", self.core.workspace_path(route, "bootstrap"), token)
        body = answer.body
        if answer.status == 200 and isinstance(body, dict) and body.get("route") == route:
            return body
        if answer.status == 401:
            return IdentityFailure(401, "unauthorized", answer)
        if answer.status == 400 and answer.error_code == "invalid_route":
            return IdentityFailure(400, "invalid_route", answer)
        if answer.status in (200, 403, 404):
            return IdentityFailure(403, "route_not_allowed", answer)
        return IdentityFailure(502 if answer.status == 0 else 503, "core_unavailable", answer)

    @staticmethod
    def run_key(ctx: SessionContext) -> tuple[str, str, str, str]:
        ident = ctx.identity or {}
        return (str(ident.get("hub")), str(ident.get("session_id")), str(ident.get("account")), ctx.route)

    def current_run(self, ctx: SessionContext) -> CurrentRun | None:
        with self.lock:
            return self.runs.get(self.run_key(ctx))

    # ------------------------------------------------------------------ tools
    def start_business_turn(self, ctx: SessionContext, args: dict[str, Any]) -> Result:
        op = "start_business_turn"
        user_input = args.get("user_input")
        if not isinstance(user_input, str) or not user_input:
            return failure(op, "invalid_arguments", "user_input must be a non-empty string.",
                           "invalid_request")
        caps = self.core.request("GET", self.core.workspace_path(ctx.route, "knowledge/capabilities"),
                                 ctx.token)
        enabled: bool | None = None
        if caps.status == 200:
            enabled = capabilities_support(caps.body, ctx.route)
            if enabled is None:
                return failure(op, "knowledge_capabilities_invalid",
                               "The Core's knowledge capabilities are not a known answer; that is not "
                               "an empty knowledge result.", "negotiation", origin="core")
            supported = True
        elif is_legacy(caps):
            supported = False
        else:
            return core_failure(op, caps)
        key = self.run_key(ctx)
        conversation = "mcp-" + hashlib.sha256("|".join(key).encode("utf-8")).hexdigest()[:32]
        turn_id = uuid.uuid4().hex
        body: dict[str, Any] = {"client_conversation_id": conversation, "client_turn_id": "t-" + turn_id,
                                "user_message_id": "m-" + turn_id, "user_input": user_input}
        if supported and enabled:
            body["knowledge_delivery"] = "on_demand"     # pinned for every retry below
        answer = CoreAnswer(0, None)
        for _ in range(TURN_ATTEMPTS):
            answer = self.core.request("POST", self.core.workspace_path(ctx.route, "turns"), ctx.token, body)
            if answer.status != 0 and answer.status < 500:
                break
        resp = answer.body
        if answer.status != 200 or not isinstance(resp, dict):
            return core_failure(op, answer)
        run_id = resp.get("run_id")
        context = resp.get("context") if isinstance(resp.get("context"), dict) else {}
        if not isinstance(run_id, str) or not UUID_RE.fullmatch(run_id):
            return failure(op, "turn_response_invalid", "The Core's turn answer has no run.", "error",
                           origin="core")
        with self.lock:
            self.runs[key] = CurrentRun(run_id=run_id, knowledge_supported=supported)
        structured: dict[str, Any] = {"run_id": run_id,
                                      "knowledge_protocol": "supported" if supported else "unsupported"}
        if isinstance(context.get("knowledge_delivery"), dict):
            structured["knowledge_delivery"] = context["knowledge_delivery"]
        structured["knowledge"] = context.get("knowledge", []) if isinstance(context.get("knowledge"), list) else []
        structured["knowledge_refs"] = (context.get("knowledge_refs", [])
                                        if isinstance(context.get("knowledge_refs"), list) else [])
        structured.update(FLAGS)
        return text_result(structured)

    def _bound_run(self, ctx: SessionContext, op: str) -> CurrentRun | Result:
        run = self.current_run(ctx)
        if run is None:
            return failure(op, "knowledge_run_required",
                           "Start the authorized user turn first (start_business_turn); knowledge "
                           "calls bind the current run.", "precondition",
                           next_action="start_business_turn")
        if not run.knowledge_supported:
            return unsupported(op)
        return run

    def search_business_knowledge(self, ctx: SessionContext, args: dict[str, Any]) -> Result:
        op = "search_business_knowledge"
        query, limit = args.get("query"), args.get("limit")
        if not isinstance(query, str) or (limit is not None and (isinstance(limit, bool)
                                                                 or not isinstance(limit, int))):
            return failure(op, "invalid_arguments", "query must be a string and limit an integer.",
                           "invalid_request")
        run = self._bound_run(ctx, op)
        if not isinstance(run, CurrentRun):
            return run
        body: dict[str, Any] = {"query": query, "run_id": run.run_id}
        if limit is not None:
            body["limit"] = limit
        answer = self.core.request("POST", self.core.workspace_path(ctx.route, "knowledge/search"),
                                   ctx.token, body)
        if answer.status == 200 and valid_search(answer.body):
            return text_result({**answer.body, **FLAGS})
        if answer.status == 200:
            return failure(op, "knowledge_response_invalid", "The Core's search answer is not a "
                           "knowledge search response.", "error", origin="core")
        if is_legacy(answer):
            return unsupported(op)
        return core_failure(op, answer)

    def read_business_knowledge(self, ctx: SessionContext, args: dict[str, Any]) -> Result:
        op = "read_business_knowledge"
        ref, cursor, max_bytes = args.get("ref"), args.get("cursor"), args.get("max_bytes")
        if (not isinstance(ref, str) or (cursor is not None and not isinstance(cursor, str))
                or (max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)))):
            return failure(op, "invalid_arguments", "ref and cursor must be strings and max_bytes an "
                           "integer.", "invalid_request")
        run = self._bound_run(ctx, op)
        if not isinstance(run, CurrentRun):
            return run
        body: dict[str, Any] = {"ref": ref, "run_id": run.run_id}
        if cursor is not None:
            body["cursor"] = cursor
        if max_bytes is not None:
            body["max_bytes"] = max_bytes
        answer = self.core.request("POST", self.core.workspace_path(ctx.route, "knowledge/read"),
                                   ctx.token, body)
        if answer.status == 200 and valid_read(answer.body):
            return text_result({**answer.body, **FLAGS})
        if answer.status == 200:
            return failure(op, "knowledge_response_invalid", "The Core's read answer is not a "
                           "knowledge page.", "error", origin="core")
        if is_legacy(answer):
            return unsupported(op)
        return core_failure(op, answer)

    def search_knowledge(self, ctx: SessionContext, args: dict[str, Any]) -> Result:
        op = "search_knowledge"
        forwarded = {k: args[k] for k in SEARCH_KNOWLEDGE_ARGS if k in args}   # the rest is ignored
        answer = self.core.request(
            "POST", self.core.workspace_path(ctx.route, "knowledge-service/search-knowledge"),
            ctx.token, forwarded)
        body = answer.body
        if answer.status == 200 and isinstance(body, dict) and body.get("type") in ("knowledge_search",
                                                                                    "knowledge"):
            return text_result({**body, **FLAGS})
        if is_legacy(answer):
            return unsupported(op, extra={"type": "knowledge_error", "code": UNSUPPORTED_CODE})
        code = answer.error_code or ("core_unreachable" if answer.status == 0 else f"core_http_{answer.status}")
        kind = body.get("type") if isinstance(body, dict) and body.get("type") in (
            "knowledge_error", "knowledge_unavailable") else "knowledge_error"
        return failure(op, code, SEARCH_KNOWLEDGE_MESSAGES.get(code, "The Knowledge service refused the call."),
                       fb.category_of(answer.status, code), origin="core" if answer.error_code else "mcp",
                       extra={"type": kind, "code": code})


SEARCH_KNOWLEDGE_MESSAGES: dict[str, str] = {
    "knowledge_runtime_disabled": "The Knowledge runtime is switched off: an operational state, not an "
                                  "empty corpus and not a fallback to memory.",
    "knowledge_invalid_request": "Invalid request: use either query or knowledge_item_id, with values "
                                 "inside their bounds.",
    "knowledge_query_required": "Give a query for ranked search or a knowledge_item_id for an addressed read.",
    "knowledge_item_required": "knowledge_revision_id needs knowledge_item_id.",
    "knowledge_resource_unavailable": "The addressed knowledge is not available.",
    "knowledge_scope_missing": "The caller lacks the knowledge:read scope.",
}


def valid_search(body: Any) -> bool:
    return (isinstance(body, dict) and body.get("status") in ("ok", "disabled", "unavailable", "partial")
            and isinstance(body.get("hints"), list) and len(body["hints"]) <= 3
            and body.get("trust") == "reference_only")


def valid_read(body: Any) -> bool:
    return (isinstance(body, dict) and isinstance(body.get("ref"), str)
            and isinstance(body.get("content"), str) and isinstance(body.get("truncated"), bool)
            and "revision" in body and "next_cursor" in body and body.get("trust") == "reference_only")
