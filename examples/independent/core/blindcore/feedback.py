"""Feedback objects (``bailing.agent-feedback.v1``) of the MCP tools."""
from __future__ import annotations

import re
from typing import Any

FEEDBACK_SCHEMA = "bailing.agent-feedback.v1"
CODE_RE = re.compile(r"[a-z][a-z0-9_]*")
REFERENCE_RE = re.compile(r"knowledge_(reference_[a-z0-9_]+|[a-z0-9_]*changed)")
FORBIDDEN_ERROR_MEMBERS = ("content", "hints", "knowledge")

MESSAGES: dict[str, str] = {
    "knowledge_reference": "The knowledge reference is no longer valid; search again on the same target.",
    "authentication": "The Agent Session token was not accepted.",
    "authorization": "This Agent Session may not do that on this workspace.",
    "not_found": "The Core did not find what the call named.",
    "conflict": "The Core refused the call because of a conflicting state.",
    "expired": "What the call named has expired.",
    "invalid_request": "The Core refused the arguments of the call.",
    "unavailable": "The Core's knowledge service is unavailable; this says nothing about the corpus.",
    "error": "The Core answered with an error.",
}


def category_of(status: int, code: str) -> str:
    if REFERENCE_RE.fullmatch(code):
        return "knowledge_reference"
    if status == 401:
        return "authentication"
    if status == 403:
        return "authorization"
    if status == 404:
        return "not_found"
    if status == 409:
        return "conflict"
    if status == 410:
        return "expired"
    if status in (400, 413, 415, 422):
        return "invalid_request"
    if status == 0 or status >= 500:
        return "unavailable"
    return "error"


def next_action_of(code: str) -> str | None:
    if REFERENCE_RE.fullmatch(code):
        return "search_knowledge"
    if code in ("run_not_found", "knowledge_run_required"):
        return "start_business_turn"
    return None


def feedback(operation: str, code: str, message: str, *, category: str, origin: str = "mcp",
             next_action: str | None = None) -> dict[str, Any]:
    """retryable refers to next_action only: true exactly when there is one.

    No ``invocation_id``: two refusals of one kind are byte-identical, so an absent,
    archived or unauthorized resource cannot be told apart by the feedback either."""
    return {
        "schema_version": FEEDBACK_SCHEMA,
        "category": category,
        "code": code,
        "origin": origin,
        "operation": operation,
        "dispatch": "not_dispatched",
        "retryable": next_action is not None,
        "next_action": next_action,
        "message": message,
    }


def from_core(operation: str, status: int, body: Any) -> dict[str, Any]:
    """The feedback object of a Core error answer (or of no answer, status 0)."""
    code = body.get("error") if isinstance(body, dict) else None
    origin = "core"
    if not isinstance(code, str) or not CODE_RE.fullmatch(code):
        code = "core_unreachable" if status == 0 else f"core_http_{status}"
        origin = "mcp"
    category = category_of(status, code)
    return feedback(operation, code, MESSAGES.get(category, MESSAGES["error"]), category=category,
                    origin=origin, next_action=next_action_of(code))


def core_error_body(body: Any) -> dict[str, Any] | None:
    """The Core's error body, when it is an error envelope worth passing on."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return None
    code = body["error"]
    if not CODE_RE.fullmatch(code) or len(code) > 128 or any(k in body for k in FORBIDDEN_ERROR_MEMBERS):
        return None
    out: dict[str, Any] = {"error": code}
    if isinstance(body.get("message"), str) and len(body["message"]) <= 2048:
        out["message"] = body["message"]
    if isinstance(body.get("next_action"), str) and CODE_RE.fullmatch(body["next_action"]):
        out["next_action"] = body["next_action"]
    if isinstance(body.get("retryable"), bool):
        out["retryable"] = body["retryable"]
    inner = body.get("feedback")
    if isinstance(inner, dict) and inner.get("schema_version", FEEDBACK_SCHEMA) == FEEDBACK_SCHEMA:
        kept = {k: v for k, v in inner.items()
                if (k in ("category", "code", "operation", "invocation_id", "disposition", "message")
                    and isinstance(v, str))
                or (k == "retryable" and isinstance(v, bool))
                or (k == "next_action" and (v is None or isinstance(v, str)))
                or (k == "origin" and v in ("core", "sdk", "mcp", "dsh", "host"))
                or (k == "dispatch" and v in ("not_dispatched", "attempted", "unknown"))
                or k == "schema_version"}
        out["feedback"] = kept
    return out
