"""The reference client against scripted responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from conformance.clients.reference_client import KnowledgeError, ReferenceClient
from conformance.common import contract as C

CAPS: dict[str, Any] = {
    "schema_version": "bailing.agent-knowledge-capabilities.v1",
    "knowledge_schema_version": "bailing.agent-knowledge.v1",
    "route": "acme",
    "enabled": True,
    "delivery_modes": ["inline", "on_demand"],
    "limits": dict(C.LIMITS),
}


def client(handler: Callable[[httpx.Request], httpx.Response]) -> ReferenceClient:
    return ReferenceClient(
        httpx.Client(transport=httpx.MockTransport(handler), base_url="http://core"), "acme", "bha_token"
    )


@pytest.mark.parametrize("status", [404, 405, 501])
def test_old_endpoint_statuses_mean_unsupported(status: int) -> None:
    caps = client(
        lambda r: httpx.Response(status, json={"error": "not_found", "message": "x"})
    ).get_knowledge_capabilities()
    assert caps.supported is False and caps.status == status


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, {"error": "unauthorized"}),
        (403, {"error": "route_not_allowed"}),
        (500, {"error": "internal_error"}),
        (503, {"error": "unavailable"}),
        (404, {"error": "route_unavailable", "message": "no"}),
        (200, {**CAPS, "knowledge_schema_version": "bailing.agent-knowledge.v9"}),
        (200, {**CAPS, "route": "other"}),
    ],
)
def test_failures_and_unknown_schemas_are_errors_not_empty_success(status: int, body: dict[str, Any]) -> None:
    with pytest.raises(KnowledgeError):
        client(lambda r: httpx.Response(status, json=body)).get_knowledge_capabilities()


def test_supported_capabilities() -> None:
    caps = client(lambda r: httpx.Response(200, json=CAPS)).get_knowledge_capabilities()
    assert caps.supported and caps.enabled and caps.limits["read_chain_max_bytes"] == 131072


def test_aliases_map_to_wire_fields_and_disagreement_is_refused() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(
            200,
            json={
                "ref": "r",
                "revision": "v",
                "content": "x",
                "next_cursor": None,
                "truncated": False,
                "trust": "reference_only",
            },
        )

    c = client(handler)
    c.read_knowledge({"ref": "r", "runId": "run-1", "maxBytes": 4096})
    c.read_knowledge({"ref": "r", "run_id": "run-1", "max_bytes": 8192})
    assert seen == [
        {"ref": "r", "run_id": "run-1", "max_bytes": 4096},
        {"ref": "r", "run_id": "run-1", "max_bytes": 8192},
    ]
    with pytest.raises(ValueError):
        c.read_knowledge({"ref": "r", "runId": "a", "run_id": "b"})


def test_retry_after_lost_response_replays_the_pinned_payload() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            return httpx.Response(502, json={"error": "response_lost", "message": "lost"})
        return httpx.Response(200, json={"run_id": "r1", "context": {}})

    ids = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m"}
    c = client(handler)
    assert c.start_turn("hi", ids, knowledge_delivery="on_demand")["run_id"] == "r1"
    c.start_turn("hi", ids, knowledge_delivery="inline")  # a later call cannot change the pinned choice
    assert [b["knowledge_delivery"] for b in bodies] == ["on_demand"] * 3


def test_chain_stopped_by_budget_is_never_a_full_read() -> None:
    pages = iter(
        [
            {
                "ref": "r",
                "revision": "v",
                "content": "a",
                "next_cursor": "c1",
                "truncated": True,
                "trust": "reference_only",
            },
            {
                "ref": "r",
                "revision": "v",
                "content": "b",
                "next_cursor": None,
                "truncated": True,
                "budget_exhausted": True,
                "trust": "reference_only",
            },
        ]
    )
    result = client(lambda r: httpx.Response(200, json=next(pages))).read_chain("r", "run")
    assert (result.content, result.complete, result.budget_exhausted) == ("ab", False, True)
    assert result.describe() == "partial read: stopped by the read-chain budget"


def test_reference_error_becomes_feedback_with_next_action() -> None:
    body = {"error": "knowledge_reference_expired", "message": "expired", "next_action": "search_knowledge"}
    with pytest.raises(KnowledgeError) as info:
        client(lambda r: httpx.Response(410, json=body)).read_knowledge({"ref": "r", "runId": "x"})
    fb = info.value.feedback
    assert fb["next_action"] == "search_knowledge" and fb["retryable"] is True and fb["dispatch"] == "not_dispatched"


def _wire(**tables: dict[str, Any]) -> dict[str, Any]:
    from knowledge_schemas import load_wire_defaults

    wire: dict[str, Any] = load_wire_defaults()
    for table, values in tables.items():
        wire[table].update(values)
    return wire


def test_configured_auth_header_and_scheme_are_sent() -> None:
    seen: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json=CAPS)

    http = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://core")
    ReferenceClient.from_wire(
        http, "acme", "bha_token", _wire(auth={"header": "X-Agent-Token", "scheme": ""})
    ).get_knowledge_capabilities()
    ReferenceClient.from_wire(http, "acme", "bha_token", _wire(auth={"scheme": "Token"})).get_knowledge_capabilities()
    client(handler).get_knowledge_capabilities()  # defaults unchanged
    assert seen[0].get("x-agent-token") == "bha_token" and "authorization" not in seen[0]
    assert seen[1].get("authorization") == "Token bha_token"
    assert seen[2].get("authorization") == "Bearer bha_token"


@pytest.mark.parametrize(("status", "supported"), [(404, False), (410, False), (405, None), (501, None)])
def test_configured_legacy_statuses_decide_what_means_unsupported(status: int, supported: bool | None) -> None:
    """With [legacy] unsupported_statuses = [404, 410], 410 means an old Core and 405/501 are errors."""
    http = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(status, json={"error": "not_found", "message": "x"})),
        base_url="http://core",
    )
    c = ReferenceClient.from_wire(http, "acme", "bha_token", _wire(legacy={"unsupported_statuses": [404, 410]}))
    if supported is None:
        with pytest.raises(KnowledgeError):
            c.get_knowledge_capabilities()
    else:
        assert c.get_knowledge_capabilities().supported is supported


def test_configured_member_names_are_read_back_canonically() -> None:
    served = {
        **{k: v for k, v in CAPS.items() if k not in ("enabled", "limits")},
        "knowledge_enabled": False,
        "bounds": {("maxHints" if k == "search_max_hints" else k): v for k, v in CAPS["limits"].items()},
    }
    names = {
        "capabilities": {"enabled": "knowledge_enabled", "limits": "bounds"},
        "limits": {"search_max_hints": "maxHints"},
    }
    http = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=served)), base_url="http://core"
    )
    caps = ReferenceClient.from_wire(http, "acme", "bha_token", _wire(names=names)).get_knowledge_capabilities()
    assert caps.supported and caps.enabled is False and caps.limits["search_max_hints"] == 3
    with pytest.raises(KnowledgeError):  # the default names do not find them
        client(lambda r: httpx.Response(200, json=served)).get_knowledge_capabilities()
