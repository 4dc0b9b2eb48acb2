"""SDK obligations of seed 000: negotiation, turn delivery, search and read mapping, honest
reads, reference errors, accounts. Each check names the one requirement it saw broken."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from conformance.clients.protocol import Answer
from conformance.clients.rules import (
    NEG_001,
    NEG_002,
    NEG_003,
    NEG_004,
    READ_012,
    READ_017,
    READ_018,
    READ_021,
    REF_010,
    REF_013,
    SRCH_012,
    TURN_001,
    TURN_002,
    TURN_005,
    TURN_009,
    TURN_010,
    TURN_014,
)
from conformance.clients.session import Session, client_failed, exchange, mapped, next_action, requests
from conformance.clients.world import ARCHIVE, HOMEPAGE, QUERIES
from conformance.server.checks import describe
from conformance.target import contract as C
from conformance.target.outcomes import HarnessError
from conformance.target.rules import expect
from knowledge_schemas import load_registry

requirement = pytest.mark.requirement


@pytest.fixture
def sdk(harness: Session) -> Session:
    harness.needs("client")
    return harness


def _capabilities_body(sdk: Session, **changes: Any) -> dict[str, Any]:
    """A capabilities answer of the canned workspace, as the Core gives it, with ``changes`` (None drops a member)."""
    conn = sdk.world.connections["canned"]
    response = httpx.get(
        f"{sdk.world.core_url}/agent-api/v1/workspaces/{conn['route']}/knowledge/capabilities",
        headers={"Authorization": f"Bearer {conn['token']}"},
        timeout=30,
    )
    if response.status_code != 200:
        raise HarnessError(f"the Core's own capabilities answered {response.status_code}")
    body = dict(response.json())
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


# ------------------------------------------------------------------ negotiation
@requirement("NEG-001")
@pytest.mark.parametrize("connection", ["legacy404", "legacy405", "legacy501"])
def test_an_old_endpoint_status_is_not_supported(sdk: Session, connection: str) -> None:
    route = sdk.world.route(connection)
    mark = sdk.wire.mark(route)
    answer = sdk.call("capabilities", connection=connection)
    asked = requests(sdk.wire.since(mark, route), "GET", "capabilities")
    expect(asked, NEG_001, "the client answered capabilities without asking the Core")
    expect(
        answer.ok,
        NEG_001,
        f"a legacy Core's HTTP {asked[-1]['status']} raised instead of supported false: {answer.describe()}",
    )
    expect(
        answer.value["supported"] is False,
        NEG_001,
        f"a legacy Core's HTTP {asked[-1]['status']} gave {answer.describe()}",
    )


# case -> (connection, canned status, canned body): the Core answers, and the client must raise. A 404 with a
# specific code (route_unavailable) is a route failure, not an old endpoint (vendor conventions).
ERRORS: dict[str, tuple[str, int | None, Any]] = {
    "400-invalid-route": ("autoroute", None, None),
    "401-bad-token": ("badtoken", None, None),
    "403-route-not-allowed": ("wrongroute", None, None),
    "404-route-unavailable": ("noroute", None, None),
    "500": ("canned", 500, {"error": "internal_error", "message": "unexpected failure"}),
    "503": ("canned", 503, {"error": "unavailable", "message": "try later"}),
    "unknown-schema-version": ("canned", 200, "v2"),
}


def _capabilities_call(sdk: Session, connection: str, canned: tuple[int, Any] | None) -> tuple[Answer, list[Any]]:
    """The client's capabilities call on ``connection``, the Core answering ``canned`` (status, body) if
    given: the answer and the capabilities requests that reached the wire. A canned answer the client
    never asked for is taken back, so it cannot reach the next check."""
    route = sdk.world.route(connection)
    if canned is not None:
        sdk.control.respond_next(route, "capabilities", *canned)
    mark = sdk.wire.mark(route)
    answer = sdk.call("capabilities", connection=connection)
    asked = requests(sdk.wire.since(mark, route), "GET", "capabilities")
    if not asked and canned is not None:
        sdk.world.direct(connection).disarm("capabilities")
    return answer, asked


@requirement("NEG-001", "NEG-002")
@pytest.mark.parametrize("case", list(ERRORS))
def test_authorization_failures_and_unknown_schemas_stay_errors(sdk: Session, case: str) -> None:
    connection, status, body = ERRORS[case]
    route = sdk.world.route(connection)
    if body == "v2":
        body = _capabilities_body(
            sdk,
            schema_version="bailing.agent-knowledge-capabilities.v2",
            knowledge_schema_version="bailing.agent-knowledge.v2",
        )
    answer, asked = _capabilities_call(sdk, connection, None if status is None else (status, body))
    if not asked:  # answered from a memo, or refused by the client itself
        expect(not answer.ok, NEG_002, f"{case}: a capabilities result came back without a request to the Core")
        client_failed(f"{case}: the client sent no capabilities request to {route} ({answer.describe()})")
    seen = asked[0]["status"]
    what = f"HTTP {seen}" + (" with an unknown schema version" if case == "unknown-schema-version" else "")
    if seen == 404 and answer.ok and answer.value.get("supported") is False and not sdk.strict:
        NEG_001.held()  # the seed names the old statuses only; the vendor's "a 404 with a code is no old Core" is strict
        NEG_002.held()
        return
    expect(not answer.ok, NEG_002, f"{what} became a successful capabilities result: {answer.describe()}")
    NEG_001.held()  # an error, so not `supported: false` either: that answer is a successful result


# case -> changes to a valid capabilities answer (None drops a member): each breaks one condition alone
LIMIT_OUT_OF_BOUND = {
    "search_max_hints": 4,
    "search_max_bytes": 4097,
    "read_default_max_bytes": 16385,
    "read_min_max_bytes": 4095,
    "read_max_max_bytes": 32769,
    "reference_max_bytes": 4097,
    "read_chain_max_bytes": 131073,
    "reference_ttl_seconds": 301,
}
UNSUPPORTED_CAPABILITIES: dict[str, dict[str, Any]] = {
    "no-capabilities-schema": {"schema_version": None},
    "capabilities-schema-v2": {"schema_version": "bailing.agent-knowledge-capabilities.v2"},
    "no-knowledge-schema": {"knowledge_schema_version": None},
    "knowledge-schema-v2": {"knowledge_schema_version": "bailing.agent-knowledge.v2"},
    "another-route": {"route": "ANOTHER"},
    "no-route": {"route": None},
    "modes-without-on-demand": {"delivery_modes": ["inline"]},
    "modes-without-inline": {"delivery_modes": ["on_demand"]},
    "no-modes": {"delivery_modes": None},
    "no-limits": {"limits": None},
    "no-enabled": {"enabled": None},
    **{f"limit-{name}-out-of-bound": {"limits": {name: value}} for name, value in LIMIT_OUT_OF_BOUND.items()},
    **{f"limit-{name}-absent": {"limits": {name: None}} for name in ("search_max_hints", "read_chain_max_bytes")},
}


def _changed_capabilities(sdk: Session, changes: dict[str, Any]) -> dict[str, Any]:
    changes = {k: (sdk.world.routes["elsewhere"] if v == "ANOTHER" else v) for k, v in changes.items()}
    limits = changes.pop("limits", {})
    body = _capabilities_body(sdk, **changes)
    if limits is None:
        body.pop("limits", None)
    else:
        body["limits"] = {k: v for k, v in {**body["limits"], **limits}.items() if v is not None}
    return body


@requirement("NEG-003")
@pytest.mark.parametrize("case", list(UNSUPPORTED_CAPABILITIES))
def test_support_needs_every_condition(sdk: Session, case: str) -> None:
    body = _changed_capabilities(sdk, UNSUPPORTED_CAPABILITIES[case])
    answer, asked = _capabilities_call(sdk, "canned", (200, body))
    if not asked:
        client_failed(f"{case}: the client sent no capabilities request ({answer.describe()})")
    expect(
        not (answer.ok and answer.value["supported"] is True),
        NEG_003,
        f"a capabilities answer with {case.replace('-', ' ')} was taken as supported: {answer.describe()}; "
        f"judged {exchange(asked)}",
    )


@requirement("NEG-003")
def test_enabled_false_is_the_protocol_with_knowledge_disabled(sdk: Session) -> None:
    """ "enabled: false means the protocol exists but knowledge is disabled": supported, and disabled."""
    answer, asked = _capabilities_call(sdk, "canned", (200, _capabilities_body(sdk, enabled=False)))
    if not asked:
        client_failed(f"the client sent no capabilities request ({answer.describe()})")
    expect(
        answer.ok and answer.value["supported"] is True and answer.value.get("enabled") is False,
        NEG_003,
        f"a valid capabilities answer with enabled false was not given back as supported and disabled: "
        f"{answer.describe()}; judged {exchange(asked)}",
    )


# status class -> (status, body): on every call. Only 404/405/501 may become supported false, and only on
# capabilities; a 404 with a specific code may by default (the seed names only the statuses), not under --strict.
STATUSES: dict[str, tuple[int, Any]] = {
    "401": (401, {"error": "unauthorized", "message": "bad token"}),
    "403": (403, {"error": "route_not_allowed", "message": "not this workspace"}),
    "404-plain": (404, {"error": "not_found", "message": "no such path"}),
    "404-coded": (404, {"error": "route_unavailable", "message": "no workspace there"}),
    "405": (405, {"error": "method_not_allowed", "message": "no"}),
    "501": (501, {"error": "not_implemented", "message": "no"}),
    "500": (500, {"error": "internal_error", "message": "unexpected failure"}),
    "502": (502, {"error": "bad_gateway", "message": "upstream"}),
    "503": (503, {"error": "knowledge_unavailable", "message": "try later"}),
    "200-not-json": (200, "TEXT"),
    "500-not-json": (500, "TEXT"),
}


@requirement("NEG-001", "NEG-002", "SRCH-012")
@pytest.mark.parametrize("call", ["capabilities", "search", "read"])
@pytest.mark.parametrize("case", list(STATUSES))
def test_every_status_class_on_every_call(sdk: Session, call: str, case: str) -> None:
    status, body = STATUSES[case]
    route = sdk.world.route("canned")
    inputs: dict[str, Any] = {}
    if call != "capabilities":
        direct = sdk.world.direct("canned")
        run = direct.turn()["run_id"]
        inputs = (
            {"query": "homepage binding", "runId": run}
            if call == "search"
            else {
                "ref": direct.ref(run, "homepage"),
                "runId": run,
            }
        )
    if body == "TEXT":
        sdk.control.respond_next(route, call, status, text="<html>gateway says hello</html>")
    else:
        sdk.control.respond_next(route, call, status, body)
    mark = sdk.wire.mark(route)
    answer = sdk.call(call, connection="canned", **({"input": inputs} if inputs else {}))
    sent = requests(sdk.wire.since(mark, route), "GET" if call == "capabilities" else "POST", call)
    if not sent:
        sdk.world.direct("canned").disarm(call)
        client_failed(f"{call} {case}: the client sent no request ({answer.describe()})")
    judged = f"judged {exchange(sent[:1])}"
    if answer.ok and any(e.get("status") == 200 for e in sent[1:]):
        return  # the client asked again and the Core itself answered: a real result, not the failure's
    if call == "capabilities":
        legacy = case in ("404-plain", "405", "501") or (case == "404-coded" and not sdk.strict)
        if answer.ok and answer.value.get("supported") is False and legacy:
            NEG_001.held()
            NEG_002.held()
            return
        expect(
            not (case in ("404-plain", "405", "501") and answer.ok),
            NEG_001,
            f"an old endpoint's HTTP {status} gave {answer.describe()}; {judged}",
        )
        expect(
            not answer.ok,
            NEG_002,
            f"HTTP {status} ({case}) became a capabilities result: {answer.describe()}; {judged}",
        )
        NEG_001.held()
        return
    rule = SRCH_012 if case == "503" else NEG_002
    expect(
        not answer.ok,
        rule,
        f"a {call} the Core answered HTTP {status} ({case}) was given back as a result: {answer.describe()}; {judged}",
    )


@requirement("NEG-004", "TURN-002")
def test_negotiate_then_on_demand_when_supported(sdk: Session) -> None:
    route = sdk.world.route("main")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("main", "negotiate")
    wire = sdk.wire.since(mark, route)
    expect(answer.ok, NEG_004, f"the negotiated turn failed: {answer.describe()}")
    order = [e for e in wire if e in requests(wire, "GET", "capabilities") + requests(wire, "POST", "turns")]
    expect(
        order and str(order[0]["path"]).endswith("/knowledge/capabilities"),
        NEG_004,
        f"the turn was not preceded by capabilities: {[e['method'] + ' ' + str(e['path']).rsplit('/', 1)[-1] for e in order]}",
    )
    turns = requests(wire, "POST", "turns")
    expect(turns, NEG_004, "no turn reached the Core")
    expect(
        (turns[0].get("body") or {}).get("knowledge_delivery") == "on_demand",
        TURN_002,
        f"a supported Core got a turn without knowledge_delivery on_demand: {describe(turns[0].get('body'))}",
    )


@requirement("NEG-004", "TURN-002")
@pytest.mark.parametrize("connection", ["freshlegacy", "otherhub"])
def test_negotiation_is_per_connection(sdk: Session, connection: str) -> None:
    """What the client learnt on another connection (another workspace, or another Hub's Agent Session
    on the same route) is no negotiation: a negotiated turn asks capabilities for its own connection."""
    sdk.call("capabilities", connection="main")  # a supported Core on another connection, asked first
    route = sdk.world.route(connection)
    mark = sdk.wire.mark(route)
    answer = sdk.turn(connection, "negotiate")
    wire = sdk.wire.since(mark, route)
    session = sdk.world.connections[connection]["binding"]["sessionId"]
    own = [e for e in wire if e.get("session_id") in (None, session)]
    turns, asked = requests(own, "POST", "turns"), requests(own, "GET", "capabilities")
    if not turns:
        client_failed(f"the negotiated turn on {connection} sent no turn ({answer.describe()})")
    first_turn = own.index(turns[0])
    expect(
        any(own.index(a) < first_turn for a in asked),
        NEG_004,
        f"the negotiated turn on {connection} was not preceded by its own capabilities request: "
        f"{answer.describe()}; judged {exchange(own)}",
    )
    delivery = (turns[0].get("body") or {}).get("knowledge_delivery")
    if connection == "freshlegacy":
        expect(delivery is None, NEG_004, f"a legacy Core got knowledge_delivery: {exchange(turns[:1])}")
    else:
        expect(delivery == "on_demand", TURN_002, f"a supported Core got no on_demand: {exchange(turns[:1])}")


@requirement("TURN-002")
def test_on_demand_on_a_connection_that_never_asked_capabilities(sdk: Session) -> None:
    """The host option alone emits on_demand: no capabilities answer of this connection is needed for it."""
    route = sdk.world.route("fresh")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("fresh", "on_demand")
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(turns, TURN_002, f"the on_demand turn sent no turn request: {answer.describe()}")
    expect(
        (turns[0].get("body") or {}).get("knowledge_delivery") == "on_demand",
        TURN_002,
        f"the on_demand host option did not emit knowledge_delivery on a connection that never asked "
        f"capabilities: {answer.describe()}; judged {exchange(turns[:1])}",
    )


@requirement("NEG-004")
def test_a_legacy_core_gets_a_turn_without_knowledge_delivery(sdk: Session) -> None:
    route = sdk.world.route("legacy404")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("legacy404", "negotiate")
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(turns, NEG_004, "no turn reached the legacy Core")
    expect(
        "knowledge_delivery" not in (turns[0].get("body") or {}),
        NEG_004,
        f"a Core that does not support knowledge got knowledge_delivery: {describe(turns[0].get('body'))}",
    )
    expect(answer.ok, NEG_004, f"the turn on a legacy Core failed: {answer.describe()}")


@pytest.mark.parametrize("text", ["homepage binding", QUERIES["archive"]], ids=["short", "long"])
@pytest.mark.parametrize(
    "delivery",
    [pytest.param("inline", marks=requirement("TURN-009")), pytest.param("negotiate", marks=requirement("TURN-010"))],
)
def test_a_legacy_turns_inline_bodies_are_kept(sdk: Session, delivery: str, text: str) -> None:
    """inline: the legacy body is kept (TURN-009); negotiate, where on_demand was asked for locally: it is
    not stripped for that (TURN-010)."""
    rule = TURN_009 if delivery == "inline" else TURN_010
    route = sdk.world.route("legacy404")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("legacy404", delivery, text=text)
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(
        not any("knowledge_delivery" in (t.get("body") or {}) for t in turns),
        NEG_004,
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


@requirement("TURN-010")
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
            TURN_010,
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


@requirement("TURN-014")
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
        TURN_014,
        f"a turn asked {delivery} whose answer carries a knowledge_delivery that does not match the delivery schema "
        f"({case}) was given back as the turn's delivery: {answer.describe()}; judged {exchange(turns[:1])}",
    )


# ------------------------------------------------------------------------ turns
@requirement("TURN-001", "TURN-002")
def test_delivery_comes_from_the_host_option_only(sdk: Session) -> None:
    """The host option chooses on_demand; a model's input naming a delivery chooses nothing. The
    seed says only that the option is "never model-controlled turn input": an SDK may ignore such
    members (the turn runs with the host's choice) or refuse the turn; neither sends on_demand."""
    route = sdk.world.route("main")
    mark = sdk.wire.mark(route)
    on_demand = sdk.turn("main", "on_demand")
    first = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(on_demand.ok and first, TURN_002, f"the on_demand turn failed: {on_demand.describe()}")
    expect(
        first[0]["body"].get("knowledge_delivery") == "on_demand",
        TURN_002,
        f"the on_demand host option did not emit knowledge_delivery on_demand: {describe(first[0]['body'])}",
    )
    mark = sdk.wire.mark(route)
    inline = sdk.turn(
        "main", "inline", model_input={"knowledge_delivery": "on_demand", "knowledgeDelivery": "on_demand"}
    )
    later = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(
        not inline.ok or later,
        TURN_001,
        f"the turn with a model's delivery members succeeded but sent no turn request: {inline.describe()}",
    )
    chosen = [t["body"] for t in later if t["body"].get("knowledge_delivery") not in (None, "inline")]
    expect(not chosen, TURN_001, f"a model's input chose the delivery: {describe(chosen[:1])}")


@requirement("TURN-005")
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
        TURN_005,
        f"the turn was not retried after both lost responses ({len(turns)} request(s)): {answer.describe()}",
    )
    expect(
        all(b == bodies[0] for b in bodies),
        TURN_005,
        f"a retry of the same turn changed its payload: {exchange(turns)}",
    )
    conn = sdk.world.connections["main"]
    expect(
        all(e.get("account") in (None, sdk.world.accounts["main"]) for e in turns)
        and all(e.get("session_id") in (None, conn["binding"]["sessionId"]) for e in turns),
        TURN_005,
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
        TURN_005,
        f"the retried {what} did not return the committed run: {answer.describe()}",
    )
    expect(
        not again.ok or again.value["run_id"] == answer.value["run_id"],
        TURN_005,
        f"{asked_again} answered another run: {again.describe()}",
    )


