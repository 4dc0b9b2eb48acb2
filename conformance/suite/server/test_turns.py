"""Turn delivery mode: on_demand context, bounded hints even for worst-case titles,
pinning across retries, conflicts, and a retry after a lost response that must resolve
to the run the Core committed (read back through the control extension)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.clients.reference_client import KnowledgeError, ReferenceClient
from conformance.common import contract as C
from conformance.common.outcomes import ContractViolation, HarnessError
from conformance.common.rules import Rule, expect
from conformance.server import checks, corpus
from conformance.server import rules as server
from conformance.server.world import Stated, World

R = pytest.mark.requirement


def _on_demand_context(world: World, text: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(turn body, its context)`` of a fresh on_demand turn: by default a message that finds the
    suite's corpus where it has one, else the configured probe query (a Core's own documents)."""
    if text is None:
        text = "how is the homepage binding done" if world.docs else world.cfg.probe_query
    response = world.core.turn(world.primary.token, world.route, world.core.turn_body(text))
    body = checks.ok(response, server.TURN_003, "an on_demand turn")
    context = body.get("context")
    return body, context if isinstance(context, dict) else {}


@R(server.TURN_003, server.TURN_006, server.TURN_007, server.WIRE_002)
def test_on_demand_turn_carries_bounded_hints(world: World) -> None:
    """Context members are looked up by their configured names ([wire.names.turn_context], and
    [wire.names.knowledge_delivery] for the delivery object's own members). The seed does not forbid
    members beyond the delivery schema's: they pass, unless they carry a whole document ("only bounded
    hints"); strict accepts only the schema's members (CHOICES.md)."""
    body, context = _on_demand_context(world)
    checks.bounded_delivery(world, body, context)


@R(server.TURN_008)
def test_on_demand_turn_keeps_knowledge_and_refs_present_and_empty(world: World) -> None:
    """Its own test, independent of the delivery object: a Core that answers on_demand with
    the inline context fails here whatever it does with context.knowledge_delivery."""
    _, context = _on_demand_context(world)
    checks.empty_knowledge(world, context)


@R(server.TURN_007, server.TURN_003)
def test_on_demand_hints_stay_bounded_with_three_worst_case_titles(world: World) -> None:
    """The turn's own hints for a message that finds the three worst-case documents of the
    corpus (see test_search): the delivery object stays within a search response's bound."""
    docs = [world.need_doc(key) for key in corpus.WORST_KEYS]
    field = world.cfg.names.turn_context["knowledge_delivery"]
    body, context = _on_demand_context(world, corpus.WORST_WORD)
    checks.on_demand_answer(world, context)
    sent = context.get(field)
    size = len(C.canonical(sent).encode())
    expect(
        size <= C.SEARCH_MAX_BYTES,
        server.TURN_007,
        f"context.{field} is {size} bytes as compact JSON, over {C.SEARCH_MAX_BYTES}",
    )
    delivery = world.cfg.names.delivery(context)
    hints = delivery["hints"] if isinstance(delivery.get("hints"), list) else []
    found = [d.key for d in docs if world.hint_for(hints, d, str(body.get("run_id"))) is not None]
    if len(found) < len(docs):  # the seed does not say which hints a turn carries: the worst case was not reached
        pytest.skip(f"not verified: the turn's {len(hints)} hints read as {found}, not the three worst-case documents")


@R(server.TURN_004)
def test_same_turn_identity_and_payload_replays_the_run(world: World) -> None:
    body = world.core.turn_body("homepage binding", "on_demand")
    first = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_004, "turn")
    again = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_004, "the replayed turn")
    expect(
        again.get("run_id") == first.get("run_id"),
        server.TURN_004,
        "the same turn identity and payload started another run",
    )
    expect(
        C.canonical(again.get("context")) == C.canonical(first.get("context")),
        server.TURN_004,
        "the replayed turn's context is not the frozen original",
    )


@R(server.TURN_004)
def test_a_replay_with_reordered_members_never_starts_another_run(world: World) -> None:
    """JSON object members are unordered (RFC 8259), so the replay with its members in the reverse
    order is the same payload. Pinning forbids only another run: by default the Core may replay
    the committed run (with its frozen context) or refuse; strict expects the replay."""
    body = world.core.turn_body("homepage binding", "on_demand")
    first = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_004, "turn")
    response = world.core.turn(world.primary.token, world.route, dict(reversed(list(body.items()))))
    if response.status_code != 200:
        expect(
            not world.cfg.strict_codes,
            server.TURN_004,
            f"strict: the replay with reordered members was refused: HTTP {response.status_code}",
        )
        checks.error_envelope(response, server.TURN_004)
        return
    again = checks.body_of(response, server.TURN_004)
    expect(
        isinstance(again, dict) and again.get("run_id") == first.get("run_id"),
        server.TURN_004,
        "the same turn identity and payload, members reordered, started another run",
    )
    expect(
        C.canonical(again.get("context")) == C.canonical(first.get("context")),
        server.TURN_004,
        "the replay with reordered members answered another context than the frozen original",
    )


