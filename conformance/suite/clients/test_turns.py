"""SDK turn delivery (seed 000): the host option alone chooses it (never a model's input), inline
bodies a Core sends are kept, a malformed knowledge_delivery is refused whatever was asked, and the
choice stays pinned across lost responses and changed capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.clients import rules as clients
from conformance.clients.session import Session, client_failed, exchange, requests
from conformance.clients.world import HOMEPAGE, QUERIES
from conformance.common.outcomes import HarnessError
from conformance.common.rules import expect
from conformance.server.checks import describe
from knowledge_schemas import load_registry

R = pytest.mark.requirement


@R(clients.NEG_004)
@pytest.mark.parametrize("text", ["homepage binding", QUERIES["archive"]], ids=["short", "long"])
@pytest.mark.parametrize(
    "delivery",
    [pytest.param("inline", marks=R(clients.TURN_009)), pytest.param("negotiate", marks=R(clients.TURN_010))],
)
def test_a_legacy_turns_inline_bodies_are_kept(sdk: Session, delivery: str, text: str) -> None:
    """inline: the legacy body is kept (TURN-009); negotiate, where on_demand was asked for locally: it is
    not stripped for that (TURN-010)."""
    rule = clients.TURN_009 if delivery == "inline" else clients.TURN_010
    route = sdk.world.route("legacy404")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("legacy404", delivery, text=text)
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(
        not any("knowledge_delivery" in (t.get("body") or {}) for t in turns),
        clients.NEG_004,
        "a Core that does not support knowledge got knowledge_delivery",
    )
    if not (answer.ok and turns):
        client_failed(f"the client's turn on the legacy Core failed, so no body to keep: {answer.describe()}")
    sent = turns[-1]["body"]
    ids = {k: sent[k] for k in ("client_conversation_id", "client_turn_id", "user_message_id")}
    wire = sdk.world.direct("legacy404").turn(ids=ids, delivery=sent.get("knowledge_delivery"), text=sent["user_input"])
    inline = wire["context"]["knowledge"]  # the same turn again: the Core replays what it sent the client
    if not inline:
        raise HarnessError("the legacy Core sent no inline knowledge for the turn: nothing to check")
    kept = answer.value["context"].get("knowledge")
    expect(kept == inline, rule, f"the legacy inline body was not kept as sent: the client returned {describe(kept)}")


def _canned_turn(sdk: Session, context: dict[str, Any] | None = None, text: str = "homepage binding") -> dict[str, Any]:
    """A turn response for the canned connection, as the Core answers an inline turn (bodies, no
    knowledge_delivery), its context updated with ``context``: armed as the next turn's answer."""
    body = sdk.world.direct("canned").turn(text=text)
    body["context"] = {**body["context"], **(context or {})}
    sdk.control.respond_next(sdk.world.route("canned"), "turns", 200, body)
    return body


@R(clients.TURN_010)
@pytest.mark.parametrize("text", ["homepage binding", QUERIES["archive"]], ids=["short", "long"])
def test_an_on_demand_turn_answered_inline_keeps_its_bodies(sdk: Session, text: str) -> None:
    """The host option asked for on_demand explicitly and the Core answered the way a legacy Core does (inline
    bodies, no knowledge_delivery): the bodies are not stripped because of the local setting."""
    route = sdk.world.route("canned")
    canned = _canned_turn(sdk, text=text)
    if not canned["context"]["knowledge"]:
        raise HarnessError("the Core sent no inline knowledge for the turn: nothing to check")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("canned", "on_demand", text=text)
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    if not turns:
        sdk.world.direct("canned").disarm("turns")
        client_failed(f"the on_demand turn sent no turn request: {answer.describe()}")
    if not answer.ok:
        client_failed(f"the client refused a legacy turn answer, so no body to keep: {answer.describe()}")
    context = answer.value["context"]
    for member in ("knowledge", "knowledge_refs"):
        expect(
            context.get(member) == canned["context"][member],
            clients.TURN_010,
            f"an on_demand turn the Core answered with inline bodies did not keep its {member} as sent: the client "
            f"returned {describe(context.get(member))}; judged {exchange(turns[:1])}",
        )


# case -> a context.knowledge_delivery that does not match the delivery schema: more than three hints, a whole
# body beside the hints, hints that are no list
_HINTS = [{"title": f"Hint {i}", "summary": "a hint", "ref": f"kref_{i}"} for i in range(4)]
MALFORMED_DELIVERIES: dict[str, dict[str, Any]] = {
    "four-hints": {"mode": "on_demand", "status": "ok", "trust": "reference_only", "hints": _HINTS},
    "a-body": {"mode": "on_demand", "status": "ok", "trust": "reference_only", "hints": [], "content": HOMEPAGE[1]},
    "hints-not-a-list": {"mode": "on_demand", "status": "ok", "trust": "reference_only", "hints": "kref_1"},
}