@requirement("TURN-005")
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
        TURN_005,
        f"the negotiated turn was not retried after its lost response ({len(turns)} request(s)): {answer.describe()}",
    )
    changed = [t for t in turns[1:] if (t.get("body") or {}) != first]
    expect(
        not changed,
        TURN_005,
        f"a retry of the negotiated turn followed the Core's new capabilities answer instead of the pinned choice: "
        f"{exchange(changed[:1])} after {exchange(turns[:1])}",
    )
    _committed_run_kept(answer, again, lost, "negotiated turn", "the same negotiated turn asked again")


# ---------------------------------------------------------------- search / read
def _fresh_ref(sdk: Session, doc: str, connection: str = "main") -> tuple[str, str, str, Any]:
    """``(route, run, ref, mark)`` on ``connection``: a run started and a reference to ``doc``
    found directly on the Core (not through the client), then a mark in the wire transcript.
    Checks that arm canned answers use the canned connection: one left armed harms no other check."""
    route = sdk.world.route(connection)
    direct = sdk.world.direct(connection)
    run = direct.turn()["run_id"]
    ref = direct.ref(run, doc)
    return route, run, ref, sdk.wire.mark(route)


@requirement("READ-018")
def test_run_id_and_max_bytes_map_to_the_wire(sdk: Session) -> None:
    route, run, ref, mark = _fresh_ref(sdk, "archive")
    found = sdk.call("search", connection="main", input={"query": "archive ledger", "runId": run, "limit": 2})
    page = sdk.call("read", connection="main", input={"ref": ref, "runId": run, "maxBytes": 4096})
    wire = sdk.wire.since(mark, route)
    searches, reads = requests(wire, "POST", "search"), requests(wire, "POST", "read")
    expect(
        searches and reads,
        READ_018,
        f"search and read did not both reach the Core: {found.describe()} {page.describe()}",
    )
    s, r = searches[0].get("body") or {}, reads[0].get("body") or {}
    expect(
        s.get("run_id") == run and "runId" not in s,
        READ_018,
        f"runId did not become run_id on the wire: {describe(s)}",
    )
    expect(
        r.get("run_id") == run and "runId" not in r,
        READ_018,
        f"runId did not become run_id on the wire: {describe(r)}",
    )
    expect(
        r.get("max_bytes") == 4096 and "maxBytes" not in r,
        READ_018,
        f"maxBytes did not become max_bytes on the wire: {describe(r)}",
    )
    expect(found.ok and page.ok, READ_018, f"the mapped calls failed: {found.describe()} {page.describe()}")


