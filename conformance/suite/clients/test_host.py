"""Host transport obligations of seed 000: three calls with snake-case aliases and explicit
options, the binding checked before and after the request, and no model argument choosing
identity, route, connection or run."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.clients import rules as clients
from conformance.clients.protocol import Answer
from conformance.clients.session import Session, client_failed, exchange, hints, mapped, requests
from conformance.common.outcomes import NotVerified
from conformance.common.rules import expect
from conformance.server.checks import describe

R = pytest.mark.requirement


@pytest.fixture
def host(harness: Session) -> Session:
    harness.needs("host")
    return harness


def _current_run(host: Session, connection: str) -> str:
    """Start the authorized user turn: the host's reads bind its run."""
    answer = host.turn(connection, "on_demand")
    if not answer.ok:
        client_failed(f"the host's turn failed: {answer.describe()}")
    return str(answer.value["run_id"])


def _changed(binding: dict[str, Any]) -> dict[str, Any]:
    return {**binding, "sessionId": "00000000-0000-4000-8000-00000000beef"}


@R(clients.HOST_001, clients.HOST_003)
def test_three_calls_on_the_explicit_connection(host: Session) -> None:
    route = host.world.route("host")
    run = _current_run(host, "host")
    mark = host.wire.mark(route)
    caps = host.host("getKnowledgeCapabilities", {}, "host")
    found = host.host("searchKnowledge", {"query": "homepage binding", "limit": 3}, "host")
    expect(
        caps.ok and caps.value["supported"] is True, clients.HOST_001, f"getKnowledgeCapabilities: {caps.describe()}"
    )
    mapped(requests(host.wire.since(mark, route), "POST", "search"))
    expect(found.ok, clients.HOST_001, f"searchKnowledge: {found.describe()}")
    page = host.host("readKnowledge", {"ref": hints(host, found, mark, route)[0]["ref"]}, "host")
    expect(page.ok, clients.HOST_001, f"readKnowledge: {page.describe()}")
    wire = host.wire.since(mark, route)
    calls = {"capabilities": ("GET", "capabilities"), "search": ("POST", "search"), "read": ("POST", "read")}
    each = {name: requests(wire, method, endpoint) for name, (method, endpoint) in calls.items()}
    missing = sorted(name for name, found in each.items() if not found)
    expect(
        not missing,
        clients.HOST_001,
        f"the host calls sent no {', '.join(missing)} request to the connection's workspace",
    )
    sent = [
        e for found in each.values() for e in found
    ]  # more than one each (a host may ask capabilities again) is fine
    alice = host.world.accounts["host"]
    expect(
        all(e.get("account") == alice for e in sent),
        clients.HOST_003,
        "a call went out under another identity than its connection's",
    )
    runs = {(e.get("body") or {}).get("run_id") for e in sent if e["method"] == "POST"}
    expect(
        runs == {run},
        clients.HOST_003,
        f"the reads did not bind the connection's current run {run}: {sorted(map(str, runs))}",
    )


@R(clients.HOST_002)
def test_inputs_accept_snake_case_aliases(host: Session) -> None:
    route = host.world.route("host")
    _current_run(host, "host")
    mark = host.wire.mark(route)
    ref = hints(host, host.host("searchKnowledge", {"query": "archive ledger"}, "host"), mark, route)[0]["ref"]
    mark = host.wire.mark(route)
    page = host.host("readKnowledge", {"ref": ref, "max_bytes": 4096}, "host")
    reads = requests(host.wire.since(mark, route), "POST", "read")
    expect(page.ok and reads, clients.HOST_002, f"readKnowledge with max_bytes failed: {page.describe()}")
    expect(
        (reads[0].get("body") or {}).get("max_bytes") == 4096,
        clients.HOST_002,
        f"the max_bytes alias did not reach the wire: {describe(reads[0].get('body'))}",
    )