@R(clients.TURN_014)
@pytest.mark.parametrize("delivery", ["on_demand", "inline", "negotiated-inline"])
@pytest.mark.parametrize("case", list(MALFORMED_DELIVERIES))
def test_a_malformed_knowledge_delivery_is_refused_whatever_was_asked(sdk: Session, delivery: str, case: str) -> None:
    """An explicit context.knowledge_delivery must match the delivery schema, whichever delivery the client asked
    for (on_demand, inline, or a negotiation that came out inline): the client refuses the turn, or at least never
    gives the malformed member back as the turn's delivery."""
    route = sdk.world.route("canned")
    if delivery == "negotiated-inline":  # the capabilities answer says old Core: the negotiated turn is inline
        sdk.control.respond_next(route, "capabilities", 404, {"error": "not_found", "message": "no such path"})
    _canned_turn(sdk, {"knowledge_delivery": MALFORMED_DELIVERIES[case]})
    mark = sdk.wire.mark(route)
    answer = sdk.turn("canned", "negotiate" if delivery == "negotiated-inline" else delivery)
    wire = sdk.wire.since(mark, route)
    turns = requests(wire, "POST", "turns")
    if delivery == "negotiated-inline" and not requests(wire, "GET", "capabilities"):
        sdk.world.direct("canned").disarm("capabilities")
    if not turns:
        sdk.world.direct("canned").disarm("turns")
        client_failed(f"the {delivery} turn sent no turn request: {answer.describe()}")
    kept = answer.value["context"].get("knowledge_delivery") if answer.ok else None
    expect(
        kept is None or not load_registry().errors("knowledge-delivery", kept),
        clients.TURN_014,
        f"a turn asked {delivery} whose answer carries a knowledge_delivery that does not match the delivery schema "
        f"({case}) was given back as the turn's delivery: {answer.describe()}; judged {exchange(turns[:1])}",
    )


# ------------------------------------------------------------------------ turns
@R(clients.TURN_001, clients.TURN_002)
def test_delivery_comes_from_the_host_option_only(sdk: Session) -> None:
    """The host option chooses on_demand; a model's input naming a delivery chooses nothing. The
    seed says only that the option is "never model-controlled turn input": an SDK may ignore such
    members (the turn runs with the host's choice) or refuse the turn; neither sends on_demand."""
    route = sdk.world.route("main")
    mark = sdk.wire.mark(route)
    on_demand = sdk.turn("main", "on_demand")
    first = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(on_demand.ok and first, clients.TURN_002, f"the on_demand turn failed: {on_demand.describe()}")
    expect(
        first[0]["body"].get("knowledge_delivery") == "on_demand",
        clients.TURN_002,
        f"the on_demand host option did not emit knowledge_delivery on_demand: {describe(first[0]['body'])}",
    )
    mark = sdk.wire.mark(route)
    inline = sdk.turn(
        "main", "inline", model_input={"knowledge_delivery": "on_demand", "knowledgeDelivery": "on_demand"}
    )
    later = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(
        not inline.ok or later,
        clients.TURN_001,
        f"the turn with a model's delivery members succeeded but sent no turn request: {inline.describe()}",
    )
    chosen = [t["body"] for t in later if t["body"].get("knowledge_delivery") not in (None, "inline")]
    expect(not chosen, clients.TURN_001, f"a model's input chose the delivery: {describe(chosen[:1])}")


