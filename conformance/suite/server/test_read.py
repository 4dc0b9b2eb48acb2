"""Read: page bounds for every allowed max_bytes and at both ends of the range, honest
truncation, exact concatenation, no split characters (with escapes, astral characters
and combining sequences at every cut), the 4096-byte bound of references and cursors
at, below and above it, and the read-chain budget at, below and above 131072 bytes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.server import checks, corpus
from conformance.server import rules as server
from conformance.server.world import World, chain_ended
from conformance.target import contract as C
from conformance.target import fanout
from conformance.target.outcomes import NotVerified
from conformance.target.rules import Rule, expect

R = pytest.mark.requirement


def _joined(pages: list[dict[str, Any]]) -> str:
    return "".join(p["content"] for p in pages)


@R(
    server.READ_001,
    server.READ_002,
    server.READ_003,
    server.READ_004,
    server.READ_009,
    server.READ_014,
    server.READ_015,
    server.WIRE_002,
)
def test_default_pages_fit_16384_bytes_and_rebuild_the_document(world: World) -> None:
    run_id = world.start_run()
    doc = world.docs.get("unicode")
    ref = world.ref_for(run_id, doc)
    pages = world.follow(ref, run_id)
    revisions = {p["revision"] for p in pages}
    expect(len(revisions) == 1, server.READ_002, f"one chain reported several revisions: {sorted(revisions)}")
    last = pages[-1]
    if doc is None:  # a live Core's own document: bounds and flags, but nothing to compare the chain with
        chain_ended(pages)
        return
    expect(len(pages) > 1, server.READ_004, "a 60 KB document fit into one default page")
    stopped = pages[-1].get("budget_exhausted") is True and C.utf8_size(doc.content) > world.chain_budget(pages)
    if not stopped:  # its own check, before the split check names a cut character (READ-016)
        expect(_joined(pages) == doc.content, server.READ_015, "the pages do not concatenate to the stored revision")
    if _read_to_the_end(world, doc.content, pages, _continues(doc.content, pages)):
        expect(checks.says_complete(last), server.READ_009, "the page that completes the document says truncated true")
    if "total_content_bytes" in last:
        expect(
            last["total_content_bytes"] == C.utf8_size(doc.content),
            server.READ_014,
            f"total_content_bytes {last['total_content_bytes']}, the revision has {C.utf8_size(doc.content)} bytes",
        )


def _continues_at(doc: str, position: int, piece: str, i: int) -> int:
    """Page ``i`` continues the document at character ``position``; a difference that shows a
    split character is READ-016's, any other READ-015's. Returns where the next page starts."""
    expected = doc[position : position + len(piece)]
    if piece != expected:
        split = checks.split_in(piece, expected)
        expect(split is None, server.READ_016, f"page {i} splits a character near character {position}: {split}")
        server.READ_015.fail(f"page {i} does not continue the document at character {position}")
    server.READ_015.held()  # the page is the document's next characters, so no character was split either
    server.READ_016.held()
    return position + len(piece)


def _read_to_the_end(world: World, doc: str, pages: list[dict[str, Any]], position: int) -> bool:
    """The chain read the whole revision (True), unless it stopped budget_exhausted on a revision larger
    than the budget the Core advertises (False: where it stopped is READ-011's and READ-020's to judge)."""
    if pages[-1].get("budget_exhausted") is True and C.utf8_size(doc) > world.chain_budget(pages):
        return False
    expect(position == len(doc), server.READ_015, f"the chain ended after {position} of {len(doc)} characters")
    return True


def _continues(doc: str, pages: list[dict[str, Any]]) -> int:
    """Every page continues the document; returns the characters read."""
    position = 0
    for i, page in enumerate(pages):
        position = _continues_at(doc, position, page["content"], i)
    return position


@R(server.READ_005, server.READ_015, server.READ_016)
@pytest.mark.parametrize("max_bytes", [C.READ_MIN_MAX_BYTES, 5001, C.READ_DEFAULT_MAX_BYTES, C.READ_MAX_MAX_BYTES])
def test_requested_max_bytes_bounds_every_page(world: World, max_bytes: int) -> None:
    """Both ends of the range and the default, asked for explicitly: accepted, and every page's
    complete JSON within it. Rebuilding the document exactly needs the suite's own corpus."""
    doc = world.docs.get("unicode")
    run_id = world.start_run()
    pages = world.follow(world.ref_for(run_id, doc), run_id, max_bytes=max_bytes)
    if doc is None:
        chain_ended(pages)
        return
    _read_to_the_end(world, doc.content, pages, _continues(doc.content, pages))