CHANGED_PAYLOADS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "other_mode": lambda body: {**body, "knowledge_delivery": "inline"},
    "mode_left_out": lambda body: {k: v for k, v in body.items() if k != "knowledge_delivery"},
    "other_input": lambda body: {**body, "user_input": body["user_input"] + " and its owner"},
    "longer_input": lambda body: {**body, "user_input": body["user_input"] * 40},
    "shorter_input": lambda body: {**body, "user_input": body["user_input"][:4]},
}


@R(server.TURN_011, server.TURN_003)
@pytest.mark.parametrize("change", sorted(CHANGED_PAYLOADS))
def test_same_turn_identity_with_another_payload_keeps_the_pinned_run(world: World, change: str) -> None:
    """Its own test: a Core that never replays fails here too, not only in the replay test.
    Several changed payloads, not one: a Core that compares payloads by an ordering (or by a
    prefix, or by length) instead of equality lets some changes through."""
    body = world.core.turn_body("homepage binding", "on_demand", key=f"changed-{change}")
    first = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_003, "turn")
    other = world.core.turn(world.primary.token, world.route, CHANGED_PAYLOADS[change](body))
    _refused_or_pinned(world, other, first, server.TURN_011)


@R(server.TURN_011, server.TURN_003)
def test_an_inline_turn_identity_sent_again_on_demand_keeps_the_pinned_run(world: World) -> None:
    """The other way round: the identity committed without knowledge_delivery (inline), then sent
    with on_demand. A Core whose fingerprint leaves the delivery out answers the inline run; by
    default that keeps the choice pinned and passes, strict demands the 409 turn_conflict."""
    body = world.core.turn_body("homepage binding", None, key="changed-to-on-demand")
    first = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_003, "an inline turn")
    other = world.core.turn(world.primary.token, world.route, {**body, "knowledge_delivery": "on_demand"})
    _refused_or_pinned(world, other, first, server.TURN_011, pinned="inline")


@R(server.TURN_013, server.TURN_003)
def test_another_sessions_turn_with_the_same_ids_is_its_own_run(world: World) -> None:
    """The idempotency key is Agent Session + route + conversation + turn + user message id
    (CONVENTIONS): another Agent Session of the same account and route that sends the same ids
    and payload starts its own run, one it can use, never the first session's (whose run_id
    answers it 404 run_not_found)."""
    other = world.isolated("other_session", "session")
    body = world.core.turn_body("homepage binding", "on_demand", key="two-sessions")
    mine = checks.ok(world.core.turn(world.primary.token, world.route, body), server.TURN_003, "turn")
    theirs = checks.ok(
        world.core.turn(other.token, other.route, body),
        server.TURN_013,
        "the same turn ids sent by another Agent Session",
    )
    run_id = theirs.get("run_id") if isinstance(theirs, dict) else None
    expect(
        run_id != mine.get("run_id"),
        server.TURN_013,
        f"another Agent Session sending the same turn ids got the first session's run {run_id!r}",
    )
    search = world.search("binding" if world.docs else world.cfg.probe_query, str(run_id), other)
    expect(
        search.status_code == 200,
        server.TURN_013,
        f"the run another Agent Session's turn answered is not its own: its search with it answered HTTP {search.status_code}",
    )


@R(server.REF_007)
def test_on_demand_hints_respect_the_account_scope(fresh_world: World) -> None:
    """An on_demand turn's hints are search hints: the account's scope names only the main
    knowledge base, and the turn's message names the document of the second base; no hint of the
    turn may show that document (its seeded title, or a ref that reads as it), as no search hint may."""
    world = fresh_world
    second = world.need_doc("second")
    world.need_control("change the account's scope").set_scope(world.route, world.primary.account, [corpus.MAIN_BASE])
    body, context = _on_demand_context(world, f"{second.token} binding")
    checks.on_demand_answer(world, context)
    delivery = world.cfg.names.delivery(context)
    hints = delivery["hints"] if isinstance(delivery.get("hints"), list) else []
    if not hints:
        pytest.skip("not verified: the on_demand turn carried no hints to judge against the account's scope")
    run_id = str(body.get("run_id"))
    for i, hint in enumerate(hints):
        expect(
            not world.shows(hint, second, run_id),
            server.REF_007,
            f"hint {i} of an on_demand turn shows {second.key!r}, a document of base {second.base!r} outside the "
            "account's scope",
        )