@R(clients.HOST_002)
@pytest.mark.parametrize("spellings", ["agreeing", "conflicting"])
def test_both_alias_spellings_in_one_call(host: Session, spellings: str) -> None:
    """maxBytes and max_bytes together: agreeing, the call runs with that value; conflicting, the host
    refuses the input or sends one of the two values, never both names or another value."""
    route = host.world.route("host")
    _current_run(host, "host")
    mark = host.wire.mark(route)
    ref = hints(host, host.host("searchKnowledge", {"query": "archive ledger"}, "host"), mark, route)[0]["ref"]
    other = 4096 if spellings == "agreeing" else 8192
    mark = host.wire.mark(route)
    page = host.host("readKnowledge", {"ref": ref, "maxBytes": 4096, "max_bytes": other}, "host")
    reads = requests(host.wire.since(mark, route), "POST", "read")
    body = (reads[0].get("body") or {}) if reads else {}
    if spellings == "agreeing":
        expect(
            page.ok and reads and body.get("max_bytes") == 4096,
            clients.HOST_002,
            f"readKnowledge with agreeing maxBytes and max_bytes did not read with 4096: {page.describe()}; "
            f"judged {exchange(reads[:1])}",
        )
    else:
        expect(
            (not reads and not page.ok) or body.get("max_bytes") in (4096, 8192),
            clients.HOST_002,
            f"conflicting maxBytes and max_bytes neither refused nor one of them on the wire: {page.describe()}; "
            f"judged {exchange(reads[:1])}",
        )
    expect("maxBytes" not in body, clients.HOST_002, f"an alias went out as given: {exchange(reads[:1])}")


@R(clients.HOST_003)
def test_the_connection_key_chooses_the_identity(host: Session) -> None:
    route = host.world.route("host")
    _current_run(host, "host2")
    mark = host.wire.mark(route)
    found = host.host("searchKnowledge", {"query": "billing notes"}, "host2")
    sent = requests(host.wire.since(mark, route), "POST", "search")
    mapped(sent)
    expect(found.ok and sent, clients.HOST_003, f"a search on the second connection failed: {found.describe()}")
    expect(
        all(e.get("account") == host.world.accounts["host2"] for e in sent),
        clients.HOST_003,
        "the call went out under another connection than its connectionKey",
    )


@R(clients.HOST_003)
@pytest.mark.parametrize("call", ["getKnowledgeCapabilities", "searchKnowledge", "readKnowledge"])
def test_the_explicit_workspace_is_the_one_used(host: Session, call: str) -> None:
    """Options name the workspace explicitly: a call whose ``workspace`` is another one than its
    connection's (binding and connection unchanged) never acts on the connection's own workspace.
    The host refuses it, or sends it to the workspace it names (where this connection's token is
    refused); a success on the connection's workspace ignored the option."""
    route = host.world.route("host")
    _current_run(host, "host")
    data = _call_input(host, call)
    mark = host.wire.mark(route)
    answer = host.host(call, data, "host", workspace=host.world.routes["elsewhere"])
    sent = host.wire.since(mark, route)
    expect(
        not sent and not answer.ok,
        clients.HOST_003,
        f"{call} whose options name workspace {host.world.routes['elsewhere']!r} answered {answer.describe()} "
        f"and acted on the connection's own workspace {route!r}: judged {exchange(sent[:1])}",
    )


@R(clients.HOST_003)
def test_a_cancelled_signal_sends_nothing(host: Session) -> None:
    route = host.world.route("host")
    _current_run(host, "host")
    signal = f"abort-{host.world.run}"
    host.call("cancel", signal=signal)
    mark = host.wire.mark(route)
    answer = host.host("searchKnowledge", {"query": "homepage binding"}, "host", signal=signal)
    sent = host.wire.since(mark, route)
    expect(
        not answer.ok and answer.kind == "cancelled",
        clients.HOST_003,
        f"a call with an aborted signal answered {answer.describe()}",
    )
    expect(not sent, clients.HOST_003, f"a call with an aborted signal still sent {len(sent)} request(s)")