@requirement("READ-017")
def test_one_read_is_one_page(sdk: Session) -> None:
    route, run, ref, mark = _fresh_ref(sdk, "archive")
    page = sdk.call("read", connection="main", input={"ref": ref, "runId": run, "maxBytes": 4096})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if not (page.ok and page.value["next_cursor"]):
        client_failed(f"the first page of a longer document did not come back with a next_cursor: {page.describe()}")
    expect(
        len(reads) == 1,
        READ_017,
        f"one read of a longer document sent {len(reads)} read requests: pages are followed only when needed",
    )


@requirement("SRCH-012")
@pytest.mark.parametrize("how", ["unavailable-workspace", "unavailable-once", "partial"])
def test_unavailability_is_not_an_empty_corpus(sdk: Session, how: str) -> None:
    # the once-fault has its own route: a fault left armed harms no other check
    connection = {"unavailable-workspace": "unavailable", "unavailable-once": "flaky", "partial": "partial"}[how]
    route = sdk.world.route(connection)
    run = sdk.world.direct(connection).turn()["run_id"]
    if how == "unavailable-once":
        sdk.control.fault("fail_next_search_unavailable", route)
    mark = sdk.wire.mark(route)
    answer = sdk.call("search", connection=connection, input={"query": "homepage binding", "runId": run})
    mapped(requests(sdk.wire.since(mark, route), "POST", "search"))
    expected = "partial" if how == "partial" else "unavailable"
    expect(
        not answer.ok or answer.value["status"] == expected,
        SRCH_012,
        f"a search the Core answered {expected} was given back as {answer.describe()}",
    )