@R(server.READ_009, server.READ_015, server.READ_016)
@pytest.mark.parametrize(
    "max_bytes",
    [
        pytest.param(None, marks=R(server.READ_004), id="default"),
        *(
            pytest.param(n, marks=R(server.READ_005), id=str(n))
            for n in (C.READ_MIN_MAX_BYTES, C.READ_MIN_MAX_BYTES + 3, C.READ_MAX_MAX_BYTES)
        ),
    ],
)
@pytest.mark.parametrize("key", ["cuts", "nospace", "ascii"])
def test_pages_cut_next_to_escapes_astral_characters_and_combining_marks(
    world: World, max_bytes: int | None, key: str
) -> None:
    """A document made only of characters whose JSON costs more than their count says (escapes,
    control characters, astral characters, combining sequences): every cut falls next to one.
    And one of multibyte characters without whitespace, so that a Core preferring to cut at a
    space still cuts between two multibyte characters. Each page fits its bound as sent, splits
    no code point, and the pages rebuild the document (a page may end between a base character
    and its combining marks: CHOICES.md). And one of plain one-byte text with nothing to escape,
    whose pages fill their room exactly (a byte count off by one there skips or repeats a character)."""
    doc = world.need_doc(key)
    run_id = world.start_run()
    pages = world.follow(world.ref_for(run_id, doc), run_id, max_bytes=max_bytes)
    if _read_to_the_end(world, doc.content, pages, _continues(doc.content, pages)):
        expect(
            checks.says_complete(pages[-1]), server.READ_009, "the page that completes the document says truncated true"
        )


@R(server.READ_006)
@pytest.mark.parametrize(
    "max_bytes", [0, 1, C.READ_MIN_MAX_BYTES - 1, C.READ_MAX_MAX_BYTES + 1, 2 * C.READ_MAX_MAX_BYTES, 10**9, -4096]
)
def test_out_of_range_max_bytes_is_refused_or_clamped(world: World, max_bytes: int) -> None:
    """The seed says a read can request 4096 to 32768 bytes and not what happens otherwise: a Core may
    refuse (a 4xx error envelope) or clamp into the range (the page fits the nearer bound), never 5xx,
    never a page over 32768. Strict expects this project's 400 invalid_request (CHOICES.md). The
    document read is the corpus's largest (several pages of the largest bound), so a Core that
    honours a bound above 32768 has the content to show it; without the corpus, whatever the
    probe query finds."""
    run_id = world.start_run()
    ref = _big_ref(world, run_id)
    response = world.read(ref, run_id, max_bytes=max_bytes)
    if _refused(world, response, server.READ_006, max_bytes):
        return
    clamped = C.READ_MIN_MAX_BYTES if max_bytes < C.READ_MIN_MAX_BYTES else C.READ_MAX_MAX_BYTES
    checks.page(response, ref=ref, max_bytes=clamped, requirement_bound=server.READ_006)


def _refused(world: World, response: httpx.Response, rule: Rule, max_bytes: object) -> bool:
    """A read refused for its max_bytes (a 4xx error envelope, judged as such; strict: this
    project's 400 invalid_request), or False for a page, left to the caller to judge."""
    strict = world.cfg.strict_codes
    if not strict and response.status_code == 200:
        return False
    envelope = checks.error_envelope(response, rule, strict=strict)
    if strict:
        expect(
            response.status_code == world.cfg.status("invalid_request")
            and envelope["error"] == world.cfg.code("invalid_request"),
            rule,
            f"strict: max_bytes {max_bytes!r} answered HTTP {response.status_code} {envelope['error']!r}, "
            f"configured {world.cfg.status('invalid_request')} {world.cfg.code('invalid_request')!r}",
        )
    return True


def _big_ref(world: World, run_id: str) -> str:
    """A reference to the corpus's largest document (several pages of any bound), or to whatever
    the probe query finds when the Core has no suite corpus."""
    big = world.docs.get("big")
    try:
        return world.ref_for(run_id, big) if big is not None else world.ref_for(run_id)
    except NotVerified:  # search did not find the large document: the probe query's still shows the rest
        return world.ref_for(run_id)


