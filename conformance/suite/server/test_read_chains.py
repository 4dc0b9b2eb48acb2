"""Read chains: the budget of 131072 content bytes at, below and above it (the page that
exhausts it says so, and a chain reads up to it), and any document read the same through every
page size."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common import contract as C
from conformance.common import fanout
from conformance.common.rules import Rule, expect
from conformance.server import checks, corpus
from conformance.server import rules as server
from conformance.server.world import World, chain_ended

R = pytest.mark.requirement


def _budget_chain(world: World, key: str) -> tuple[str, list[dict[str, Any]]]:
    """The whole chain of one of the corpus's budget documents, in the largest pages."""
    doc = world.need_doc(key)
    run_id = world.start_run()
    return doc.content, world.follow(world.ref_for(run_id, doc), run_id, max_bytes=C.READ_MAX_MAX_BYTES)


@R(server.READ_010, server.READ_015, server.READ_016)
@pytest.mark.parametrize("key", ["big", "over"])
def test_read_chain_delivers_at_most_131072_content_bytes(world: World, key: str) -> None:
    """A revision far past the budget, and one a single byte past it."""
    content, pages = _budget_chain(world, key)
    read = sum(C.utf8_size(p["content"]) for p in pages)
    expect(
        read <= C.READ_CHAIN_MAX_BYTES,
        server.READ_010,
        f"the chain delivered {read} content bytes of a {C.utf8_size(content)}-byte "
        f"revision, over {C.READ_CHAIN_MAX_BYTES}",
    )
    checks.continues(content, pages)


@R(server.READ_011, server.READ_015, server.READ_016)
@pytest.mark.parametrize("key", ["big", "over"])
def test_the_page_that_exhausts_the_budget_says_so(world: World, key: str) -> None:
    """Once the revision's next character no longer fits the chain budget (131072 content bytes, or
    the smaller one the Core advertises), the chain ends with budget_exhausted true, truncated true
    (or no truncated member) and next_cursor null, and never claims the read is complete. The seed
    does not say on which page: by default a Core may offer one more cursor whose pages carry no
    content, the last of them with the flags; strict wants the flags on the exhausting page (READ-020)."""
    content, pages = _budget_chain(world, key)
    budget = world.chain_budget(pages)
    delivered, position = 0, 0
    for i, page in enumerate(pages):
        position = checks.continues_at(content, position, page["content"], i)
        delivered += C.utf8_size(page["content"])
        rest = content[position : position + 1]
        if rest and C.utf8_size(rest) > budget - delivered:
            later = pages[i + 1 :]
            expect(
                all(p["content"] == "" for p in later),
                server.READ_011,
                f"page {i} brought the chain to {delivered} content bytes, where the next character no longer fits "
                f"its {budget}-byte budget, yet a later page carries content",
            )
            last = pages[-1]
            expect(
                last.get("budget_exhausted") is True
                and last.get("truncated", True) is True
                and last["next_cursor"] is None,
                server.READ_011,
                f"page {i} brought the chain to {delivered} content bytes and the next character ({C.utf8_size(rest)} bytes) "
                f"no longer fits the {budget}-byte budget, yet the chain ends with {checks.flags(last)}",
            )
            return
    last = pages[-1]
    expect(
        position < len(content),
        server.READ_011,
        f"a {C.utf8_size(content)}-byte revision was read completely, past the {budget}-byte budget",
    )
    expect(
        last.get("budget_exhausted") is True,
        server.READ_011,
        f"the chain stopped after {delivered} content bytes of "
        f"{C.utf8_size(content)} without budget_exhausted: {checks.flags(last)}",
    )