@requirement("READ-018")
@pytest.mark.parametrize("max_bytes", [4095, 4096, 32768, 32769, "4096", 4096.5, None], ids=str)
def test_max_bytes_at_and_past_both_ends(sdk: Session, max_bytes: Any) -> None:
    """In range (4096, 32768 included) maxBytes goes out as max_bytes, exactly; out of range or of the wrong
    JSON type the client may refuse it locally or send it (the Core refuses or clamps), never drop or change
    it into another valid request; ``None``: a read without maxBytes sends no max_bytes."""
    route, run, ref, mark = _fresh_ref(sdk, "archive")
    data: dict[str, Any] = {"ref": ref, "runId": run}
    if max_bytes is not None:
        data["maxBytes"] = max_bytes
    page = sdk.call("read", connection="main", input=data)
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    valid = isinstance(max_bytes, int) and C.READ_MIN_MAX_BYTES <= max_bytes <= C.READ_MAX_MAX_BYTES
    if not reads:
        expect(
            not valid and max_bytes is not None and not page.ok,
            READ_018,
            f"maxBytes {max_bytes!r} sent no read: {page.describe()}",
        )
        return
    body = reads[0].get("body") or {}
    mapped(reads)
    if max_bytes is None:
        expect("max_bytes" not in body, READ_018, f"a read without maxBytes sent one: {exchange(reads[:1])}")
    elif valid:
        expect(
            body.get("max_bytes") == max_bytes and type(body.get("max_bytes")) is int,
            READ_018,
            f"maxBytes {max_bytes} did not reach the wire as max_bytes {max_bytes}: {exchange(reads[:1])}",
        )
        expect(page.ok, READ_018, f"a read with maxBytes {max_bytes} failed: {page.describe()}")
    else:
        expect(
            "max_bytes" in body and (body["max_bytes"] == max_bytes or str(body["max_bytes"]) == str(max_bytes)),
            READ_018,
            f"maxBytes {max_bytes!r} was dropped or changed on the wire (not refused): {exchange(reads[:1])}",
        )


