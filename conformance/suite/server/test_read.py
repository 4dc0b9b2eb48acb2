"""Read pages: bounds for every allowed max_bytes and at both ends of the range (out of range or
no integer: refused or clamped), the default page of 16384 bytes, honest truncation, exact
concatenation, no split characters (with escapes, astral characters and combining sequences at
every cut)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.common import contract as C
from conformance.common.outcomes import NotVerified
from conformance.common.rules import Rule, expect
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import World, chain_ended

R = pytest.mark.requirement


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
    checks.rebuilds(world, doc.content, pages)
    if checks.read_to_the_end(world, doc.content, pages, checks.continues(doc.content, pages)):
        expect(checks.says_complete(last), server.READ_009, "the page that completes the document says truncated true")
    if "total_content_bytes" in last:
        expect(
            last["total_content_bytes"] == C.utf8_size(doc.content),
            server.READ_014,
            f"total_content_bytes {last['total_content_bytes']}, the revision has {C.utf8_size(doc.content)} bytes",
        )


@R(server.READ_005, server.READ_015, server.READ_016)
@pytest.mark.parametrize(
    "max_bytes",
    [
        pytest.param(C.READ_MIN_MAX_BYTES, marks=pytest.mark.kc_long(rounds=23)),
        pytest.param(5001, marks=pytest.mark.kc_long(rounds=19)),
        C.READ_DEFAULT_MAX_BYTES,
        C.READ_MAX_MAX_BYTES,
    ],
)
def test_requested_max_bytes_bounds_every_page(world: World, max_bytes: int) -> None:
    """Both ends of the range and the default, asked for explicitly: accepted, and every page's
    complete JSON within it. Rebuilding the document exactly needs the suite's own corpus."""
    doc = world.docs.get("unicode")
    run_id = world.start_run()
    pages = world.follow(world.ref_for(run_id, doc), run_id, max_bytes=max_bytes)
    if doc is None:
        chain_ended(pages)
        return
    checks.rebuilds(world, doc.content, pages)
    checks.read_to_the_end(world, doc.content, pages, checks.continues(doc.content, pages))


LONG_CUTS = {("cuts", C.READ_MIN_MAX_BYTES): 45, ("cuts", C.READ_MIN_MAX_BYTES + 3): 45, ("cuts", None): 15}
LONG_CUTS |= {("nospace", C.READ_MIN_MAX_BYTES): 16, ("nospace", C.READ_MIN_MAX_BYTES + 3): 16}
"""The pages in a row of the cases read in many pages, marked to start first under --concurrency."""


def _cut_case(key: str, max_bytes: int | None) -> Any:
    rounds = LONG_CUTS.get((key, max_bytes))
    marks = [R(server.READ_004) if max_bytes is None else R(server.READ_005)]
    marks += [] if rounds is None else [pytest.mark.kc_long(rounds=rounds)]
    return pytest.param(key, max_bytes, marks=marks, id=f"{key}-{'default' if max_bytes is None else max_bytes}")


@R(server.READ_009, server.READ_015, server.READ_016)
@pytest.mark.parametrize(
    ("key", "max_bytes"),
    [
        _cut_case(key, max_bytes)
        for key in ("cuts", "nospace", "ascii")
        for max_bytes in (None, C.READ_MIN_MAX_BYTES, C.READ_MIN_MAX_BYTES + 3, C.READ_MAX_MAX_BYTES)
    ],
)
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
    if checks.read_to_the_end(world, doc.content, pages, checks.continues(doc.content, pages)):
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


DEFAULT_SLACK = 512
"""Content bytes a default page may carry fewer than an explicit 16384 one: a cursor or reference
that records the page size it was issued with may be that much longer (a reference is at most 4096
bytes, but no Core needs more than a few hundred to say a size)."""


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
