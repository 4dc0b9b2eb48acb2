"""SDK negotiation (seed 000): an old endpoint's status is ``supported: false``, any other failure
or an unknown schema stays an error, support needs every condition of the capabilities answer,
each connection negotiates for itself, and a negotiated turn asks on_demand only of a Core that
supports it. Each check names the one requirement it saw broken."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.clients import rules as clients
from conformance.clients.protocol import Answer
from conformance.clients.session import Session, client_failed, exchange, requests
from conformance.common.outcomes import HarnessError
from conformance.common.rules import expect
from conformance.server.checks import describe

R = pytest.mark.requirement


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
@R(clients.NEG_001)
@pytest.mark.parametrize("connection", ["legacy404", "legacy405", "legacy501"])
def test_an_old_endpoint_status_is_not_supported(sdk: Session, connection: str) -> None:
    route = sdk.world.route(connection)
    mark = sdk.wire.mark(route)
    answer = sdk.call("capabilities", connection=connection)
    asked = requests(sdk.wire.since(mark, route), "GET", "capabilities")
    expect(asked, clients.NEG_001, "the client answered capabilities without asking the Core")
    expect(
        answer.ok,
        clients.NEG_001,
        f"a legacy Core's HTTP {asked[-1]['status']} raised instead of supported false: {answer.describe()}",
    )
    expect(
        answer.value["supported"] is False,
        clients.NEG_001,
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


@R(clients.NEG_001, clients.NEG_002)
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
        expect(not answer.ok, clients.NEG_002, f"{case}: a capabilities result came back without a request to the Core")
        client_failed(f"{case}: the client sent no capabilities request to {route} ({answer.describe()})")
    seen = asked[0]["status"]
    what = f"HTTP {seen}" + (" with an unknown schema version" if case == "unknown-schema-version" else "")
    if seen == 404 and answer.ok and answer.value.get("supported") is False and not sdk.strict:
        clients.NEG_001.held()  # the seed names the old statuses only; the vendor's "a 404 with a code is no old Core" is strict
        clients.NEG_002.held()
        return
    expect(not answer.ok, clients.NEG_002, f"{what} became a successful capabilities result: {answer.describe()}")
    clients.NEG_001.held()  # an error, so not `supported: false` either: that answer is a successful result


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


@R(clients.NEG_003)
@pytest.mark.parametrize("case", list(UNSUPPORTED_CAPABILITIES))
def test_support_needs_every_condition(sdk: Session, case: str) -> None:
    body = _changed_capabilities(sdk, UNSUPPORTED_CAPABILITIES[case])
    answer, asked = _capabilities_call(sdk, "canned", (200, body))
    if not asked:
        client_failed(f"{case}: the client sent no capabilities request ({answer.describe()})")
    expect(
        not (answer.ok and answer.value["supported"] is True),
        clients.NEG_003,
        f"a capabilities answer with {case.replace('-', ' ')} was taken as supported: {answer.describe()}; "
        f"judged {exchange(asked)}",
    )


@R(clients.NEG_003)
def test_enabled_false_is_the_protocol_with_knowledge_disabled(sdk: Session) -> None:
    """ "enabled: false means the protocol exists but knowledge is disabled": supported, and disabled."""
    answer, asked = _capabilities_call(sdk, "canned", (200, _capabilities_body(sdk, enabled=False)))
    if not asked:
        client_failed(f"the client sent no capabilities request ({answer.describe()})")
    expect(
        answer.ok and answer.value["supported"] is True and answer.value.get("enabled") is False,
        clients.NEG_003,
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


@R(clients.NEG_001, clients.NEG_002, clients.SRCH_012)
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
            clients.NEG_001.held()
            clients.NEG_002.held()
            return
        expect(
            not (case in ("404-plain", "405", "501") and answer.ok),
            clients.NEG_001,
            f"an old endpoint's HTTP {status} gave {answer.describe()}; {judged}",
        )
        expect(
            not answer.ok,
            clients.NEG_002,
            f"HTTP {status} ({case}) became a capabilities result: {answer.describe()}; {judged}",
        )
        clients.NEG_001.held()
        return
    rule = clients.SRCH_012 if case == "503" else clients.NEG_002
    expect(
        not answer.ok,
        rule,
        f"a {call} the Core answered HTTP {status} ({case}) was given back as a result: {answer.describe()}; {judged}",
    )


@R(clients.NEG_004, clients.TURN_002)
def test_negotiate_then_on_demand_when_supported(sdk: Session) -> None:
    route = sdk.world.route("main")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("main", "negotiate")
    wire = sdk.wire.since(mark, route)
    expect(answer.ok, clients.NEG_004, f"the negotiated turn failed: {answer.describe()}")
    order = [e for e in wire if e in requests(wire, "GET", "capabilities") + requests(wire, "POST", "turns")]
    expect(
        order and str(order[0]["path"]).endswith("/knowledge/capabilities"),
        clients.NEG_004,
        f"the turn was not preceded by capabilities: {[e['method'] + ' ' + str(e['path']).rsplit('/', 1)[-1] for e in order]}",
    )
    turns = requests(wire, "POST", "turns")
    expect(turns, clients.NEG_004, "no turn reached the Core")
    expect(
        (turns[0].get("body") or {}).get("knowledge_delivery") == "on_demand",
        clients.TURN_002,
        f"a supported Core got a turn without knowledge_delivery on_demand: {describe(turns[0].get('body'))}",
    )


@R(clients.NEG_004, clients.TURN_002)
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
        clients.NEG_004,
        f"the negotiated turn on {connection} was not preceded by its own capabilities request: "
        f"{answer.describe()}; judged {exchange(own)}",
    )
    delivery = (turns[0].get("body") or {}).get("knowledge_delivery")
    if connection == "freshlegacy":
        expect(delivery is None, clients.NEG_004, f"a legacy Core got knowledge_delivery: {exchange(turns[:1])}")
    else:
        expect(delivery == "on_demand", clients.TURN_002, f"a supported Core got no on_demand: {exchange(turns[:1])}")


@R(clients.TURN_002)
def test_on_demand_on_a_connection_that_never_asked_capabilities(sdk: Session) -> None:
    """The host option alone emits on_demand: no capabilities answer of this connection is needed for it."""
    route = sdk.world.route("fresh")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("fresh", "on_demand")
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(turns, clients.TURN_002, f"the on_demand turn sent no turn request: {answer.describe()}")
    expect(
        (turns[0].get("body") or {}).get("knowledge_delivery") == "on_demand",
        clients.TURN_002,
        f"the on_demand host option did not emit knowledge_delivery on a connection that never asked "
        f"capabilities: {answer.describe()}; judged {exchange(turns[:1])}",
    )


@R(clients.NEG_004)
def test_a_legacy_core_gets_a_turn_without_knowledge_delivery(sdk: Session) -> None:
    route = sdk.world.route("legacy404")
    mark = sdk.wire.mark(route)
    answer = sdk.turn("legacy404", "negotiate")
    turns = requests(sdk.wire.since(mark, route), "POST", "turns")
    expect(turns, clients.NEG_004, "no turn reached the legacy Core")
    expect(
        "knowledge_delivery" not in (turns[0].get("body") or {}),
        clients.NEG_004,
        f"a Core that does not support knowledge got knowledge_delivery: {describe(turns[0].get('body'))}",
    )
    expect(answer.ok, clients.NEG_004, f"the turn on a legacy Core failed: {answer.describe()}")