def _claims_full(description: Any) -> bool:
    words = set(re.findall(r"[a-z]+", str(description or "").lower()))
    return bool(words & {"full", "fully", "complete", "completely", "entire", "whole"}) and not (
        words & {"partial", "partially", "incomplete", "not", "truncated", "budget", "stopped"}
    )


@requirement("READ-012", "READ-018")
@pytest.mark.parametrize("max_bytes", [None, 4096, 32768], ids=["default", "smallest", "largest"])
def test_a_budget_exhausted_chain_is_not_a_full_read(sdk: Session, max_bytes: int | None) -> None:
    route, run, ref, mark = _fresh_ref(sdk, "glacier")
    data: dict[str, Any] = {"ref": ref, "runId": run, **({"maxBytes": max_bytes} if max_bytes else {})}
    answer = sdk.call("read_all", connection="main", input=data)
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if max_bytes is not None:
        expect(
            all((e.get("body") or {}).get("max_bytes") == max_bytes for e in reads),
            READ_018,
            f"a chain asked with maxBytes {max_bytes} sent other pages: {exchange(reads)}",
        )
    if not answer.ok:
        client_failed(f"read_all failed, so nothing says how much was read: {answer.describe()}")
    expect(reads, READ_012, "read_all answered without reading")
    value = answer.value
    expect(
        value["complete"] is False,
        READ_012,
        f"a chain over the {C.READ_CHAIN_MAX_BYTES}-byte budget was called complete after {len(reads)} page(s): "
        f"{answer.describe()}; judged {exchange(reads[-1:])}",
    )
    expect(
        value["truncated"] is True,
        READ_012,
        f"a chain stopped by the budget does not stay truncated: {answer.describe()}; judged {exchange(reads[-1:])}",
    )
    expect(
        not _claims_full(value.get("description")),
        READ_012,
        f"a chain stopped by the budget is described as a full read: {value.get('description')!r}",
    )


