"""search_knowledge's arguments: the call shapes (a query or an addressed item, never both),
the bounds of max_results, windows and offsets, values of the wrong JSON type, queries with no
searchable term, bounded excerpts, and the seed's defaults for omitted arguments.

Where the seed is open, every reading passes: an unknown argument is refused or has no effect; a
revision without an item is either of the two "required" codes. The project's own choices (exact
codes) are checked only with ``[wire] codes.strict = true``."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.search_knowledge.answers import (
    utf16_slice,
)
from conformance.search_knowledge.rules import (
    SK_002,
    SK_005,
    SK_013,
    SK_014,
    SK_015,
    SK_016,
    SK_017,
    SK_021,
    SK_022,
    SK_024,
)
from conformance.search_knowledge.world import INVALID, REQUIRED, SkWorld, typed
from conformance.target.rules import expect
from knowledge_schemas import load_registry

R = pytest.mark.requirement


@R("SK-005", "SK-002", "SK-022")
def test_mixed_and_missing_shapes(sk: SkWorld) -> None:
    sk.refused(
        sk.ask({"query": "x", "knowledge_item_id": "sk-window"}), {INVALID}, SK_005, "query with knowledge_item_id"
    )
    sk.refused(
        sk.ask({"query": "x", "knowledge_item_id": "sk-window", "knowledge_revision_id": "r"}),
        {INVALID},
        SK_005,
        "query with both addressed IDs",
    )
    sk.refused(
        sk.ask({"query": "x", "knowledge_revision_id": "r"}),
        {INVALID, *REQUIRED},
        SK_005,
        "query with a revision ID",
        INVALID,
    )
    sk.refused(sk.ask({}), REQUIRED, SK_022, "no query and no item", "knowledge_query_required")
    sk.refused(sk.ask({"query": "", "knowledge_item_id": ""}), REQUIRED, SK_022, "an empty query and an empty item")
    sk.refused(
        sk.ask({"knowledge_revision_id": "rev-x"}),
        REQUIRED,
        SK_002,
        "a revision without an item",
        "knowledge_item_required",
    )


@R("SK-014", "SK-021")
def test_max_results_bounds(sk: SkWorld) -> None:
    query = sk.corpus.token("many")
    for value in (1, 2, 49, 50):
        found = sk.search(query, max_results=value, mode="lexical", refused=SK_014)  # 1 and 50 are in the range
        expect(len(found.hits()) <= value, SK_014, f"max_results {value} gave {len(found.hits())} results")
    if sk.control is not None:  # twelve documents hold the token: a maximum shows when it is below twelve
        default = sk.search(query, mode="lexical").hits()
        expect(len(default) <= 10, SK_014, f"the default max_results gave {len(default)} results")
        if sk.strict:  # the seed says maximum; this project returns every match up to it
            expect(
                len(default) == 10,
                SK_014,
                f"the default over twelve matches gave {len(default)}, expected 10 (strict)",
            )
            expect(
                len(sk.search(query, max_results=2, mode="lexical").hits()) == 2,
                SK_014,
                "max_results 2 over twelve matching documents did not give two results (strict)",
            )
    for value in (0, 51, -1, 1000):
        sk.refused(sk.ask({"query": query, "max_results": value}), {INVALID}, SK_021, f"max_results {value}")


@R("SK-013", "SK-021")
def test_window_bounds(sk: SkWorld) -> None:
    sk.need_control()
    text = sk.corpus.texts["sk-window"]
    for limit in (1, 2, 9999, 10000):
        body = sk.read(knowledge_item_id="sk-window", limit_chars=limit)
        expect(
            body["content"] in (text[:limit], utf16_slice(text, 0, limit)),
            SK_013,
            f"limit_chars {limit} gave {len(body['content'])} code points",
        )
    for limit in (0, 10001, -5):
        sk.refused(
            sk.ask({"knowledge_item_id": "sk-window", "limit_chars": limit}),
            {INVALID},
            SK_021,
            f"limit_chars {limit}",
        )
    for offset in (0, 1):
        sk.read(knowledge_item_id="sk-window", offset=offset)
    for offset in (-1, -100):
        sk.refused(sk.ask({"knowledge_item_id": "sk-window", "offset": offset}), {INVALID}, SK_021, f"offset {offset}")


INTERNAL = "jsonrpc:-32603"  # JSON-RPC's internal error: the server broke, it did not validate


@R("SK-024")
def test_malformed_values_fail_validation(sk: SkWorld) -> None:
    """A boundary value of the wrong JSON type is a validation failure (seed 003 names no code for
    it): refused, with a code or as a tool error, never served and never an internal error."""
    for arguments in (
        {"query": "x", "max_results": "5"},
        {"query": "x", "max_results": 2.5},
        {"query": "x", "alpha": "high"},
        {"query": "x", "alpha": "0.5"},
        {"knowledge_item_id": "sk-window", "offset": "3"},
        {"knowledge_item_id": "sk-window", "offset": 1.5},
        {"knowledge_item_id": "sk-window", "limit_chars": True},
        {"knowledge_item_id": "sk-window", "limit_chars": "4000"},
        {"knowledge_item_id": "sk-window", "limit_chars": 40.5},
        {"query": 42},
    ):  # each numeric field as a string, a fraction or a boolean, one field at a time
        answer = sk.ask(arguments)
        expect(
            not answer.ok and (answer.is_error or answer.codes),
            SK_024,
            f"malformed {arguments} was accepted: {answer.raw}",
        )
        broke = {c for c in answer.codes if c == INTERNAL or "internal" in c}
        expect(not broke, SK_024, f"malformed {arguments} broke the server instead of failing validation: {answer.raw}")
    if sk.strict:
        answer = sk.ask({"query": "q" * 100_000})
        expect(not answer.ok, SK_024, "a 100000-character query was accepted (strict)")


# Worst cases for a ranking: no term at all (an empty term list, an all-zero embedding whose
# norm is 0) and only words a tokenizer may drop.
TERMLESS_QUERIES = ("?!", "\U0001f642", "...", "-", "the of and")


@R("SK-017")
def test_a_query_without_searchable_terms_is_still_answered(sk: SkWorld) -> None:
    """A query was supplied, in each mode, so the answer is a ``knowledge_search`` result (no
    results is fine) or a refusal that names a seed code (``knowledge_invalid_request``,
    ``knowledge_query_required``): never an internal error, nor an error without a code."""
    for mode in ("hybrid", "lexical", "semantic", "rrf"):
        for query in TERMLESS_QUERIES:
            answer = sk.ask({"query": query, "mode": mode})
            if not answer.ok and answer.codes & (REQUIRED | {INVALID}):
                continue
            expect(
                answer.ok,
                SK_017,
                f"query {query!r} in {mode} mode was neither answered nor refused with a seed code: {answer.raw}",
            )
            typed(answer, "knowledge_search", SK_017)
            errors = load_registry().errors("search-knowledge-search-result", answer.body)
            expect(not errors, SK_017, f"query {query!r} in {mode} mode: not a knowledge_search result: {errors[:3]}")


@R("SK-017")
def test_an_excerpt_is_bounded_however_long_the_document(sk: SkWorld) -> None:
    """sk-long runs past one addressed window (10000 characters), and its token finds it: in each
    mode a result for it must carry a bounded excerpt, not the document (every query result's
    excerpt is held to the bound where the answer is read, strict to 2000)."""
    sk.need_control()
    reached = []
    for mode in ("lexical", "hybrid", "semantic", "rrf"):
        hits = sk.search(sk.corpus.token("long"), mode=mode).hits()
        reached += [mode for h in hits if h.get("knowledge_item_id") == "sk-long"]
    if not reached:
        pytest.skip(
            "not verified: no query for sk-long's own token finds it, so no excerpt of a document longer than "
            "one addressed window shows"
        )


@R("SK-014", "SK-015", "SK-016")
def test_omitted_arguments_take_the_seeds_defaults(sk: SkWorld) -> None:
    """A query without ``mode``, ``alpha`` and ``max_results`` is the query with hybrid, 0.5 and
    10 (seed 003's defaults): the same results in the same order. Judged only where the explicit
    query gives the same answer twice (a server may break ties differently from call to call)."""
    query = sk.corpus.direction_query
    explicit: dict[str, Any] = {"mode": "hybrid", "alpha": 0.5, "max_results": 10}
    first, again = sk.search(query, **explicit).items(), sk.search(query, **explicit).items()
    if first != again:
        pytest.skip("not verified: the same explicit query answered two orders (ties broken per call)")
    if not first:
        pytest.skip("not verified: the hybrid query found nothing, so no default shows")
    omitted = sk.search(query).items()
    for name, value in (("mode", "hybrid"), ("alpha", 0.5), ("max_results", 10)):
        alone = sk.search(query, **{k: v for k, v in explicit.items() if k != name}).items()
        requirement = {"mode": SK_015, "alpha": SK_016, "max_results": SK_014}[name]
        expect(
            alone == first,
            requirement,
            f"without {name} the query answers {alone[:6]}, with {name}={value!r} {first[:6]}: {value!r} is its default",
        )
    expect(omitted == first, SK_016, f"with no optional argument the query answers {omitted[:6]}, not {first[:6]}")
