"""SDK search and read (seed 000): runId and maxBytes map to the wire, one read is one page, a
chain stopped by its budget or ending on a truncated page is never a full read, and an unavailable
search or read is never an empty result."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.clients import rules as clients
from conformance.clients.session import Session, client_failed, exchange, mapped, requests
from conformance.clients.world import ARCHIVE
from conformance.common import contract as C
from conformance.common.rules import expect
from conformance.server.checks import describe

R = pytest.mark.requirement


@R(clients.READ_018)
def test_run_id_and_max_bytes_map_to_the_wire(sdk: Session) -> None:
    route, run, ref, mark = sdk.fresh_ref("archive")
    found = sdk.call("search", connection="main", input={"query": "archive ledger", "runId": run, "limit": 2})
    page = sdk.call("read", connection="main", input={"ref": ref, "runId": run, "maxBytes": 4096})
    wire = sdk.wire.since(mark, route)
    searches, reads = requests(wire, "POST", "search"), requests(wire, "POST", "read")
    expect(
        searches and reads,
        clients.READ_018,
        f"search and read did not both reach the Core: {found.describe()} {page.describe()}",
    )
    s, r = searches[0].get("body") or {}, reads[0].get("body") or {}
    expect(
        s.get("run_id") == run and "runId" not in s,
        clients.READ_018,
        f"runId did not become run_id on the wire: {describe(s)}",
    )
    expect(
        r.get("run_id") == run and "runId" not in r,
        clients.READ_018,
        f"runId did not become run_id on the wire: {describe(r)}",
    )
    expect(
        r.get("max_bytes") == 4096 and "maxBytes" not in r,
        clients.READ_018,
        f"maxBytes did not become max_bytes on the wire: {describe(r)}",
    )
    expect(found.ok and page.ok, clients.READ_018, f"the mapped calls failed: {found.describe()} {page.describe()}")


@R(clients.READ_017)
def test_one_read_is_one_page(sdk: Session) -> None:
    route, run, ref, mark = sdk.fresh_ref("archive")
    page = sdk.call("read", connection="main", input={"ref": ref, "runId": run, "maxBytes": 4096})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if not (page.ok and page.value["next_cursor"]):
        client_failed(f"the first page of a longer document did not come back with a next_cursor: {page.describe()}")
    expect(
        len(reads) == 1,
        clients.READ_017,
        f"one read of a longer document sent {len(reads)} read requests: pages are followed only when needed",
    )


@R(clients.SRCH_012)
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
        clients.SRCH_012,
        f"a search the Core answered {expected} was given back as {answer.describe()}",
    )


@R(clients.READ_018)
@pytest.mark.parametrize("max_bytes", [4095, 4096, 32768, 32769, "4096", 4096.5, None], ids=str)
def test_max_bytes_at_and_past_both_ends(sdk: Session, max_bytes: Any) -> None:
    """In range (4096, 32768 included) maxBytes goes out as max_bytes, exactly; out of range or of the wrong
    JSON type the client may refuse it locally or send it (the Core refuses or clamps), never drop or change
    it into another valid request; ``None``: a read without maxBytes sends no max_bytes."""
    route, run, ref, mark = sdk.fresh_ref("archive")
    data: dict[str, Any] = {"ref": ref, "runId": run}
    if max_bytes is not None:
        data["maxBytes"] = max_bytes
    page = sdk.call("read", connection="main", input=data)
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    valid = isinstance(max_bytes, int) and C.READ_MIN_MAX_BYTES <= max_bytes <= C.READ_MAX_MAX_BYTES
    if not reads:
        expect(
            not valid and max_bytes is not None and not page.ok,
            clients.READ_018,
            f"maxBytes {max_bytes!r} sent no read: {page.describe()}",
        )
        return
    body = reads[0].get("body") or {}
    mapped(reads)
    if max_bytes is None:
        expect("max_bytes" not in body, clients.READ_018, f"a read without maxBytes sent one: {exchange(reads[:1])}")
    elif valid:
        expect(
            body.get("max_bytes") == max_bytes and type(body.get("max_bytes")) is int,
            clients.READ_018,
            f"maxBytes {max_bytes} did not reach the wire as max_bytes {max_bytes}: {exchange(reads[:1])}",
        )
        expect(page.ok, clients.READ_018, f"a read with maxBytes {max_bytes} failed: {page.describe()}")
    else:
        expect(
            "max_bytes" in body and (body["max_bytes"] == max_bytes or str(body["max_bytes"]) == str(max_bytes)),
            clients.READ_018,
            f"maxBytes {max_bytes!r} was dropped or changed on the wire (not refused): {exchange(reads[:1])}",
        )


def _claims_full(description: Any) -> bool:
    words = set(re.findall(r"[a-z]+", str(description or "").lower()))
    return bool(words & {"full", "fully", "complete", "completely", "entire", "whole"}) and not (
        words & {"partial", "partially", "incomplete", "not", "truncated", "budget", "stopped"}
    )


@R(clients.READ_012, clients.READ_018)
@pytest.mark.parametrize("max_bytes", [None, 4096, 32768], ids=["default", "smallest", "largest"])
def test_a_budget_exhausted_chain_is_not_a_full_read(sdk: Session, max_bytes: int | None) -> None:
    route, run, ref, mark = sdk.fresh_ref("glacier")
    data: dict[str, Any] = {"ref": ref, "runId": run, **({"maxBytes": max_bytes} if max_bytes else {})}
    answer = sdk.call("read_all", connection="main", input=data)
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if max_bytes is not None:
        expect(
            all((e.get("body") or {}).get("max_bytes") == max_bytes for e in reads),
            clients.READ_018,
            f"a chain asked with maxBytes {max_bytes} sent other pages: {exchange(reads)}",
        )
    if not answer.ok:
        client_failed(f"read_all failed, so nothing says how much was read: {answer.describe()}")
    expect(reads, clients.READ_012, "read_all answered without reading")
    value = answer.value
    expect(
        value["complete"] is False,
        clients.READ_012,
        f"a chain over the {C.READ_CHAIN_MAX_BYTES}-byte budget was called complete after {len(reads)} page(s): "
        f"{answer.describe()}; judged {exchange(reads[-1:])}",
    )
    expect(
        value["truncated"] is True,
        clients.READ_012,
        f"a chain stopped by the budget does not stay truncated: {answer.describe()}; judged {exchange(reads[-1:])}",
    )
    expect(
        not _claims_full(value.get("description")),
        clients.READ_012,
        f"a chain stopped by the budget is described as a full read: {value.get('description')!r}",
    )


@R(clients.READ_012)
@pytest.mark.parametrize("max_bytes", [4096, 32768], ids=["smallest", "largest"])
def test_a_chain_under_the_budget_reads_the_whole_revision(sdk: Session, max_bytes: int) -> None:
    route, run, ref, mark = sdk.fresh_ref("archive")
    answer = sdk.call("read_all", connection="main", input={"ref": ref, "runId": run, "maxBytes": max_bytes})
    reads = requests(sdk.wire.since(mark, route), "POST", "read")
    mapped(reads)
    if not answer.ok:
        client_failed(f"read_all of a document under the budget failed: {answer.describe()}")
    value = answer.value
    expect(
        not value["complete"] or value["content"] == ARCHIVE[1],
        clients.READ_012,
        f"a chain called complete did not read the whole revision ({len(value['content'])} of {len(ARCHIVE[1])} "
        f"characters): {answer.describe()}",
    )


@R(clients.READ_021, clients.READ_012)
@pytest.mark.parametrize("budget", ["budget-exhausted", "no-budget-flag"])
def test_a_last_page_marked_truncated_is_never_complete(sdk: Session, budget: str) -> None:
    """The chain's second page comes back ``truncated: true`` with ``next_cursor: null`` (with
    ``budget_exhausted: true``, as a Core the budget stopped answers, or without the optional flag): the chain
    ended, but "truncated: true means incomplete" (READ-021, and READ-012 for the budget: never a full read).
    A client may refuse such a page; it never answers the chain complete."""
    route, run, ref, _ = sdk.fresh_ref("archive", "canned")
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
    rule = clients.READ_012 if budget == "budget-exhausted" else clients.READ_021
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


@R(clients.SRCH_012)
@pytest.mark.parametrize("where", ["read", "chain"])
def test_an_unavailable_read_is_not_an_empty_page(sdk: Session, where: str) -> None:
    route, run, ref, _ = sdk.fresh_ref("archive", "canned")
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
            clients.SRCH_012.held()  # the client read the page again and the Core itself answered it
            return
    expect(
        not answer.ok or (where == "chain" and answer.value["complete"] is False),
        clients.SRCH_012,
        f"a {cmd} the Core answered 503 unavailable was given back as a result: {answer.describe()}; "
        f"judged {exchange([e for e in reads if e.get('status') == 503][:1])}",
    )