@requirement("READ-012")
@pytest.mark.parametrize("max_bytes", [4096, 32768], ids=["smallest", "largest"])
def test_a_chain_under_the_budget_reads_the_whole_revision(sdk: Session, max_bytes: int) -> None:
    route, run, ref, mark = _fresh_ref(sdk, "archive")
    answer = sdk.call("read_all", connection="main", input={"ref": ref, "runId": run, "maxBytes": max_bytes})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if not answer.ok:
        client_failed(f"read_all of a document under the budget failed: {answer.describe()}")
    value = answer.value
    expect(
        not value["complete"] or value["content"] == ARCHIVE[1],
        READ_012,
        f"a chain called complete did not read the whole revision ({len(value['content'])} of {len(ARCHIVE[1])} "
        f"characters): {answer.describe()}",
    )


@requirement("READ-021", "READ-012")
@pytest.mark.parametrize("budget", ["budget-exhausted", "no-budget-flag"])
def test_a_last_page_marked_truncated_is_never_complete(sdk: Session, budget: str) -> None:
    """The chain's second page comes back ``truncated: true`` with ``next_cursor: null`` (with
    ``budget_exhausted: true``, as a Core the budget stopped answers, or without the optional flag): the chain
    ended, but "truncated: true means incomplete" (READ-021, and READ-012 for the budget: never a full read).
    A client may refuse such a page; it never answers the chain complete."""
    route, run, ref, _ = _fresh_ref(sdk, "archive", "canned")
    first = sdk.world.direct("canned")._post("/knowledge/read", {"ref": ref, "run_id": run, "max_bytes": 4096})
    if not first.get("next_cursor"):  # the run and the reference are the ones the client obtained
        client_failed(f"the archive read with the client's run and reference gave no first page with a cursor: {first}")
    last: dict[str, Any] = {
        "ref": ref,
        "revision": first["revision"],
        "content": "Archive ledger entry: the last page the Core sent.",
        "next_cursor": None,
        "truncated": True,
        "trust": "reference_only",
        **({"budget_exhausted": True} if budget == "budget-exhausted" else {}),
    }
    if "schema_version" in first:
        last["schema_version"] = first["schema_version"]
    sdk.control.respond_next(route, "read", 200, last, after=1)
    mark = sdk.wire.mark(route)
    answer = sdk.call("read_all", connection="canned", input={"ref": ref, "runId": run, "maxBytes": 4096})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if len(reads) < 2:
        sdk.world.direct("canned").disarm("read", 2 - len(reads))
        client_failed(f"read_all did not reach the chain's second page: {answer.describe()}")
    rule = READ_012 if budget == "budget-exhausted" else READ_021
    if not answer.ok:
        rule.held()  # the client refused the page: nothing was called complete
        return
    value = answer.value
    expect(
        value["complete"] is False and value["truncated"] is True,
        rule,
        f"a chain whose last page says truncated true (next_cursor null, {budget.replace('-', ' ')}) was answered "
        f"complete {value['complete']}, truncated {value['truncated']}: {answer.describe()}; judged {exchange(reads[1:2])}",
    )
    expect(
        not _claims_full(value.get("description")),
        rule,
        f"a chain whose last page says truncated true is described as a full read: {value.get('description')!r}",
    )