@R(clients.HOST_003)
@pytest.mark.parametrize("call", ["getKnowledgeCapabilities", "searchKnowledge", "readKnowledge"])
def test_a_signal_aborted_in_flight_withholds_the_result(host: Session, call: str) -> None:
    """The harness aborts the signal once the call's request has gone out (``cancel`` with
    ``when: during_next_request``): a host that honours its signal only before sending returns a
    result the caller gave up on. Any refusal passes (``cancelled``, or the error the request
    itself met): only a returned result fails. A harness that cannot abort during a request (it answers the
    cancel with an error, or aborts at once so nothing is sent) leaves this not verified."""
    route = host.world.route("host")
    _current_run(host, "host")
    data = _call_input(host, call)
    signal = f"in-flight-{call}-{host.world.run}"
    armed = host.call("cancel", signal=signal, when="during_next_request")
    if not armed.ok:
        raise NotVerified(f"not verified: the harness cannot abort a signal during a request: {armed.describe()}")
    mark = host.wire.mark(route)
    answer = host.host(call, data, "host", signal=signal)
    sent = host.wire.since(mark, route)
    if not sent:
        raise NotVerified(f"not verified: no request went out before the signal was aborted ({answer.describe()})")
    expect(
        not answer.ok,
        clients.HOST_003,
        f"{call} whose signal was aborted while its request was in flight returned its result "
        f"{answer.describe()}: the cancellation signal must withhold it; judged {exchange(sent[:1])}",
    )


DIMENSIONS = ["hubUrl", "clientAppId", "sessionId", "workspace", "connection"]
CALLS = ["getKnowledgeCapabilities", "searchKnowledge", "readKnowledge"]


def _changed_in(host: Session, binding: dict[str, Any], dimension: str) -> dict[str, Any]:
    """The binding with one dimension changed alone (``connection``: another connection's binding)."""
    if dimension == "connection":
        return dict(host.world.connections["host2"]["binding"])
    if dimension == "sessionId":
        return _changed(binding)
    value = {
        "hubUrl": "https://hub-b.example",
        "clientAppId": "another-client-app",
        "workspace": host.world.routes["elsewhere"],
    }
    return {**binding, dimension: value[dimension]}


def _call_input(host: Session, call: str) -> dict[str, Any]:
    if call == "getKnowledgeCapabilities":
        return {}
    if call == "searchKnowledge":
        return {"query": "homepage binding"}
    route = host.world.route("host")
    mark = host.wire.mark(route)
    return {
        "ref": hints(host, host.host("searchKnowledge", {"query": "homepage binding"}, "host"), mark, route)[0]["ref"]
    }


@R(clients.HOST_004)
@pytest.mark.parametrize("dimension", DIMENSIONS)
@pytest.mark.parametrize("call", CALLS)
def test_the_binding_is_checked_before_the_request(host: Session, call: str, dimension: str) -> None:
    route = host.world.route("host")
    _current_run(host, "host")
    data = _call_input(host, call)
    binding = host.world.connections["host"]["binding"]
    mark = host.wire.mark(route)
    answer = host.host(call, data, "host", binding=_changed_in(host, binding, dimension))
    sent = host.wire.since(mark, route)
    expect(
        not answer.ok and answer.kind == "binding_changed",
        clients.HOST_004,
        f"{call} whose expectedBinding differs in {dimension} answered {answer.describe()}",
    )
    expect(not sent, clients.HOST_004, f"{call} with another {dimension} still sent: {exchange(sent)}")


ENDPOINT_OF = {"getKnowledgeCapabilities": "capabilities", "searchKnowledge": "search", "readKnowledge": "read"}


def _rebound_during(
    host: Session, call: str, dimension: str, *, answered: tuple[int, dict[str, Any]] | None = None
) -> tuple[Answer, list[dict[str, Any]]]:
    """``call`` while the connection's binding changes in ``dimension`` during its request (the Core
    answering ``answered``, a canned status and body, when given): its answer and what it sent. A
    call that sends nothing never had its binding changed underneath it: the client's failure."""
    route = host.world.route("host")
    _current_run(host, "host")
    data = _call_input(host, call)
    binding = host.world.connections["host"]["binding"]
    if answered is not None:
        host.control.respond_next(route, ENDPOINT_OF[call], *answered)
    host.call("rebind", connection="host", binding=_changed_in(host, binding, dimension), when="during_next_request")
    mark = host.wire.mark(route)
    try:
        answer = host.host(call, data, "host")
        sent = host.wire.since(mark, route)
    finally:
        host.call("rebind", connection="host", binding=binding, when="now")
    if not sent:
        client_failed(
            f"the host's {call} sent no request, so its binding never changed underneath it: {answer.describe()}"
        )
    return answer, sent