@R(server.READ_020, server.READ_009, server.READ_015, server.READ_016, server.READ_010, server.READ_011)
@pytest.mark.parametrize("key", ["exact", "over", "big"])
def test_a_chain_reads_up_to_its_budget(world: World, key: str) -> None:
    """The seed fixes the most a chain may carry ("at most 131072 content bytes"), not how close
    to it a Core must go; a Core may advertise a smaller ``read_chain_max_bytes``. By default a chain
    that stops budget_exhausted must have carried more than its advertised budget less one largest
    page (a Core may refuse a page that could pass the budget); strict holds it to this project's
    edge: it stops on the page after which the next character would pass the budget (not one empty
    page later), so a revision of exactly 131072 bytes reads completely."""
    content, pages = _budget_chain(world, key)
    checks.continues(content, pages)
    joined = checks.joined(pages)
    delivered = C.utf8_size(joined)
    last = pages[-1]
    budget = world.chain_budget(pages)
    strict = world.cfg.strict_codes
    if last.get("budget_exhausted") is True and not strict:
        expect(
            delivered > budget - C.READ_MAX_MAX_BYTES,
            server.READ_020,
            f"the chain of a {C.utf8_size(content)}-byte revision stopped budget_exhausted after only {delivered} content bytes "
            f"(more than {budget - C.READ_MAX_MAX_BYTES} were expected before its {budget}-byte budget runs out)",
        )
    elif last.get("budget_exhausted") is True:
        rest = content[len(joined) : len(joined) + 1]
        expect(
            rest and C.utf8_size(rest) > budget - delivered,
            server.READ_020,
            f"the chain of a {C.utf8_size(content)}-byte revision stopped budget_exhausted after {delivered} content bytes, "
            f"though its next character ({C.utf8_size(rest)} bytes) still fits {budget}",
        )
        expect(
            pages[-1]["content"] != "" or len(pages) == 1,
            server.READ_020,
            f"strict: the chain offered one more cursor after the page that exhausted its budget, "
            f"and ended with an empty page: {checks.flags(last)} (CHOICES.md)",
        )
    elif C.utf8_size(content) > budget:  # never pass without judging where the chain stopped
        expect(
            False,
            server.READ_010 if joined == content else server.READ_011,
            f"the chain of a {C.utf8_size(content)}-byte revision, over "
            f"its {budget}-byte budget, ended after {delivered} content bytes without budget_exhausted: {checks.flags(last)}",
        )
    if joined == content:  # whatever stopped the chain, nothing of the document is missing
        expect(
            checks.says_complete(last),
            server.READ_009,
            f"the chain delivered all {delivered} bytes of the revision, yet its last page says {checks.flags(last)}: "
            "truncated true means incomplete",
        )
    if C.utf8_size(content) <= budget and (strict or last.get("budget_exhausted") is not True):
        expect(
            joined == content,
            server.READ_020,
            f"a {C.utf8_size(content)}-byte revision, within the budget, was not read "
            f"completely: the chain ended after {delivered} bytes with {checks.flags(last)}",
        )
        expect(checks.says_complete(last), server.READ_009, "the page that completes the document says truncated true")


def _held_if(condition: object, requirement: Rule, message: str, *, credit: bool) -> None:
    """A check that always judges but records its rule only where the chain could show it."""
    if not condition:
        requirement.fail(message)
    if credit:
        requirement.held()


def _live_ref(world: World, query: str, doc: corpus.Doc | None, first: str | None) -> tuple[str, str] | None:
    """``(run_id, ref)`` of ``doc`` (where it is known), of the hit whose first page is ``first``
    (the document an earlier chain read: never by rank), or of the first hit, in a fresh run: each
    chain gets a run of its own, as a Core may count the budget per reference and run."""
    run_id = world.start_run()
    hints = [h for h in checks.search_response(world.search(query, run_id))["hints"] if isinstance(h, dict)]
    if doc is not None:
        hint = world.hint_for(hints, doc, run_id)
    elif first is None:
        hint = hints[0] if hints else None
    else:
        hint = next((h for h in hints if world.page(str(h["ref"]), run_id)["content"] == first), None)
    return None if hint is None else (run_id, str(hint["ref"]))


def _chains(world: World, query: str, doc: corpus.Doc | None) -> dict[int | None, list[dict[str, Any]]]:
    """One document's chains at the default page size, at 4096 and at 32768 bytes, side by side
    once its first page is read (the other two find the document again by it); fewer than three
    when it was not found again."""
    found = _live_ref(world, query, doc, None)
    if found is None:
        return {}
    run_id, ref = found
    first = world.page(ref, run_id)

    def chain(size: int | None) -> list[dict[str, Any]] | None:
        if size is None:
            return world.follow(ref, run_id, first=first)
        again = _live_ref(world, query, doc, first["content"])
        return None if again is None else world.follow(again[1], again[0], max_bytes=size)

    sizes = (None, C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES)
    return {size: pages for size, pages in zip(sizes, fanout.each(chain, sizes), strict=True) if pages is not None}