# family -> (status, body) of a reference error that breaks a chain after its first page
CHAIN_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "expired": (410, {"error": "knowledge_reference_expired", "message": "expired"}),
    "invalid": (400, {"error": "knowledge_reference_invalid", "message": "invalid"}),
    "revision-changed": (409, {"error": "knowledge_revision_changed", "message": "changed"}),
    "scope-changed": (409, {"error": "knowledge_scope_changed", "message": "changed"}),
    "binding-mismatch": (403, {"error": "knowledge_reference_mismatch", "message": "another binding"}),
}


@requirement("REF-013")
@pytest.mark.parametrize("family", list(CHAIN_ERRORS))
def test_a_chain_broken_by_a_reference_error_says_search_again(sdk: Session, family: str) -> None:
    """read_all stops on the error: it answers the error (next_action search_knowledge), or what it read
    with complete false and that error in ``error``; it never replays the read or a turn."""
    route, run, ref, _ = _fresh_ref(sdk, "archive", "canned")
    status, body = CHAIN_ERRORS[family]
    sdk.control.respond_next(route, "read", status, body, after=1)
    mark = sdk.wire.mark(route)
    answer = sdk.call("read_all", connection="canned", input={"ref": ref, "runId": run, "maxBytes": 4096})
    wire = sdk.wire.since(mark, route)
    reads, turns = requests(wire, "POST", "read"), requests(wire, "POST", "turns")
    mapped(reads)
    if len(reads) < 2:
        sdk.world.direct("canned").disarm("read", 2 - len(reads))
        client_failed(f"read_all did not reach the chain's second page: {answer.describe()}")
    stopped = answer.error if not answer.ok else answer.value.get("error")
    action = next_action(answer) if not answer.ok else (stopped or {}).get("next_action")
    expect(
        not answer.ok or answer.value["complete"] is False,
        REF_013,
        f"a chain broken by {body['error']} was called complete: {answer.describe()}",
    )
    expect(
        action == "search_knowledge",
        REF_013,
        f"a chain broken by {body['error']} does not say to search again (next_action {action!r}): "
        f"{answer.describe()}; judged {exchange(reads[1:2])}",
    )
    expect(
        len(reads) == 2 and not turns,
        REF_013,
        f"after the reference error the chain replayed: {len(reads)} read(s), {len(turns)} turn(s)",
    )


