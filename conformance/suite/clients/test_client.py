"""SDK obligations of seed 000: negotiation, turn delivery, search and read mapping, honest
reads, reference errors, accounts. Each check names the one requirement it saw broken."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.clients.rules import (
    NEG_001,
    NEG_002,
    NEG_003,
    NEG_004,
    READ_012,
    READ_017,
    READ_018,
    REF_010,
    REF_013,
    SRCH_012,
    TURN_001,
    TURN_002,
    TURN_005,
    TURN_009,
    TURN_010,
)
from conformance.clients.session import Session, client_failed, mapped, next_action, requests
from conformance.server.checks import describe
from conformance.target import contract as C
from conformance.target.outcomes import HarnessError
from conformance.target.rules import expect

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
    if status is not None:
        sdk.control.respond_next(route, "capabilities", status, body)
    mark = sdk.wire.mark(route)
    answer = sdk.call("capabilities", connection=connection)
    asked = requests(sdk.wire.since(mark, route), "GET", "capabilities")
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


@requirement("NEG-003")
@pytest.mark.parametrize("case", ["another-route", "no-on-demand-mode", "no-knowledge-schema", "no-limits"])
def test_support_needs_every_condition(sdk: Session, case: str) -> None:
    route = sdk.world.route("canned")
    variants: dict[str, dict[str, Any]] = {
        "another-route": {"route": sdk.world.routes["elsewhere"]},
        "no-on-demand-mode": {"delivery_modes": ["inline"]},
        "no-knowledge-schema": {"knowledge_schema_version": None},
        "no-limits": {"limits": None},
    }
    changes = variants[case]
    sdk.control.respond_next(route, "capabilities", 200, _capabilities_body(sdk, **changes))
    answer = sdk.call("capabilities", connection="canned")
    expect(
        not (answer.ok and answer.value["supported"] is True),
        NEG_003,
        f"a capabilities answer with {case.replace('-', ' ')} was taken as supported: {answer.describe()}",
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


@pytest.mark.parametrize(
    "delivery",
    [pytest.param("inline", marks=requirement("TURN-009")), pytest.param("negotiate", marks=requirement("TURN-010"))],
)
def test_a_legacy_turns_inline_bodies_are_kept(sdk: Session, delivery: str) -> None:
    """inline: the legacy body is kept (TURN-009); negotiate, where on_demand was asked for locally: it is
    not stripped for that (TURN-010)."""
    rule = TURN_009 if delivery == "inline" else TURN_010
    route = sdk.world.route("legacy404")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("legacy404", delivery)
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
def test_delivery_is_pinned_across_a_lost_response(sdk: Session) -> None:
    route = sdk.world.route("main")
    ids = sdk.world.turn_ids("pinned")
    mark = sdk.wire.mark(route)
    sdk.control.fault("lose_next_turn_response", route)
    answer = sdk.turn("main", "on_demand", ids=ids)
    if not answer.ok:  # the SDK gave the loss back: its caller retries the same turn
        answer = sdk.turn("main", "on_demand", ids=ids)
    again = sdk.turn("main", "inline", ids=ids)  # the caller retries with another option: the original choice holds
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    lost = [r for r in sdk.control.lost(route) if r["body"].get("run_id")]
    if not lost:
        raise HarnessError("the lose-response fault did not fire: nothing to compare the retry with")
    bodies = [t.get("body") for t in turns]
    expect(len(turns) >= 2, TURN_005, f"the turn was not retried after its response was lost ({len(turns)} request(s))")
    expect(
        all(b == bodies[0] for b in bodies),
        TURN_005,
        f"a retry of the same turn changed its payload: {[describe(b) for b in bodies]}",
    )
    expect(
        answer.ok and answer.value["run_id"] == lost[-1]["body"]["run_id"],
        TURN_005,
        f"the retried turn did not return the committed run: {answer.describe()}",
    )
    # Asked again with inline, the SDK keeps the pin: it returns the committed run, or refuses
    # locally (the seed asks only that the choice stays pinned; the payload check above shows
    # that nothing else went out).
    expect(
        not again.ok or again.value["run_id"] == answer.value["run_id"],
        TURN_005,
        f"the same turn asked again with inline answered another run: {again.describe()}",
    )


# ---------------------------------------------------------------- search / read
def _fresh_ref(sdk: Session, doc: str) -> tuple[str, str, str, Any]:
    """``(route, run, ref, mark)`` on the main connection: a run started and a reference to ``doc``
    found directly on the Core (not through the client), then a mark in the wire transcript."""
    route = sdk.world.route("main")
    direct = sdk.world.direct("main")
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


@requirement("READ-012")
def test_a_budget_exhausted_chain_is_not_a_full_read(sdk: Session) -> None:
    route, run, ref, mark = _fresh_ref(sdk, "glacier")
    answer = sdk.call("read_all", connection="main", input={"ref": ref, "runId": run})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if not answer.ok:
        client_failed(f"read_all failed, so nothing says how much was read: {answer.describe()}")
    expect(reads, READ_012, "read_all answered without reading")
    expect(
        answer.value["complete"] is False,
        READ_012,
        f"a chain over the {C.READ_CHAIN_MAX_BYTES}-byte budget was called complete after {len(reads)} page(s): {answer.describe()}",
    )
    expect(
        answer.value["budget_exhausted"] is True or answer.value["truncated"] is True,
        READ_012,
        f"a chain stopped by the budget says neither budget_exhausted nor truncated: {answer.describe()}",
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