def _live_sources(world: World) -> list[tuple[str, str, corpus.Doc | None]]:
    """``(what, query, doc)``: the probe query and each ``[target.documents]`` query, and the
    suite's own long and multibyte documents where it has them."""
    sources: list[tuple[str, str, corpus.Doc | None]] = [("probe_query", world.cfg.probe_query, None)]
    sources += [(f"[target.documents] {name}", query, None) for name, query in sorted(world.cfg.documents.items())]
    sources += [
        (f"document {key!r}", world.docs[key].token, world.docs[key]) for key in ("unicode", "big") if key in world.docs
    ]
    return sources


def _same_text(small: str, large: str, what: str, *, complete: bool, credit: bool) -> None:
    """The text of one revision read through 4096- and through 32768-byte pages: the same where both
    chains completed, else the shorter one a prefix of the longer (each chain may stop elsewhere
    within the budget). A difference that shows a split character is READ-016's."""
    shorter, longer = sorted((small, large), key=len)
    same = small == large if complete else longer.startswith(shorter)
    if not same:
        split = checks.split_in(small, large) or checks.split_in(large, small)
        if split is not None:
            server.READ_016.fail(f"{what}: the chains of 4096- and 32768-byte pages differ, one shows {split}")
        server.READ_015.fail(
            f"{what}: the chain of 4096-byte pages ({C.utf8_size(small)} bytes) and of 32768-byte pages "
            f"({C.utf8_size(large)} bytes) do not carry the same text"
        )
    if credit:
        server.READ_015.held()


@R(*checks.CHAIN_RULES, server.READ_015, server.READ_020)
@pytest.mark.kc_long(rounds=75)
def test_any_document_reads_the_same_through_every_page_size(world: World) -> None:
    """What needs no ground truth, on whatever the probe query and each [target.documents] query
    find first (and on the suite's own long and multibyte documents where it has them): every page
    within its bound and honest, each chain complete with truncated false or stopped by the budget
    (budget_exhausted, truncated true, next_cursor null, within 131072 content bytes and not far
    short of them), total_content_bytes what was read, and the same text through 4096-, 16384- and
    32768-byte pages. Each rule counts only where the document could show it: the budget rules
    on a chain the budget stopped, READ-016 on multibyte text cut into several pages."""
    judged = 0
    sources = _live_sources(world)
    read = fanout.each(lambda source: _chains(world, source[1], source[2]), sources)
    for (what, query, _doc), chains in zip(sources, read, strict=True):
        if len(chains) < 3 or len({str(pages[0]["revision"]) for pages in chains.values()}) > 1:
            continue  # not found again, or the document changed between the chains
        judged += 1
        what = f"{what} ({query!r})"
        for pages in chains.values():
            chain_ended(pages)
        texts = {size: checks.joined(pages) for size, pages in chains.items()}
        exhausted = {size: pages[-1].get("budget_exhausted") is True for size, pages in chains.items()}
        cut = len(chains[C.READ_MIN_MAX_BYTES]) > 1
        small = texts[C.READ_MIN_MAX_BYTES]
        for size in (None, C.READ_MAX_MAX_BYTES):
            _same_text(
                small, texts[size], what, complete=not (exhausted[size] or exhausted[C.READ_MIN_MAX_BYTES]), credit=cut
            )
        if cut and any(ord(ch) > 0x7F for ch in small):
            server.READ_016.held()  # multibyte text cut at different places by three page sizes, and nowhere split
        for size, pages in chains.items():
            if not exhausted[size]:
                continue
            delivered = C.utf8_size(texts[size])
            last = pages[-1]
            expect(
                delivered <= C.READ_CHAIN_MAX_BYTES,
                server.READ_010,
                f"{what}: the chain carried {delivered} content bytes",
            )
            expect(
                last.get("truncated", True) is True and last["next_cursor"] is None,
                server.READ_011,
                f"{what}: the exhausted chain ends with {checks.flags(last)}",
            )
            floor = world.chain_budget(pages) - C.READ_MAX_MAX_BYTES  # the budget the Core advertises
            _held_if(
                delivered > floor,
                server.READ_020,
                f"{what}: the chain stopped budget_exhausted after only {delivered} content bytes "
                f"(more than {floor} were expected before the budget runs out)",
                credit=not world.cfg.strict_codes,  # strict's edge needs the document's next character
            )
    if not judged:
        pytest.skip(
            f"not verified: neither the probe query {world.cfg.probe_query!r} nor a [target.documents] "
            "query found a document"
        )
