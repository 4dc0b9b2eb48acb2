"""Reference client with the SDK semantics of seed 000.

- capabilities are classified: only the old endpoint statuses (404/405/501 unless
  configured otherwise) mean ``supported: false``;
  401/403, other failures and unknown schemas raise (never an empty success);
- ``start_turn`` pins the delivery choice of an idempotent turn and replays the
  identical payload after a lost response;
- ``search_knowledge`` / ``read_knowledge`` take ``runId``/``maxBytes`` or their
  snake-case aliases and send ``run_id``/``max_bytes`` on the wire;
- ``read_chain`` says honestly whether a chain is complete, truncated or stopped
  by the read budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from conformance.common import contract as C
from conformance.common.names import WireNames
from conformance.common.secrets import clip
from knowledge_schemas import load_registry

UNSUPPORTED_STATUSES = frozenset({404, 405, 501})


class KnowledgeError(Exception):
    """A Core answer that is neither success nor 'not supported'. Carries the feedback object."""

    def __init__(self, feedback: dict[str, Any]) -> None:
        super().__init__(f"{feedback['code']}: {feedback['message']}")
        self.feedback = feedback


def feedback(
    operation: str,
    code: str,
    message: str,
    *,
    next_action: str | None = None,
    category: str = "knowledge",
    dispatch: str = "not_dispatched",
    origin: str = "core",
) -> dict[str, Any]:
    """A ``bailing.agent-feedback.v1`` object; ``retryable`` refers to next_action only."""
    return {
        "schema_version": "bailing.agent-feedback.v1",
        "category": category,
        "code": code,
        "origin": origin,
        "operation": operation,
        "dispatch": dispatch,
        "retryable": next_action is not None,
        "next_action": next_action,
        "message": message,
    }


@dataclass(frozen=True)
class Capabilities:
    supported: bool
    enabled: bool = False
    limits: Mapping[str, int] = field(default_factory=dict)
    status: int = 200


@dataclass(frozen=True)
class ChainResult:
    """A followed read chain. ``complete`` is true only when the whole revision was read."""

    content: str
    pages: int
    complete: bool
    truncated: bool
    budget_exhausted: bool
    revision: str

    def describe(self) -> str:
        if self.complete:
            return "full read"
        if self.budget_exhausted:
            return "partial read: stopped by the read-chain budget"
        return "partial read: truncated"


def _alias(data: Mapping[str, Any], camel: str, snake: str) -> Any:
    if camel in data and snake in data and data[camel] != data[snake]:
        raise ValueError(f"{camel} and {snake} disagree")
    return data.get(camel, data.get(snake))


class ReferenceClient:
    """The SDK's semantics over one identity. Every open wire detail has the project's
    default and can be given as in a target configuration (``from_wire``)."""

    def __init__(
        self,
        http: httpx.Client,
        route: str,
        token: str,
        *,
        paths: Mapping[str, str] | None = None,
        unsupported_statuses: Iterable[int] = UNSUPPORTED_STATUSES,
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        names: Mapping[str, Mapping[str, str]] | None = None,
        max_retries: int = 2,
    ) -> None:
        self.http = http
        self.route = route
        self._auth = {auth_header: f"{auth_scheme} {token}".strip()}
        base = "/agent-api/v1/workspaces/{route}"
        self.paths = {
            "capabilities": f"{base}/knowledge/capabilities",
            "search": f"{base}/knowledge/search",
            "read": f"{base}/knowledge/read",
            "turns": f"{base}/turns",
            **(paths or {}),
        }
        self.unsupported = frozenset(unsupported_statuses)
        self.names = WireNames(names)
        self.max_retries = max_retries
        self._pinned: dict[tuple[str, str, str], dict[str, Any]] = {}

    @classmethod
    def from_wire(
        cls, http: httpx.Client, route: str, token: str, wire: Mapping[str, Any], **options: Any
    ) -> ReferenceClient:
        """A client speaking the wire of a target configuration: paths, auth, legacy statuses, member names."""
        return cls(
            http,
            route,
            token,
            paths=wire["paths"],
            unsupported_statuses=wire["legacy"]["unsupported_statuses"],
            auth_header=wire["auth"]["header"],
            auth_scheme=wire["auth"]["scheme"],
            names=wire.get("names"),
            **options,
        )

    def _url(self, name: str) -> str:
        return self.paths[name].replace("{route}", self.route)

    def _error(self, operation: str, response: httpx.Response) -> KnowledgeError:
        try:
            body = response.json()
        except ValueError:
            body = {}
        code = body.get("error") if isinstance(body, dict) else None
        action = body.get("next_action") if isinstance(body, dict) else None
        if action is None and isinstance(body, dict) and isinstance(body.get("feedback"), dict):
            action = body["feedback"].get("next_action")
        if action is None and C.is_reference_error_code(code):  # the SDK's feedback: search again (seed)
            action = "search_knowledge"
        return KnowledgeError(
            feedback(
                operation,
                code or f"http_{response.status_code}",
                (body.get("message") if isinstance(body, dict) else None) or clip(response.text, 200),
                next_action=action,
            )
        )

    # -------------------------------------------------------- negotiation
    def get_knowledge_capabilities(self) -> Capabilities:
        response = self.http.get(self._url("capabilities"), headers=self._auth)
        if response.status_code in self.unsupported:
            try:
                code = response.json().get("error")
            except (ValueError, AttributeError):
                code = None
            # A 404 with a specific code (route_unavailable, run_not_found) is not an old Core.
            if response.status_code != 404 or code in (None, "not_found"):
                return Capabilities(supported=False, status=response.status_code)
        if response.status_code != 200:
            raise self._error("get_knowledge_capabilities", response)
        try:
            body = response.json()
        except ValueError:
            raise KnowledgeError(
                feedback("get_knowledge_capabilities", "invalid_response", "capabilities body is not JSON")
            ) from None
        return self.classify_capabilities(self.names.to_canonical("capabilities-response", body))

    def classify_capabilities(self, body: Any) -> Capabilities:
        """A 200 capabilities body (canonical names): supported only when every condition holds."""
        errors = load_registry().errors("capabilities-response", body)
        if errors or body.get("route") != self.route:
            why = "; ".join(errors) if errors else f"route {body.get('route')!r} does not match {self.route!r}"
            raise KnowledgeError(
                feedback("get_knowledge_capabilities", "unknown_schema", f"unsupported capabilities: {why}")
            )
        return Capabilities(supported=True, enabled=bool(body["enabled"]), limits=dict(body["limits"]))

    # -------------------------------------------------------------- turns
    def start_turn(
        self, user_input: str, ids: Mapping[str, str], *, knowledge_delivery: str | None = None
    ) -> dict[str, Any]:
        """Start a turn. The delivery choice is a host option, pinned per turn identity; retries replay it."""
        key = (ids["client_conversation_id"], ids["client_turn_id"], ids["user_message_id"])
        if key not in self._pinned:
            body: dict[str, Any] = {
                **{k: ids[k] for k in ("client_conversation_id", "client_turn_id", "user_message_id")},
                "user_input": user_input,
            }
            if knowledge_delivery is not None:
                body["knowledge_delivery"] = knowledge_delivery
            self._pinned[key] = body
        body = self._pinned[key]
        last: httpx.Response | None = None
        for _ in range(self.max_retries + 1):
            try:
                last = self.http.post(self._url("turns"), json=body, headers=self._auth)
            except httpx.TransportError:
                continue
            if last.status_code == 200:
                return self.checked_turn(self._json("start_turn", last))
            if last.status_code not in (502, 503, 504):
                break
        if last is None:
            raise KnowledgeError(
                feedback("start_turn", "network_error", "no response", dispatch="unknown", origin="sdk")
            )
        raise self._error("start_turn", last)

    def checked_turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        """A turn answer as it came, once its explicit ``context.knowledge_delivery`` (whatever delivery was
        asked for) matches the delivery schema; its inline bodies are never touched."""
        context = turn.get("context")
        if isinstance(context, dict) and "knowledge_delivery" in context:
            errors = load_registry().errors("knowledge-delivery", context["knowledge_delivery"])
            if errors:
                raise KnowledgeError(
                    feedback(
                        "start_turn",
                        "invalid_response",
                        f"context.knowledge_delivery does not match the delivery schema: {'; '.join(errors[:3])}",
                    )
                )
        return turn

    # ------------------------------------------------------ search / read
    def search_knowledge(self, data: Mapping[str, Any]) -> dict[str, Any]:
        wire: dict[str, Any] = {"query": data["query"], "run_id": _alias(data, "runId", "run_id")}
        if "limit" in data:
            wire["limit"] = data["limit"]
        response = self.http.post(self._url("search"), json=wire, headers=self._auth)
        if response.status_code != 200:
            raise self._error("search_knowledge", response)
        body = self._json("search_knowledge", response)
        if body.get("status") not in C.SEARCH_STATUSES:
            raise KnowledgeError(
                feedback("search_knowledge", "unknown_schema", f"unknown search status {body.get('status')!r}")
            )
        return body

    def read_knowledge(self, data: Mapping[str, Any]) -> dict[str, Any]:
        wire: dict[str, Any] = {"ref": data["ref"], "run_id": _alias(data, "runId", "run_id")}
        max_bytes = _alias(data, "maxBytes", "max_bytes")
        if max_bytes is not None:
            wire["max_bytes"] = max_bytes
        if data.get("cursor"):
            wire["cursor"] = data["cursor"]
        response = self.http.post(self._url("read"), json=wire, headers=self._auth)
        if response.status_code != 200:
            raise self._error("read_knowledge", response)
        return self._json("read_knowledge", response)

    @staticmethod
    def _json(operation: str, response: httpx.Response) -> dict[str, Any]:
        """A 200 answer's JSON object; anything else is an answer the client does not accept."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise KnowledgeError(
                feedback(operation, "invalid_response", f"the {operation} answer is not a JSON object")
            )
        return body

    def read_chain(self, ref: str, run_id: str, *, max_bytes: int | None = None) -> ChainResult:
        """Page by page to the chain's end. Bounded by what the contract bounds (the chain's content
        bytes), never by a page count: a Core may answer with small pages. A chain that passes the
        budget, or stalls on empty pages, is given up as incomplete."""
        parts: list[str] = []
        page: dict[str, Any] = {}
        cursor: str | None = None
        count = consumed = empty = 0
        while consumed <= C.READ_CHAIN_MAX_BYTES and empty < 8:
            page = self.read_knowledge({"ref": ref, "runId": run_id, "maxBytes": max_bytes, "cursor": cursor})
            count += 1
            if not isinstance(page.get("content"), str):  # a page the client cannot read: refused, not a crash
                raise KnowledgeError(feedback("read_knowledge", "invalid_response", "the page has no content string"))
            parts.append(page["content"])
            size = len(str(page["content"]).encode("utf-8"))
            consumed, empty = consumed + size, 0 if size else empty + 1
            cursor = page.get("next_cursor")
            if not cursor:
                truncated, exhausted = self.chain_end(page)
                return ChainResult("".join(parts), count, not truncated, truncated, exhausted, page.get("revision", ""))
        return ChainResult("".join(parts), count, False, True, False, page.get("revision", ""))

    def chain_end(self, page: dict[str, Any]) -> tuple[bool, bool]:
        """(truncated, budget_exhausted) of a chain whose last page is ``page``: ``truncated: true``
        means incomplete, whatever the cursor says, and a budget stop is never complete."""
        exhausted = page.get("budget_exhausted") is True
        return bool(page.get("truncated")) or exhausted, exhausted