@R(server.TURN_007)
def test_on_demand_hints_never_carry_a_summary_that_is_the_whole_document(world: World) -> None:
    """The corpus document whose seeded summary is its whole content (corpus.SUMMARISED): a
    turn's hint of it may quote it, never carry all of it (a hint that does is not bounded)."""
    doc = world.need_doc(corpus.SUMMARISED)
    body, context = _on_demand_context(world, f"{doc.token} summary")
    checks.on_demand_answer(world, context)
    delivery = world.cfg.names.delivery(context)
    hints = delivery["hints"] if isinstance(delivery.get("hints"), list) else []
    run_id = str(body.get("run_id"))
    if not any(world.shows(hint, doc, run_id) for hint in hints):
        pytest.skip(f"not verified: no hint of the on_demand turn shows document {doc.key!r}")
    whole = doc.content.strip()
    carriers = [i for i, hint in enumerate(hints) if any(whole in text for text in C.strings_in(hint))]
    expect(
        not carriers,
        server.TURN_007,
        f"hint {carriers[0] if carriers else 0} of an on_demand turn carries document {doc.key!r} whole "
        f"({len(whole)} characters), its author summary sent as it is",
    )


@R(server.SRCH_010, server.TURN_003)
def test_an_on_demand_turn_while_unavailable_is_never_ok_and_empty(in_state: Callable[[str], Stated]) -> None:
    """Seed: "Service unavailability is not evidence of an empty corpus." A workspace kept unavailable
    ([target.workspaces.unavailable]) or set so through control: an on_demand turn may be refused, or
    carry a delivery whose status is any the delivery schema allows (TURN-006 judges that), but
    never status ok with no hints, which says the corpus is empty."""
    stated = in_state("unavailable")
    world = stated.world
    text = "binding" if world.docs else world.cfg.probe_query
    response = world.core.turn(world.primary.token, world.route, world.core.turn_body(text, "on_demand"))
    if response.status_code != 200:
        pytest.skip(f"not verified: the unavailable workspace refused the on_demand turn (HTTP {response.status_code})")
    body = checks.body_of(response, server.TURN_003)
    context = body.get("context") if isinstance(body, dict) else None
    delivery = world.cfg.names.delivery(context) if isinstance(context, dict) else None
    if not isinstance(delivery, dict) or not delivery:
        pytest.skip("not verified: the on_demand turn of the unavailable workspace carried no delivery object")
    status, hints = delivery.get("status"), delivery.get("hints")
    expect(
        not (status == "ok" and hints == []),
        server.SRCH_010,
        "an on_demand turn of an unavailable workspace reported delivery status 'ok' with no hints",
    )


def _refused_or_pinned(
    world: World, response: Any, committed: dict[str, Any], requirement: Rule, *, pinned: str = "on_demand"
) -> None:
    """The same turn identity sent with the other delivery mode.

    The seed asks only that the choice stays pinned: refusing the changed payload (a 4xx
    envelope) or answering with the committed run and its original delivery both keep it.
    Starting a run with the new mode breaks ``requirement``. The vendor's 409
    ``turn_conflict`` is demanded only under strict, as TURN-011 (the convention)."""
    cfg = world.cfg
    if cfg.strict_codes:
        status = cfg.status("turn_conflict")
        expect(
            response.status_code == status,
            server.TURN_011,
            f"the same turn identity with another delivery mode answered HTTP {response.status_code}, strict expects {status}",
        )
        envelope = checks.error_envelope(response, server.TURN_011, statuses=range(status, status + 1))
        expect(envelope["error"] == cfg.code("turn_conflict"), server.TURN_011, f"conflict code {envelope['error']!r}")
        return
    if response.status_code != 200:
        checks.error_envelope(response, requirement)
        return
    body = checks.body_of(response, requirement)
    expect(
        isinstance(body, dict) and body.get("run_id") == committed.get("run_id"),
        requirement,
        "the same turn identity with another delivery mode started another run instead of keeping the pinned one",
    )
    kept = (cfg.names.delivery(body.get("context")) or {}).get("mode")
    expect(
        kept == pinned if pinned == "on_demand" else kept != "on_demand",
        requirement,
        f"the replay under a changed delivery mode answered with delivery {kept!r}, pinned was {pinned!r}",
    )


