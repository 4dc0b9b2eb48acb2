"""Turn delivery mode: on_demand context, pinning across retries, conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import checks
from conformance import contract as C
from conformance.checks import expect
from conformance.client import KnowledgeError, ReferenceClient
from conformance.errors import HarnessError
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
    _refused_or_pinned(world, other, first, "TURN-011")


def _refused_or_pinned(world: Any, response: Any, committed: dict[str, Any], requirement: str) -> None:
    """The same turn identity sent with the other delivery mode.

    The seed asks only that the choice stays pinned: refusing the changed payload (a 4xx
    envelope) or answering with the committed run and its original delivery both keep it.
    Starting a run with the new mode breaks it. The vendor's 409 ``turn_conflict`` is
    demanded only under strict."""
    cfg = world.cfg
    if cfg.strict_codes:
        status = cfg.status("turn_conflict")
        expect(response.status_code == status, requirement,
               f"the same turn identity with another delivery mode answered HTTP {response.status_code}, strict expects {status}")
        envelope = checks.error_envelope(response, requirement, statuses=range(status, status + 1))
        expect(envelope["error"] == cfg.code("turn_conflict"), requirement, f"conflict code {envelope['error']!r}")
        return
    if response.status_code != 200:
        checks.error_envelope(response, requirement)
        return
    body = checks.body_of(response, requirement)
    expect(isinstance(body, dict) and body.get("run_id") == committed.get("run_id"), requirement,
           "the same turn identity with another delivery mode started another run instead of keeping the pinned one")
    field = cfg.names.turn_context["knowledge_delivery"]
    kept = ((body.get("context") or {}).get(field) or {}).get("mode")
    expect(kept == "on_demand", requirement, f"the replay under a changed delivery mode answered with delivery {kept!r}, pinned was 'on_demand'")


@R("TURN-012", "TURN-004")
def test_retry_after_a_lost_response_gets_the_committed_run(fresh_world: Any) -> None:
    control = fresh_world.control
    ids = CoreWire.turn_body("homepage binding", key="lost-1")
    control.fault("lose_next_turn_response", fresh_world.route)
    lost = fresh_world.core.turn(fresh_world.primary.token, fresh_world.route, ids)
    if lost.status_code == 200:
        raise HarnessError("the control extension's lose_next_turn_response fault did not lose the response")
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
    _refused_or_pinned(fresh_world, conflict, retried, "TURN-012")
