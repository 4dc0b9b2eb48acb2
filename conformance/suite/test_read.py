"""Read: page bounds for every allowed max_bytes, honest truncation, exact
concatenation, no split characters, and the read-chain budget."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import checks
from conformance import contract as C
from conformance.checks import expect

R = pytest.mark.requirement


def _joined(pages: list[dict[str, Any]]) -> str:
    return "".join(p["content"] for p in pages)


@R("READ-001", "READ-002", "READ-003", "READ-004", "READ-009", "READ-014", "READ-015", "WIRE-002")
def test_default_pages_fit_16384_bytes_and_rebuild_the_document(world: Any, record_exercised: Any) -> None:
    run_id = world.start_run()
    doc = world.docs.get("unicode")
    ref = world.ref_for(run_id, doc)
    pages = world.follow(ref, run_id)
    revisions = {p["revision"] for p in pages}
    expect(len(revisions) == 1, "READ-002", f"one chain reported several revisions: {sorted(revisions)}")
    last = pages[-1]
    if doc is None:  # a live Core's own document: bounds and flags, but nothing to compare the chain with
        record_exercised({"READ-001", "READ-002", "READ-003", "READ-004", "READ-009", "READ-014", "WIRE-002"})
        return
    expect(len(pages) > 1, "READ-004", "a 60 KB document fit into one default page")
    expect(_joined(pages) == doc.content, "READ-015", "the pages do not concatenate to the stored revision")
    expect(last["truncated"] is False, "READ-009", "the page that completes the document says truncated true")
    if "total_content_bytes" in last:
        expect(last["total_content_bytes"] == C.utf8_size(doc.content), "READ-014",
               f"total_content_bytes {last['total_content_bytes']}, the revision has {C.utf8_size(doc.content)} bytes")


@R("READ-005", "READ-015", "READ-016")
@pytest.mark.parametrize("max_bytes", [C.READ_MIN_MAX_BYTES, 5001, C.READ_MAX_MAX_BYTES])
def test_requested_max_bytes_bounds_every_page(world: Any, max_bytes: int, record_exercised: Any) -> None:
    """Bounds hold for any document; rebuilding it exactly needs the suite's own corpus."""
    doc = world.docs.get("unicode")
    run_id = world.start_run()
    pages = world.follow(world.ref_for(run_id, doc), run_id, max_bytes=max_bytes)
    if doc is None:
        record_exercised({"READ-005"})
        return
    position = 0
    for i, page in enumerate(pages):
        piece = page["content"]
        expect(piece == doc.content[position:position + len(piece)], "READ-016" if "\ufffd" in piece else "READ-015",
               f"page {i} does not continue the document at character {position}")
        position += len(piece)
    expect(position == len(doc.content), "READ-015", f"the chain ended after {position} of {len(doc.content)} characters")


@R("READ-006")
@pytest.mark.parametrize("max_bytes", [0, 1, C.READ_MIN_MAX_BYTES - 1, C.READ_MAX_MAX_BYTES + 1, 10**9, -4096])
def test_out_of_range_max_bytes_is_refused_or_clamped(world: Any, max_bytes: int) -> None:
    """The seed says a read can request 4096 to 32768 bytes and not what happens otherwise: a Core may
    refuse (a 4xx error envelope) or clamp into the range (the page fits the nearer bound), never 5xx,
    never a page over 32768. Strict expects this project's 400 invalid_request (CHOICES.md)."""
    run_id = world.start_run()
    ref = world.ref_for(run_id)
    response = world.read(ref, run_id, max_bytes=max_bytes)
    strict = world.cfg.strict_codes
    if strict or response.status_code != 200:
        envelope = checks.error_envelope(response, "READ-006", strict=strict)
        if strict:
            expect(response.status_code == world.cfg.status("invalid_request") and envelope["error"] == world.cfg.code("invalid_request"),
                   "READ-006", f"strict: max_bytes {max_bytes} answered HTTP {response.status_code} {envelope['error']!r}, "
                   f"configured {world.cfg.status('invalid_request')} {world.cfg.code('invalid_request')!r}")
        return
    clamped = C.READ_MIN_MAX_BYTES if max_bytes < C.READ_MIN_MAX_BYTES else C.READ_MAX_MAX_BYTES
    checks.page(response, ref=ref, max_bytes=clamped, requirement_bound="READ-006")


@R("READ-010", "READ-011", "READ-009", "READ-015")
def test_read_chain_stops_within_the_budget(world: Any) -> None:
    doc = world.need_doc("big")
    run_id = world.start_run()
    pages = world.follow(world.ref_for(run_id, doc), run_id, max_bytes=C.READ_MAX_MAX_BYTES)
    read = sum(C.utf8_size(p["content"]) for p in pages)
    expect(read <= C.READ_CHAIN_MAX_BYTES, "READ-010", f"the chain delivered {read} content bytes, over {C.READ_CHAIN_MAX_BYTES}")
    last = pages[-1]
    expect(last.get("budget_exhausted") is True, "READ-011", f"a {C.utf8_size(doc.content)}-byte document ended without budget_exhausted: {checks.describe({k: v for k, v in last.items() if k != 'content'})}")
    expect(last["truncated"] is True and last["next_cursor"] is None, "READ-011", "budget exhaustion must leave truncated true and next_cursor null")
    expect(doc.content.startswith(_joined(pages)), "READ-015", "the budget-limited chain is not a prefix of the document")


@R("READ-008")
@pytest.mark.parametrize("field", ["ref", "cursor"])
def test_oversized_reference_or_cursor_is_refused(world: Any, field: str) -> None:
    run_id = world.start_run()
    ref = world.ref_for(run_id)
    first = checks.page(world.read(ref, run_id, max_bytes=C.READ_MIN_MAX_BYTES), ref=ref, max_bytes=C.READ_MIN_MAX_BYTES, requirement_bound="READ-005")
    if field == "ref":
        response = world.read(ref + "A" * (C.REFERENCE_MAX_BYTES + 1 - len(ref) + 64), run_id)
    else:
        cursor = first["next_cursor"] or ref
        response = world.read(ref, run_id, cursor=cursor + "A" * (C.REFERENCE_MAX_BYTES + 1 - len(cursor) + 64))
    expect(response.status_code != 200, "READ-008", f"a {field} over {C.REFERENCE_MAX_BYTES} bytes was accepted")
    body = checks.body_of(response, "READ-008")
    if response.status_code == 400 and isinstance(body, dict) and body.get("error") in ("invalid_request", world.cfg.code("invalid_request")):
        checks.error_envelope(response, "READ-008", strict=world.cfg.strict_codes)  # refused by request validation: acceptable
    else:
        checks.reference_error(response, world.cfg, "reference_invalid", requirement="READ-008", text=world.document_text())