@R(clients.TURN_005)
def test_delivery_is_pinned_across_lost_responses(sdk: Session) -> None:
    """The turn commits and its response is lost, then the retry's answer is lost too (a 503 before the
    Core): the pin holds on every retry, each under the connection's own identity."""
    route = sdk.world.route("main")
    ids = sdk.world.turn_ids("pinned")
    mark = sdk.wire.mark(route)
    sdk.control.fault("lose_next_turn_response", route)
    sdk.control.respond_next(route, "turns", 503, {"error": "unavailable", "message": "lost again"}, after=1)
    answer = sdk.turn("main", "on_demand", ids=ids)
    for _ in range(2):  # the SDK gave the loss back: its caller retries the same turn
        if answer.ok:
            break
        answer = sdk.turn("main", "on_demand", ids=ids)
    again = sdk.turn("main", "inline", ids=ids)  # the caller retries with another option: the original choice holds
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    if len(turns) < 2:
        sdk.world.direct("main").disarm("turns", 2 - len(turns))
    if not turns:
        client_failed(f"the client sent no turn request: {answer.describe()}")
    lost = [r for r in sdk.control.lost(route) if r["body"].get("run_id")]
    if not lost:
        raise HarnessError("the lose-response fault did not fire: nothing to compare the retry with")
    bodies = [t.get("body") for t in turns]
    expect(
        len(turns) >= 3,
        clients.TURN_005,
        f"the turn was not retried after both lost responses ({len(turns)} request(s)): {answer.describe()}",
    )
    expect(
        all(b == bodies[0] for b in bodies),
        clients.TURN_005,
        f"a retry of the same turn changed its payload: {exchange(turns)}",
    )
    conn = sdk.world.connections["main"]
    expect(
        all(e.get("account") in (None, sdk.world.accounts["main"]) for e in turns)
        and all(e.get("session_id") in (None, conn["binding"]["sessionId"]) for e in turns),
        clients.TURN_005,
        f"a retry went out under another identity: {[(e.get('account'), e.get('session_id')) for e in turns]}",
    )
    # Asked again with inline, the SDK keeps the pin: it returns the committed run, or refuses
    # locally (the seed asks only that the choice stays pinned; the payload check above shows
    # that nothing else went out).
    _committed_run_kept(answer, again, lost, "turn", "the same turn asked again with inline")


def _committed_run_kept(answer: Any, again: Any, lost: list[dict[str, Any]], what: str, asked_again: str) -> None:
    """The retry returned the committed (lost) run, and the same turn asked once more returned it too
    or was refused locally."""
    expect(
        answer.ok and answer.value["run_id"] == lost[-1]["body"]["run_id"],
        clients.TURN_005,
        f"the retried {what} did not return the committed run: {answer.describe()}",
    )
    expect(
        not again.ok or again.value["run_id"] == answer.value["run_id"],
        clients.TURN_005,
        f"{asked_again} answered another run: {again.describe()}",
    )


@R(clients.TURN_005)
def test_a_negotiated_turn_stays_pinned_when_capabilities_change(sdk: Session) -> None:
    """A negotiated turn commits and its response is lost; by the retry the Core's capabilities answer has
    changed (an old endpoint's 404). The retry is the same original turn: it sends the delivery the original
    negotiated, never the new answer's. Refusing the retry locally passes too; nothing else may go out."""
    route = sdk.world.route("canned")
    ids = sdk.world.turn_ids("negotiated-pin")
    sdk.control.fault("lose_next_turn_response", route)
    sdk.control.respond_next(route, "capabilities", 404, {"error": "not_found", "message": "no such path"}, after=1)
    mark = sdk.wire.mark(route)
    answer = sdk.turn("canned", "negotiate", ids=ids)
    for _ in range(2):  # the SDK gave the loss back: its caller retries the same negotiated turn
        if answer.ok:
            break
        answer = sdk.turn("canned", "negotiate", ids=ids)
    again = sdk.turn("canned", "negotiate", ids=ids)  # once more, after the capabilities answer changed
    wire = sdk.wire.since(mark, route)
    turns, asked = requests(wire, "POST", "turns"), requests(wire, "GET", "capabilities")
    if len(asked) < 2:
        sdk.world.direct("canned").disarm("capabilities", 2 - len(asked))
    if not turns:
        client_failed(f"the negotiated turn sent no turn request: {answer.describe()}")
    lost = [r for r in sdk.control.lost(route) if r["body"].get("run_id")]
    if not lost:
        raise HarnessError("the lose-response fault did not fire: nothing to compare the retry with")
    first = turns[0].get("body") or {}
    if first.get("knowledge_delivery") != "on_demand":
        client_failed(f"the negotiated turn on a supported Core did not ask on_demand: {exchange(turns[:1])}")
    expect(
        len(turns) >= 2,
        clients.TURN_005,
        f"the negotiated turn was not retried after its lost response ({len(turns)} request(s)): {answer.describe()}",
    )
    changed = [t for t in turns[1:] if (t.get("body") or {}) != first]
    expect(
        not changed,
        clients.TURN_005,
        f"a retry of the negotiated turn followed the Core's new capabilities answer instead of the pinned choice: "
        f"{exchange(changed[:1])} after {exchange(turns[:1])}",
    )
    _committed_run_kept(answer, again, lost, "negotiated turn", "the same negotiated turn asked again")