@R(clients.HOST_004)
@pytest.mark.parametrize("dimension", DIMENSIONS)
@pytest.mark.parametrize("call", CALLS)
def test_the_binding_is_checked_again_after_the_request(host: Session, call: str, dimension: str) -> None:
    answer, sent = _rebound_during(host, call, dimension)
    mapped(requests(sent, "POST", "search") + requests(sent, "POST", "read"))
    expect(
        not answer.ok and answer.kind == "binding_changed",
        clients.HOST_004,
        f"the binding's {dimension} changed during {call} and the call still answered {answer.describe()}; "
        f"judged {exchange(sent)}",
    )


@R(clients.HOST_004)
@pytest.mark.parametrize("call", CALLS)
def test_the_binding_is_checked_again_after_an_error_answer(host: Session, call: str) -> None:
    """ "All three reads validate the original binding before and after asynchronous work": also when
    the Core's answer is an error (503 unavailable here). The Agent Session changes while the
    request is out; the host call fails with binding_changed, not with the Core's error, which
    belongs to a binding the caller no longer has (a client that validates only a success passes
    the check above and fails this one)."""
    answer, sent = _rebound_during(
        host, call, "sessionId", answered=(503, {"error": "unavailable", "message": "later"})
    )
    expect(
        not answer.ok and answer.kind == "binding_changed",
        clients.HOST_004,
        f"the Agent Session changed during {call}, whose request the Core answered 503, and the call answered "
        f"{answer.describe()} (binding_changed expected); judged {exchange(sent)}",
    )


# case -> what the model's arguments try to choose: everything at once (both spellings), or the run alone in one
# spelling ("Inputs also accept snake-case aliases": an alias is still a model argument, and chooses no run)
HOSTILE_CASES = ["everything", "runId", "run_id"]


@R(clients.HOST_005)
@pytest.mark.parametrize("case", HOSTILE_CASES)
@pytest.mark.parametrize("call", CALLS)
def test_model_arguments_choose_no_identity_route_connection_or_run(host: Session, call: str, case: str) -> None:
    world = host.world
    route, elsewhere = world.route("host"), world.routes["elsewhere"]
    other_run = _current_run(host, "host2")
    run = _current_run(host, "host")
    own: dict[str, Any] = {}
    if call == "searchKnowledge":
        own = {"query": "homepage binding"}
    elif call == "readKnowledge":
        mark = host.wire.mark(route)
        own = {
            "ref": hints(host, host.host("searchKnowledge", {"query": "homepage binding"}, "host"), mark, route)[0][
                "ref"
            ]
        }
    hostile: dict[str, Any] = {
        "route": elsewhere,
        "workspace": elsewhere,
        "connectionKey": "host2",
        "connection_key": "host2",
        "runId": other_run,
        "run_id": other_run,
        "token": world.connections["host2"]["token"],
        "expectedBinding": world.connections["host2"]["binding"],
        "account": world.accounts["host2"],
    }
    if case != "everything":
        hostile = {case: other_run}
    mark, mark_elsewhere = host.wire.mark(route), host.wire.mark(elsewhere)
    answer = host.host(call, {**own, **hostile}, "host")
    sent = host.wire.since(mark, route)
    expect(not host.wire.since(mark_elsewhere, elsewhere), clients.HOST_005, "a model argument chose the route")
    expect(
        all(e.get("account") == world.accounts["host"] for e in sent),
        clients.HOST_005,
        "a model argument chose the identity or connection",
    )
    runs = {(e.get("body") or {}).get("run_id") for e in sent if e["method"] == "POST"}
    expect(
        runs <= {run},
        clients.HOST_005,
        f"a model argument ({case}) chose the run of {call}: {sorted(map(str, runs))}; judged {exchange(sent)}",
    )
    expect(
        answer.ok or answer.kind in ("invalid_input", "core_error"),
        clients.HOST_005,
        f"the call neither ignored nor refused the model's arguments: {answer.describe()}",
    )