@R(server.READ_005, server.WIRE_001)
@pytest.mark.parametrize("max_bytes", ["8192", 8192.5, "5000"])
def test_a_max_bytes_that_is_no_integer_is_refused_or_bounds_the_page_as_its_number(
    world: World, max_bytes: Any
) -> None:
    """A byte count sent as a string or with a fraction: the seed gives only the range, so a Core
    may refuse it (a 4xx error envelope) or read it as its number, but a page bigger than that
    number means the request was silently ignored (a default page instead of the one asked for).
    Strict expects this project's 400 invalid_request (the request schema says integer)."""
    run_id = world.start_run()
    ref = _big_ref(world, run_id)
    response = world.read(ref, run_id, max_bytes=max_bytes)
    if _refused(world, response, server.WIRE_001, max_bytes):
        return
    checks.page(response, ref=ref, max_bytes=int(float(max_bytes)), requirement_bound=server.READ_005)


@R(server.READ_004, server.READ_005)
def test_the_default_page_is_the_page_of_16384_bytes(world: World) -> None:
    """ "Read complete JSON defaults to 16384 bytes": a read without max_bytes is the read that asks
    for 16384, so its page carries as much of a long document as the explicit one does (less only
    by what a cursor that records the page size may take). A Core whose default is smaller bounds
    every default page by the wrong number."""
    big = world.need_doc("big")
    run_id = world.start_run()
    ref = world.ref_for(run_id, big)
    default = checks.page(world.read(ref, run_id), ref=ref, max_bytes=None, requirement_bound=server.READ_004)
    explicit = checks.page(
        world.read(ref, run_id, max_bytes=C.READ_DEFAULT_MAX_BYTES),
        ref=ref,
        max_bytes=C.READ_DEFAULT_MAX_BYTES,
        requirement_bound=server.READ_005,
    )
    got, asked = C.utf8_size(str(default["content"])), C.utf8_size(str(explicit["content"]))
    expect(
        got >= asked - DEFAULT_SLACK,
        server.READ_004,
        f"a default page carries {got} content bytes, a page asked for with max_bytes 16384 carries {asked}: "
        "the default is not 16384",
    )


DEFAULT_SLACK = 512
"""Content bytes a default page may carry fewer than an explicit 16384 one: a cursor or reference
that records the page size it was issued with may be that much longer (a reference is at most 4096
bytes, but no Core needs more than a few hundred to say a size)."""


def _budget_chain(world: World, key: str) -> tuple[str, list[dict[str, Any]]]:
    """The whole chain of one of the corpus's budget documents, in the largest pages."""
    doc = world.need_doc(key)
    run_id = world.start_run()
    return doc.content, world.follow(world.ref_for(run_id, doc), run_id, max_bytes=C.READ_MAX_MAX_BYTES)


def _flags(page: dict[str, Any]) -> str:
    return checks.describe({k: page.get(k) for k in ("truncated", "next_cursor", "budget_exhausted")})


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
    _continues(content, pages)


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
        position = _continues_at(content, position, page["content"], i)
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
                f"no longer fits the {budget}-byte budget, yet the chain ends with {_flags(last)}",
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
        f"{C.utf8_size(content)} without budget_exhausted: {_flags(last)}",
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
    _continues(content, pages)
    joined = _joined(pages)
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
            f"and ended with an empty page: {_flags(last)} (CHOICES.md)",
        )
    elif C.utf8_size(content) > budget:  # never pass without judging where the chain stopped
        expect(
            False,
            server.READ_010 if joined == content else server.READ_011,
            f"the chain of a {C.utf8_size(content)}-byte revision, over "
            f"its {budget}-byte budget, ended after {delivered} content bytes without budget_exhausted: {_flags(last)}",
        )
    if joined == content:  # whatever stopped the chain, nothing of the document is missing
        expect(
            checks.says_complete(last),
            server.READ_009,
            f"the chain delivered all {delivered} bytes of the revision, yet its last page says {_flags(last)}: "
            "truncated true means incomplete",
        )
    if C.utf8_size(content) <= budget and (strict or last.get("budget_exhausted") is not True):
        expect(
            joined == content,
            server.READ_020,
            f"a {C.utf8_size(content)}-byte revision, within the budget, was not read "
            f"completely: the chain ended after {delivered} bytes with {_flags(last)}",
        )
        expect(checks.says_complete(last), server.READ_009, "the page that completes the document says truncated true")


def _padded(token: str, size: int, unit: str = "A") -> str:
    """``token`` with ``unit`` appended (then ASCII) up to exactly ``size`` UTF-8 bytes."""
    count, rest = divmod(size - C.utf8_size(token), C.utf8_size(unit))
    return token + unit * count + "A" * rest


