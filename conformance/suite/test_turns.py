"""Turn delivery mode: on_demand context, pinning across retries, conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import checks
from conformance import contract as C
from conformance.checks import expect
from conformance.client import KnowledgeError, ReferenceClient
from conformance.wire import CoreWire
from knowledge_schemas import load_registry

R = pytest.mark.requirement


@R("TURN-003", "TURN-006", "TURN-007", "TURN-008", "WIRE-002")
def test_on_demand_turn_carries_bounded_hints_and_empty_bodies(world: Any) -> None:
    """Context members are looked up by their configured names ([wire.names.turn_context])."""
    names = world.cfg.names
    member = names.turn_context
    knowledge, refs, field = member["knowledge"], member["knowledge_refs"], member["knowledge_delivery"]
    response = world.core.turn(world.primary.token, world.route, CoreWire.turn_body("how is the homepage binding done"))
    body = checks.ok(response, "TURN-003", "an on_demand turn")
    context = body.get("context") or {}
    delivery = context.get(field)
    expect(isinstance(delivery, dict), "TURN-003", f"an on_demand turn has no context.{field}")
    hints = (delivery or {}).get("hints", [])
    expect(isinstance(hints, list) and len(hints) <= C.SEARCH_MAX_HINTS, "TURN-007", f"{len(hints)} hints in context.{field}")
    expect(len(C.canonical(delivery).encode()) <= C.SEARCH_MAX_BYTES, "TURN-007", f"context.{field} is larger than a search response may be")
    errors = load_registry().errors("knowledge-delivery", delivery)
    expect(not errors, "TURN-006", f"context.{field} does not match the delivery schema: {'; '.join(errors[:3])}")
    expect(context.get(knowledge) == [] and context.get(refs) == [], "TURN-008",
           f"{knowledge}/{refs} must be present and empty: {knowledge}={str(context.get(knowledge))[:120]} {refs}={str(context.get(refs))[:120]}")
    checks.schema("turn-response", body, names=names)


@R("TURN-004", "TURN-011")
def test_same_turn_identity_replays_and_another_payload_conflicts(world: Any) -> None:
    body = CoreWire.turn_body("homepage binding", "on_demand")
    first = checks.ok(world.core.turn(world.primary.token, world.route, body), "TURN-004", "turn")
    again = checks.ok(world.core.turn(world.primary.token, world.route, body), "TURN-004", "the replayed turn")
    expect(again.get("run_id") == first.get("run_id"), "TURN-004", "the same turn identity and payload started another run")
    expect(C.canonical(again.get("context")) == C.canonical(first.get("context")), "TURN-004", "the replayed turn's context is not the frozen original")
    other = world.core.turn(world.primary.token, world.route, {**body, "knowledge_delivery": "inline"})
    conflict = world.cfg.status("turn_conflict")
    expect(other.status_code == conflict, "TURN-011",
           f"the same turn identity with another delivery mode answered HTTP {other.status_code}, expected {conflict}")
    envelope = checks.error_envelope(other, "TURN-011", statuses=range(conflict, conflict + 1))
    if world.cfg.strict_codes:
        expect(envelope["error"] == world.cfg.code("turn_conflict"), "TURN-011", f"conflict code {envelope['error']!r}")


@R("TURN-012", "TURN-004")
def test_retry_after_a_lost_response_gets_the_committed_run(fresh_world: Any) -> None:
    control = fresh_world.control
    ids = CoreWire.turn_body("homepage binding", key="lost-1")
    control.fault("lose_next_turn_response", fresh_world.route)
    lost = fresh_world.core.turn(fresh_world.primary.token, fresh_world.route, ids)
    expect(lost.status_code != 200, "TURN-012", "the injected fault did not lose the response (control extension misbehaves)")
    client = ReferenceClient.from_wire(fresh_world.core.http, fresh_world.route, fresh_world.primary.token, fresh_world.cfg.wire)
    try:
        retried = client.start_turn(ids["user_input"], ids, knowledge_delivery="on_demand")
    except KnowledgeError as exc:
        raise checks.ContractViolation("TURN-012", f"the retry with the same identity and payload failed: {exc}") from None
    again = checks.ok(fresh_world.core.turn(fresh_world.primary.token, fresh_world.route, ids), "TURN-012", "a second replay")
    expect(retried["run_id"] == again["run_id"], "TURN-012", "two replays of one committed turn returned different runs")
    field = fresh_world.cfg.names.turn_context["knowledge_delivery"]
    expect(((retried.get("context") or {}).get(field) or {}).get("mode") == "on_demand", "TURN-004",
           "the retried turn lost its pinned on_demand delivery")
    conflict = fresh_world.core.turn(fresh_world.primary.token, fresh_world.route, {**ids, "knowledge_delivery": "inline"})
    status = fresh_world.cfg.status("turn_conflict")
    expect(conflict.status_code == status, "TURN-012",
           f"after a lost response, the same identity with another delivery mode answered HTTP {conflict.status_code}, expected {status}")
