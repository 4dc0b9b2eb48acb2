"""SDK references (seed 000): a reference error stops a chain and says search again, without
replaying a read or a turn; no reference moves to another account."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.clients import rules as clients
from conformance.clients.session import Session, client_failed, exchange, mapped, next_action, requests
from conformance.common.rules import expect

R = pytest.mark.requirement


# family -> (status, body) of a reference error that breaks a chain after its first page
CHAIN_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "expired": (410, {"error": "knowledge_reference_expired", "message": "expired"}),
    "invalid": (400, {"error": "knowledge_reference_invalid", "message": "invalid"}),
    "revision-changed": (409, {"error": "knowledge_revision_changed", "message": "changed"}),
    "scope-changed": (409, {"error": "knowledge_scope_changed", "message": "changed"}),
    "binding-mismatch": (403, {"error": "knowledge_reference_mismatch", "message": "another binding"}),
}


@R(clients.REF_013)
@pytest.mark.parametrize("family", list(CHAIN_ERRORS))
def test_a_chain_broken_by_a_reference_error_says_search_again(sdk: Session, family: str) -> None:
    """read_all stops on the error: it answers the error (next_action search_knowledge), or what it read
    with complete false and that error in ``error``; it never replays the read or a turn."""
    route, run, ref, _ = sdk.fresh_ref("archive", "canned")
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
        clients.REF_013,
        f"a chain broken by {body['error']} was called complete: {answer.describe()}",
    )
    expect(
        action == "search_knowledge",
        clients.REF_013,
        f"a chain broken by {body['error']} does not say to search again (next_action {action!r}): "
        f"{answer.describe()}; judged {exchange(reads[1:2])}",
    )
    expect(
        len(reads) == 2 and not turns,
        clients.REF_013,
        f"after the reference error the chain replayed: {len(reads)} read(s), {len(turns)} turn(s)",
    )


@R(clients.REF_013)
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
    expect(not answer.ok, clients.REF_013, f"an expired {what} was given back as a result: {answer.describe()}")
    expect(
        next_action(answer) == "search_knowledge",
        clients.REF_013,
        f"the reference error does not say to search again (next_action {next_action(answer)!r}): {answer.describe()}",
    )
    expect(
        len(reads) == 1 and not turns,
        clients.REF_013,
        f"after the reference error the client replayed: {len(reads)} read(s), {len(turns)} turn(s)",
    )
    expect(found.ok, clients.REF_013, f"searching again on the same target failed: {found.describe()}")


@R(clients.REF_010)
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
        clients.REF_010,
        "the other account's search never reached the Core under its own account (a cached answer?)",
    )
    expect(
        not (a_refs & set(b_refs)),
        clients.REF_010,
        "the other account was given a reference the first account received",
    )
    moved = [
        e
        for e in requests(wire, "POST", "read")
        if e.get("account") == bob and (e.get("body") or {}).get("ref") in a_refs
    ]
    expect(not moved, clients.REF_010, "a reference of one account was sent under another account")
