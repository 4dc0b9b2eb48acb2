"""The Core's answers as the Agent Session tools relay them: a search or a page that reaches a
model over MCP keeps every rule the Core's HTTP answer keeps (hint count and members, no full
document, 4096 bytes of search JSON, page members and flags, the chain budget and its flags).
Each violation names the seed's rule and says it was seen over MCP (:mod:`conformance.mcp.relayed`).
And what the MCP path owes of its own (MCP-011): a read chain that rebuilds the document HTTP
delivers, every page within a requested ``max_bytes``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.common import contract as C
from conformance.common.outcomes import ContractViolation, NotVerified
from conformance.common.rules import expect
from conformance.mcp import relayed
from conformance.mcp import rules as mcp
from conformance.mcp.records import ToolResult
from conformance.mcp.results import (
    READ,
    SEARCH,
    Agent,
    call,
    hits,
    ref_of,
    refused,
    said,
    success,
)
from conformance.server import checks, corpus
from conformance.server import rules as server
from conformance.server.world import World

R = pytest.mark.requirement

QUERIES = {
    "broad": "binding",  # more documents match than three hints may show, with distinct titles
    "worst": corpus.WORST_WORD,  # the three worst-case hints at once: the 4096-byte bound at its edge
}


@R(*checks.SEARCH_RULES, mcp.MCP_009)
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_searches_over_mcp_keep_the_search_rules(agent: Agent, world: World, query: str) -> None:
    """At most three hints with title, summary and ref, a contract status, ``trust`` when the
    result carries it, at most 4096 bytes of the Core's members, and no hint carrying a document
    the run seeded whole, in any member at any depth."""
    if not world.docs:
        pytest.skip("not verified: needs the suite's own corpus, seeded through control")
    # success() judges the relayed search by the seed's rules before the tool's outputSchema
    body = success(agent, SEARCH, agent.session.call(SEARCH, {"query": QUERIES[query]}), "mcp-search-result")
    seeded = world.document_text()
    with relayed.over_mcp(agent.transport, SEARCH):
        for i, hint in enumerate(body.get("hints") or []):
            whole = seeded.whole(hint)
            expect(
                whole is None,
                server.SRCH_006,
                f"hint {i} carries a seeded document whole ({len(whole or '')} characters)",
            )


@R(server.SRCH_006)
def test_a_summary_that_is_the_whole_document_is_never_relayed_whole(agent: Agent, world: World) -> None:
    """The document whose author summary is its whole content (corpus.SUMMARISED): its hint over
    MCP may quote it, never carry all of it."""
    doc = world.need_doc(corpus.SUMMARISED)
    body = success(agent, SEARCH, agent.session.call(SEARCH, {"query": doc.token}), "mcp-search-result")
    hints = [h for h in body.get("hints") or [] if doc.token in str(h)]
    if not hints:
        world.not_found(f"no MCP hint for {doc.token!r} names document {doc.key!r}", doc)
    with relayed.over_mcp(agent.transport, SEARCH):
        for hint in hints:
            expect(
                doc.content.strip() not in " ".join(C.strings_in(hint)),
                server.SRCH_006,
                f"the hint of {doc.key!r} carries its whole content ({len(doc.content)} characters)",
            )


EMPTY_PAGES = 8  # pages without content a chain may offer before it ends (a server that never ends it is cut here)


@R(
    server.READ_002,
    server.READ_003,
    server.READ_007,
    server.READ_009,
    server.READ_010,
    server.READ_011,
    server.READ_014,
    mcp.MCP_011,
)
@pytest.mark.parametrize("key", ["big", "over"])
def test_a_read_chain_over_mcp_stops_at_its_budget(agent: Agent, world: World, key: str) -> None:
    """A revision far past the chain budget, and one a byte past it, read over MCP in the largest
    pages: every page keeps the page rules, the chain carries at most its budget, and where it
    stops short of the revision its last page says ``budget_exhausted: true`` and never that the
    read is complete (seed: "Never describe that as a full read")."""
    doc = world.need_doc(key)
    ref = ref_of(agent, doc.token)
    if ref is None:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document", doc)
    assert ref is not None
    pages: list[dict[str, object]] = []
    cursor, delivered, empty = None, 0, 0
    while delivered <= C.READ_CHAIN_MAX_BYTES and empty < EMPTY_PAGES:
        args = {"ref": ref, "max_bytes": C.READ_MAX_MAX_BYTES, **({"cursor": cursor} if cursor else {})}
        result = agent.session.call(READ, args)
        if not refused(result) and isinstance(said(result), dict):
            relayed.page(
                said(result), agent.transport, READ, ref=ref, max_bytes=C.READ_MAX_MAX_BYTES, bound=mcp.MCP_011
            )
        body = success(agent, READ, result, "mcp-read-result")
        pages.append(body)
        size = C.utf8_size(str(body.get("content", "")))
        delivered, empty = delivered + size, 0 if size else empty + 1
        cursor = body.get("next_cursor")
        if not cursor:
            break
    budget = world.chain_budget([dict(p) for p in pages])
    last = pages[-1]
    with relayed.over_mcp(agent.transport, READ):
        expect(
            delivered <= budget,
            server.READ_010,
            f"the chain delivered {delivered} content bytes of a {C.utf8_size(doc.content)}-byte revision, "
            f"over its {budget}-byte budget",
        )
        if cursor:
            return  # cut here: more than the budget, judged above
        expect(
            last.get("budget_exhausted") is True and not checks.says_complete(dict(last)),
            server.READ_011,
            f"the chain stopped after {delivered} content bytes of {C.utf8_size(doc.content)} "
            f"with {checks.describe({k: last.get(k) for k in ('truncated', 'next_cursor', 'budget_exhausted')})}",
        )


@R(mcp.MCP_011)
def test_mcp_and_http_read_chains_agree(agent: Agent, world: World) -> None:
    doc = world.need_doc("cuts")  # escapes, astral characters and combining sequences at every page cut
    run_id = world.start_run()
    http_pages = world.follow(world.ref_for(run_id, doc), run_id)  # first: HTTP delivers this document
    if "".join(str(p.get("content", "")) for p in http_pages) != doc.content:
        # The Core's own chain is wrong (READ-015's to judge): a faithful MCP path relays that.
        raise NotVerified("not verified: the Core's HTTP read chain does not rebuild the document either")

    def read(args: dict[str, Any]) -> ToolResult:
        """What HTTP just delivered, the MCP path must deliver too: its failing to answer at all
        (unparseable JSON-RPC, a dropped or hung session) is a disagreement, not a harness error."""
        answer = call(agent.session, READ, args)
        if isinstance(answer, str):
            raise ContractViolation(mcp.MCP_011, f"the MCP read of a document HTTP delivers got no result: {answer}")
        return answer

    found: dict[str, Any] | None = None
    for hint in hits(agent, doc.token):
        page = read({"ref": hint["ref"]})
        if not page.is_error and doc.token in str((said(page) or {}).get("content", "")):
            found = hint
            break
    if found is None:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document")
    assert found is not None
    pages, cursor, consumed, empty = [], None, 0, 0
    while consumed <= C.READ_CHAIN_MAX_BYTES and empty < 8:  # bounded by the chain budget, never by a page count
        args: dict[str, Any] = {"ref": found["ref"], **({"cursor": cursor} if cursor else {})}
        body = success(agent, READ, read(args), "mcp-read-result")
        pages.append(body)
        size = len(str(body.get("content", "")).encode("utf-8"))
        consumed, empty = consumed + size, 0 if size else empty + 1
        cursor = body.get("next_cursor")
        if not cursor:
            break
    mcp_text, http_text = "".join(str(p["content"]) for p in pages), "".join(p["content"] for p in http_pages)
    expect(
        mcp_text == doc.content,
        mcp.MCP_011,
        f"the MCP read chain ({len(mcp_text)} characters) does not rebuild the stored document "
        f"({len(doc.content)} characters), which the HTTP chain ({len(http_text)} characters) delivers",
    )
    if agent.strict:  # the same pages on both wires is this project's reading (CHOICES.md)
        expect(
            [p["revision"] for p in pages][:1] == [p["revision"] for p in http_pages][:1],
            mcp.MCP_011,
            "strict: the revisions differ",
        )
        expect(
            len(pages) == len(http_pages),
            mcp.MCP_011,
            f"strict: {len(pages)} MCP pages, {len(http_pages)} HTTP pages at the same size",
        )


MCP_MEMBERS = ("dispatch", "business_operation_performed")  # what the MCP path adds to the Core's page


def _page_bytes(body: dict[str, Any]) -> int:
    """The page as the Core's JSON, at its smallest (compact, UTF-8): the members the MCP path adds are
    left out, and no serialization of the same members is shorter, so this never asks more than the seed."""
    page = {k: v for k, v in body.items() if k not in MCP_MEMBERS}
    return len(json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@R(mcp.MCP_011)
@pytest.mark.parametrize("max_bytes", (C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES))
def test_mcp_pages_keep_a_requested_max_bytes(agent: Agent, world: World, max_bytes: int) -> None:
    """Bounds are the Core's, not the adapter's: a read chain over MCP at a non-default ``max_bytes``
    has every page within it (the complete page JSON, as over HTTP), on every page of the chain."""
    doc = world.need_doc("unicode")  # multi-byte text, several pages at either size
    found = [
        h for h in hits(agent, doc.token) if doc.token in str(said(agent.session.call(READ, {"ref": h["ref"]})) or "")
    ]
    if not found:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document", doc)
    cursor, pages, consumed = None, 0, 0
    while consumed <= C.READ_CHAIN_MAX_BYTES and pages < C.READ_CHAIN_MAX_BYTES // 1024:
        args: dict[str, Any] = {
            "ref": found[0]["ref"],
            "max_bytes": max_bytes,
            **({"cursor": cursor} if cursor else {}),
        }
        body = success(agent, READ, agent.session.call(READ, args), "mcp-read-result")
        size = _page_bytes(body)
        expect(
            size <= max_bytes,
            mcp.MCP_011,
            f"MCP read page {pages + 1} at max_bytes {max_bytes} is {size} bytes of page JSON (without the MCP flags)",
        )
        pages, consumed = pages + 1, consumed + len(str(body.get("content", "")).encode("utf-8"))
        cursor = body.get("next_cursor")
        if not cursor:
            break