def _lose(world: World, ids: dict[str, Any]) -> None:
    world.need_control("inject a fault").fault("lose_next_turn_response", world.route)
    lost = world.core.turn(world.primary.token, world.route, ids)
    if lost.status_code == 200:
        raise HarnessError("the control extension's lose_next_turn_response fault did not lose the response")


@R(server.TURN_012, server.TURN_004, server.TURN_011)
def test_retry_after_a_lost_response_gets_the_committed_run(fresh_world: World) -> None:
    """Without reading back what was lost: the retry succeeds, replays agree, delivery stays pinned.
    Nothing here sees whether the retry returned the run the Core committed (a Core that starts a
    new run on the retry passes), so it verifies the replay rules (TURN-004) only; a retry that
    fails still breaks TURN-012. The committed run is compared where control can read it back."""
    ids = fresh_world.core.turn_body("homepage binding", key="lost-1")
    _lose(fresh_world, ids)
    client = ReferenceClient.from_wire(
        fresh_world.core.http, fresh_world.route, fresh_world.primary.token, fresh_world.cfg.wire
    )
    try:
        retried = client.start_turn(ids["user_input"], ids, knowledge_delivery="on_demand")
    except KnowledgeError as exc:
        raise ContractViolation(
            server.TURN_012, f"the retry with the same identity and payload failed: {exc}"
        ) from None
    again = checks.ok(
        fresh_world.core.turn(fresh_world.primary.token, fresh_world.route, ids), server.TURN_004, "a second replay"
    )
    expect(
        retried["run_id"] == again["run_id"],
        server.TURN_004,
        "two replays of one committed turn returned different runs",
    )
    expect(
        (fresh_world.cfg.names.delivery(retried.get("context")) or {}).get("mode") == "on_demand",
        server.TURN_004,
        "the retried turn lost its pinned on_demand delivery",
    )
    conflict = fresh_world.core.turn(
        fresh_world.primary.token, fresh_world.route, {**ids, "knowledge_delivery": "inline"}
    )
    _refused_or_pinned(fresh_world, conflict, retried, server.TURN_004)


def _committed(world: World) -> dict[str, Any]:
    """The turn response the lose fault withheld, as the Core committed it; skipped (not
    verified) when the control extension cannot say (no GET /faults/lost)."""
    withheld = world.need_control("read back a lost response").lost_responses(world.route)
    if withheld is None:
        pytest.skip(
            "not verified: the control extension cannot read back a lost response (GET /faults/lost), "
            "so the committed run is unknown"
        )
    if not withheld or not isinstance(withheld[-1].get("body"), dict) or "run_id" not in withheld[-1]["body"]:
        raise HarnessError(f"GET /faults/lost did not return the withheld turn response: {checks.describe(withheld)}")
    return dict(withheld[-1]["body"])


@R(server.TURN_012)
@pytest.mark.parametrize(
    "retry", ["same_payload", pytest.param("other_mode", marks=R(server.TURN_004, server.TURN_011))]
)
def test_a_retry_after_a_lost_response_resolves_to_the_committed_run(fresh_world: World, retry: str) -> None:
    """The run the Core committed before the response was lost, read back through control: a
    retry with the same identity returns exactly that run and context (TURN-012); the first
    retry with a changed payload (the other delivery mode) is refused or answered with that
    run and its pinned delivery (TURN-004), and never commits another. Replays after it still
    return the committed run."""
    ids = fresh_world.core.turn_body("homepage binding", key=f"lost-{retry}")
    _lose(fresh_world, ids)
    committed = _committed(fresh_world)
    core, who = fresh_world.core, fresh_world.primary
    if retry == "other_mode":
        _refused_or_pinned(
            fresh_world,
            core.turn(who.token, fresh_world.route, {**ids, "knowledge_delivery": "inline"}),
            committed,
            server.TURN_004,
        )
    for attempt in ("the retry", "a second replay"):
        replay = checks.ok(
            core.turn(who.token, fresh_world.route, ids),
            server.TURN_012,
            f"{attempt} with the same identity and payload",
        )
        expect(
            replay.get("run_id") == committed["run_id"],
            server.TURN_012,
            f"{attempt} returned run {replay.get('run_id')!r}; the Core committed {committed['run_id']!r} before the response was lost",
        )
        expect(
            C.canonical(replay.get("context")) == C.canonical(committed.get("context")),
            server.TURN_012,
            f"{attempt} returned another context than the one committed with the lost response",
        )