def _token_probe(world: World, field: str) -> tuple[str, str, str]:
    """``(run_id, ref, token)``: a fresh reference, and the ref or a cursor of it to pad."""
    run_id = world.start_run()
    ref = world.ref_for(run_id, world.docs.get("unicode"))
    first = world.page(ref, run_id, C.READ_MIN_MAX_BYTES)
    if (
        field == "cursor" and first["next_cursor"] is None
    ):  # padding the ref and sending it as a cursor would judge no cursor
        pytest.skip("not verified: the document found fits one page, so there is no cursor to pad")
    return run_id, ref, ref if field == "ref" else first["next_cursor"]


def _send(world: World, field: str, run_id: str, ref: str, token: str) -> httpx.Response:
    response: httpx.Response = world.read(token, run_id) if field == "ref" else world.read(ref, run_id, cursor=token)
    return response


@R(server.READ_008)
@pytest.mark.parametrize("padding", ["ascii", "multibyte"])
@pytest.mark.parametrize("field", ["ref", "cursor"])
def test_oversized_reference_or_cursor_is_refused(world: World, field: str, padding: str) -> None:
    """4097 bytes, one past the bound: ASCII, and two-byte characters (fewer than 4096 of them,
    so a Core that counts characters instead of bytes lets it through)."""
    run_id, ref, token = _token_probe(world, field)
    oversized = _padded(token, C.REFERENCE_MAX_BYTES + 1, "é" if padding == "multibyte" else "A")
    response = _send(world, field, run_id, ref, oversized)
    expect(
        response.status_code != 200,
        server.READ_008,
        f"a {field} of {C.utf8_size(oversized)} bytes ({len(oversized)} characters), "
        f"over {C.REFERENCE_MAX_BYTES}, was accepted",
    )
    body = checks.body_of(response, server.READ_008)
    if (
        response.status_code == 400
        and isinstance(body, dict)
        and body.get("error") in ("invalid_request", world.cfg.code("invalid_request"))
    ):
        checks.error_envelope(
            response, server.READ_008, strict=world.cfg.strict_codes
        )  # refused by request validation: acceptable
    else:
        checks.reference_error(
            response, world.cfg, "reference_invalid", requirement=server.READ_008, text=world.document_text()
        )


def _answer(response: httpx.Response) -> tuple[int, object]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return response.status_code, body.get("error") if isinstance(body, dict) else None


@R(server.READ_019)
@pytest.mark.parametrize("field", ["ref", "cursor"])
def test_a_reference_or_cursor_of_4096_bytes_is_not_refused_for_its_size(world: World, field: str) -> None:
    """Padded to 4095 and to exactly 4096 bytes, a token is the same token but for its size,
    both within the bound: a Core may refuse both as invalid, or read both, but must answer
    both alike (status and error code). Answering the 4096-byte one otherwise judged its size."""
    run_id, ref, token = _token_probe(world, field)
    if C.utf8_size(token) >= C.REFERENCE_MAX_BYTES - 1:
        pytest.skip(f"not verified: the Core's own {field} is already {C.utf8_size(token)} bytes, nothing to pad")
    below = _answer(_send(world, field, run_id, ref, _padded(token, C.REFERENCE_MAX_BYTES - 1)))
    at = _answer(_send(world, field, run_id, ref, _padded(token, C.REFERENCE_MAX_BYTES)))
    expect(
        at == below,
        server.READ_019,
        f"a {field} padded to {C.REFERENCE_MAX_BYTES} bytes answered HTTP {at[0]} {at[1]!r}, the same "
        f"{field} padded to {C.REFERENCE_MAX_BYTES - 1} bytes HTTP {below[0]} {below[1]!r}: a token within the bound was refused for its size",
    )


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
    """One document's chains at the default page size, then (side by side) at 4096 and 32768
    bytes; fewer than three when it was not found again."""
    found = _live_ref(world, query, doc, None)
    if found is None:
        return {}
    chains: dict[int | None, list[dict[str, Any]]] = {None: world.follow(found[1], found[0])}
    first = chains[None][0]["content"]

    def chain(size: int) -> list[dict[str, Any]] | None:
        again = _live_ref(world, query, doc, first)
        return None if again is None else world.follow(again[1], again[0], max_bytes=size)

    sizes = (C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES)
    chains.update(
        (size, pages) for size, pages in zip(sizes, fanout.each(chain, sizes), strict=True) if pages is not None
    )
    return chains


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


@R(
    server.READ_004,
    server.READ_005,
    server.READ_009,
    server.READ_010,
    server.READ_011,
    server.READ_014,
    server.READ_015,
    server.READ_016,
    server.READ_020,
)
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
        texts = {size: _joined(pages) for size, pages in chains.items()}
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
                f"{what}: the exhausted chain ends with {_flags(last)}",
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