@requirement("SRCH-012")
@pytest.mark.parametrize("where", ["read", "chain"])
def test_an_unavailable_read_is_not_an_empty_page(sdk: Session, where: str) -> None:
    route, run, ref, _ = _fresh_ref(sdk, "archive", "canned")
    body = {"error": "knowledge_unavailable", "message": "try later"}
    sdk.control.respond_next(route, "read", 503, body, after=0 if where == "read" else 1)
    mark = sdk.wire.mark(route)
    cmd = "read" if where == "read" else "read_all"
    answer = sdk.call(cmd, connection="canned", input={"ref": ref, "runId": run, "maxBytes": 4096})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if len(reads) < (1 if where == "read" else 2):
        sdk.world.direct("canned").disarm("read", (1 if where == "read" else 2) - len(reads))
        client_failed(f"the {cmd} did not reach the page that answers 503: {answer.describe()}")
    failed_at = next((i for i, e in enumerate(reads) if e.get("status") == 503), len(reads))
    if (
        answer.ok
        and any(e.get("status") == 200 for e in reads[failed_at + 1 :])
        and (where == "read" or len(reads) > failed_at + 1)
    ):
        if where == "read" or answer.value["complete"] is False or answer.value["content"] == ARCHIVE[1]:
            SRCH_012.held()  # the client read the page again and the Core itself answered it
            return
    expect(
        not answer.ok or (where == "chain" and answer.value["complete"] is False),
        SRCH_012,
        f"a {cmd} the Core answered 503 unavailable was given back as a result: {answer.describe()}; "
        f"judged {exchange([e for e in reads if e.get('status') == 503][:1])}",
    )


@requirement("REF-013")
@pytest.mark.parametrize("what", ["reference", "cursor-mid-chain"])
def test_after_a_reference_error_search_again(sdk: Session, what: str) -> None:
    route = sdk.world.route("expiry")
    direct = sdk.world.direct("expiry")
    run = direct.turn()["run_id"]
    read: dict[str, Any] = {"ref": direct.ref(run, "homepage" if what == "reference" else "archive"), "runId": run}
    if what == "cursor-mid-chain":  # the chain's first page, then the references expire before the next
        before = sdk.wire.mark(route)
        first = sdk.call("read", connection="expiry", input={**read, "maxBytes": 4096})
        mapped(requests(sdk.wire.since(before, route), "POST", "read"))
        if not (first.ok and first.value["next_cursor"]):
            client_failed(f"the first page of a chain did not come back with a next_cursor: {first.describe()}")
        read = {**read, "maxBytes": 4096, "cursor": first.value["next_cursor"]}
    sdk.control.advance(301, route)
    mark = sdk.wire.mark(route)
    answer = sdk.call("read", connection="expiry", input=read)
    after = sdk.wire.since(mark, route)
    found = sdk.call("search", connection="expiry", input={"query": "homepage binding", "runId": run})
    reads, turns = requests(after, "POST", "read"), requests(after, "POST", "turns")
    mapped(reads + requests(sdk.wire.since(mark, route), "POST", "search"))
    expect(not answer.ok, REF_013, f"an expired {what} was given back as a result: {answer.describe()}")
    expect(
        next_action(answer) == "search_knowledge",
        REF_013,
        f"the reference error does not say to search again (next_action {next_action(answer)!r}): {answer.describe()}",
    )
    expect(
        len(reads) == 1 and not turns,
        REF_013,
        f"after the reference error the client replayed: {len(reads)} read(s), {len(turns)} turn(s)",
    )
    expect(found.ok, REF_013, f"searching again on the same target failed: {found.describe()}")


@requirement("REF-010")
def test_no_reference_moves_to_another_account(sdk: Session) -> None:
    route = sdk.world.route("main")
    mine = sdk.turn("main", "inline")
    theirs = sdk.turn("other", "inline")
    if not (mine.ok and theirs.ok):
        client_failed(f"the client's turns failed: {mine.describe()} {theirs.describe()}")
    mark = sdk.wire.mark(route)
    a = sdk.call("search", connection="main", input={"query": "homepage binding", "runId": mine.value["run_id"]})
    b = sdk.call("search", connection="other", input={"query": "homepage binding", "runId": theirs.value["run_id"]})
    a_refs = {h["ref"] for h in a.value["hints"]} if a.ok else set()
    b_refs = [h["ref"] for h in b.value["hints"]] if b.ok else []
    for ref in b_refs[:1]:
        sdk.call("read", connection="other", input={"ref": ref, "runId": theirs.value["run_id"]})
    wire = sdk.wire.since(mark, route)
    mapped(requests(wire, "POST", "search") + requests(wire, "POST", "read"))
    bob = sdk.world.accounts["other"]
    searches = [e for e in requests(wire, "POST", "search") if e.get("account") == bob]
    expect(
        searches,
        REF_010,
        "the other account's search never reached the Core under its own account (a cached answer?)",
    )
    expect(not (a_refs & set(b_refs)), REF_010, "the other account was given a reference the first account received")
    moved = [
        e
        for e in requests(wire, "POST", "read")
        if e.get("account") == bob and (e.get("body") or {}).get("ref") in a_refs
    ]
    expect(not moved, REF_010, "a reference of one account was sent under another account")
