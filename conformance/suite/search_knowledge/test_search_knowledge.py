"""The ``search_knowledge`` MCP tool of seed 003 (SK-*), over the Agent Session MCP path.

A world of its own (through control): a workspace with bases the caller can see, one it may
not see (its scope), one archived; archived and unpublished items; an item that gets a new
revision; multi-byte text for windows; and a corpus where lexical and semantic evidence
disagree. The caller is alice; bob has lost ``knowledge:read``; carol sees every base.

One transport suffices (streamable HTTP when there is one): the tool's behaviour does not
depend on it, and the MCP profile (test_mcp.py) checks the transports themselves.

Where the seed is open, every reading passes: a character is a code point or a UTF-16 unit;
an unknown argument is refused or has no effect; a revision without an item is either of the
two "required" codes; an offset past the end is an empty window or a refusal. The project's
own choices (code points, exact codes) are checked only with ``[wire] codes.strict = true``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.mcp.session import McpSession
from conformance.plugin.options import option
from conformance.search_knowledge.answers import (
    ARCHIVED_BASE,
    MAIN,
    OTHER,
    PRIVATE,
    Answer,
    Corpus,
    call,
    envelope_types,
    message_of,
    not_offered,
    open_sessions,
    pairs,
    utf16_len,
    utf16_slice,
)
from conformance.search_knowledge.rules import (
    SK_001,
    SK_002,
    SK_003,
    SK_004,
    SK_005,
    SK_007,
    SK_008,
    SK_009,
    SK_010,
    SK_011,
    SK_012,
    SK_013,
    SK_014,
    SK_015,
    SK_016,
    SK_017,
    SK_018,
    SK_019,
    SK_020,
    SK_021,
    SK_022,
    SK_023,
    SK_024,
    SK_025,
    SK_026,
    SK_027,
    SK_028,
    SK_029,
    SK_030,
)
from conformance.server.world import World
from conformance.target.config import TargetConfig
from conformance.target.control import KnowledgeControl
from conformance.target.open import Target
from conformance.target.rules import Rule, expect
from knowledge_schemas import load_registry

R = pytest.mark.requirement
INVALID, UNAVAILABLE = "knowledge_invalid_request", "knowledge_resource_unavailable"
REQUIRED = {"knowledge_query_required", "knowledge_item_required"}
_worlds = itertools.count(1)


@dataclass
class SkWorld:
    corpus: Corpus
    control: KnowledgeControl | None
    sessions: dict[str, McpSession]
    strict: bool
    revisions: dict[str, str] = field(default_factory=dict)  # item -> first revision ID

    def ask(self, arguments: dict[str, Any], who: str = "alice") -> Answer:
        session = self.sessions.get(who)
        if session is None:
            pytest.skip(
                f"not verified: no MCP session acting as {who} (needs control and an MCP target that takes its token)"
            )
        return call(session, arguments)

    def need_control(self) -> KnowledgeControl:
        if self.control is None:
            pytest.skip("not verified: needs the test-control extension to build the search_knowledge world")
        return self.control

    def search(self, query: str, who: str = "alice", *, refused: Rule = SK_001, **extra: Any) -> Answer:
        """A query search that must succeed; ``refused`` is the rule a refusal breaks (the bound a
        probe sits on, or else SK-001's call shape)."""
        answer = self.ask({"query": query, **extra}, who)
        _typed(answer, "knowledge_search", SK_017)
        expect(answer.ok, refused, f"query search {extra} failed: {answer.raw}")
        errors = load_registry().errors("search-knowledge-search-result", answer.body)
        expect(not errors, SK_017, f"the query result is not knowledge_search: {errors[:3]}")
        if self.strict:  # this project's excerpt bound and member name (CHOICES.md)
            for hit in answer.hits():
                excerpt = str(hit.get("excerpt", ""))
                expect(len(excerpt) <= STRICT_EXCERPT, SK_017, f"strict: an excerpt of {len(excerpt)} characters")
                expect("source" in hit, SK_017, f"strict: a result without source: {sorted(hit)}")
        return answer

    def read(self, who: str = "alice", **arguments: Any) -> dict[str, Any]:
        answer = self.ask(arguments, who)
        _typed(answer, "knowledge", SK_018)
        expect(answer.ok, SK_001, f"addressed read {arguments} failed: {answer.raw}")
        errors = load_registry().errors("search-knowledge-read-result", answer.body)
        expect(not errors, SK_018, f"the addressed result is not type knowledge: {errors[:3]}")
        assert answer.body is not None
        return answer.body


def _typed(answer: Answer, kind: str, requirement: Rule) -> None:
    """A success (no error, no code) of another ``type`` breaks the result shape, not the call shape."""
    if answer.body is not None and not answer.is_error and not answer.codes:
        expect(
            answer.body.get("type") == kind,
            requirement,
            f"a successful answer has type {answer.body.get('type')!r}, not {kind!r}",
        )


STRICT_EXCERPT = 2000  # characters of a result's excerpt under strict (the seed says "bounded excerpt")


def _need_agent_path(cfg: TargetConfig, target: Target, chosen: str | None, world: World) -> None:
    """Before anything is provisioned: with no Agent Session MCP server to ask, nothing here can be verified."""
    from conformance.mcp.endpoints import agent_endpoints, skipped

    if not agent_endpoints(cfg, target, chosen, str(world.primary.token), world.primary.route):
        pytest.skip(
            "not verified: MCP checks skipped: --mcp-target none"
            if skipped(chosen)
            else "not verified: no Agent Session MCP server (--mcp-target or [mcp])"
        )


@pytest.fixture(scope="module")
def sk(world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config) -> Iterator[SkWorld]:
    chosen = option(pytestconfig, "--mcp-target")
    _need_agent_path(kc_config, kc_target, chosen, world)
    corpus, control = Corpus(), None
    who: dict[str, tuple[str, str]] = {"alice": (str(world.primary.token), world.primary.route)}
    revisions: dict[str, str] = {}
    if world.control is not None:
        route = f"kc-{kc_target.settings.namespace}-sk-{next(_worlds)}"
        world.control.create_workspace(route)
        revisions = world.control.replace_corpus(route, corpus.build())
        control = world.control.knowledge(route)
        world.control.set_scope(route, "alice", [MAIN, OTHER, ARCHIVED_BASE])
        control.item_state("sk-archived", active=False)
        control.item_state("sk-unpublished", published=False)
        control.base_state(ARCHIVED_BASE, False)
        control.scopes("bob", [])
        who = {
            name: (m["token"], m["route"])
            for name in ("alice", "bob", "carol")
            for m in [world.control.mint(name, route)]
        }
    with ExitStack() as stack:
        sessions, fixed = open_sessions(stack, kc_config, kc_target, chosen, who)
        if fixed:
            control = None  # the one session is not the world's caller: only checks without the world can run
        if "alice" not in sessions:
            from conformance.mcp.endpoints import skipped

            pytest.skip(
                "not verified: MCP checks skipped: --mcp-target none"
                if skipped(chosen)
                else "not verified: no Agent Session MCP server (--mcp-target or [mcp])"
            )
        probe = call(sessions["alice"], {"query": "knowledge"}, judge=False)  # offered at all: judged by the tests
        if not_offered(probe):
            pytest.skip(f"not verified: the MCP server does not offer search_knowledge ({probe.raw[:120]})")
        yield SkWorld(corpus, control, sessions, kc_config.strict_codes, revisions)


def _code(
    answer: Answer,
    allowed: set[str],
    requirement: Rule,
    what: str,
    strict: str | None = None,
    *,
    sk: SkWorld | None = None,
) -> None:
    expect(not answer.ok, requirement, f"{what} was accepted: {answer.raw}")
    expect(
        answer.codes & allowed,
        requirement,
        f"{what}: expected {sorted(allowed)}, got {sorted(answer.codes)}: {answer.raw}",
    )
    if strict and sk is not None and sk.strict:
        expect(strict in answer.codes, requirement, f"{what}: expected {strict} (strict), got {sorted(answer.codes)}")


def _rank(order: list[str], item: str) -> float:
    return order.index(item) if item in order else math.inf


# ----------------------------------------------------------------- shapes and bounds
@R("SK-005", "SK-002", "SK-022")
def test_mixed_and_missing_shapes(sk: SkWorld) -> None:
    _code(sk.ask({"query": "x", "knowledge_item_id": "sk-window"}), {INVALID}, SK_005, "query with knowledge_item_id")
    _code(
        sk.ask({"query": "x", "knowledge_item_id": "sk-window", "knowledge_revision_id": "r"}),
        {INVALID},
        SK_005,
        "query with both addressed IDs",
    )
    _code(
        sk.ask({"query": "x", "knowledge_revision_id": "r"}),
        {INVALID, *REQUIRED},
        SK_005,
        "query with a revision ID",
        INVALID,
        sk=sk,
    )
    _code(sk.ask({}), REQUIRED, SK_022, "no query and no item", "knowledge_query_required", sk=sk)
    _code(sk.ask({"query": "", "knowledge_item_id": ""}), REQUIRED, SK_022, "an empty query and an empty item")
    _code(
        sk.ask({"knowledge_revision_id": "rev-x"}),
        REQUIRED,
        SK_002,
        "a revision without an item",
        "knowledge_item_required",
        sk=sk,
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
        _code(sk.ask({"query": query, "max_results": value}), {INVALID}, SK_021, f"max_results {value}")


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
        _code(
            sk.ask({"knowledge_item_id": "sk-window", "limit_chars": limit}),
            {INVALID},
            SK_021,
            f"limit_chars {limit}",
        )
    for offset in (0, 1):
        sk.read(knowledge_item_id="sk-window", offset=offset)
    for offset in (-1, -100):
        _code(sk.ask({"knowledge_item_id": "sk-window", "offset": offset}), {INVALID}, SK_021, f"offset {offset}")


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
            _typed(answer, "knowledge_search", SK_017)
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


# ----------------------------------------------------------------- modes
@R("SK-015")
def test_unrecognised_modes_become_hybrid(sk: SkWorld) -> None:
    query = sk.corpus.direction_query
    hybrid = sk.search(query, mode="hybrid", max_results=50).items()
    if not hybrid:
        pytest.skip("not verified: hybrid search found nothing: an empty list shows no normalisation to hybrid")
    for mode in ("bm25-please", "vector", "HYBRID-ish"):
        answer = sk.ask({"query": query, "mode": mode, "max_results": 50})
        expect(answer.ok, SK_015, f"mode {mode!r} was refused instead of becoming hybrid: {answer.raw}")
        expect(answer.items() == hybrid, SK_015, f"mode {mode!r} ranks {answer.items()[:5]}, hybrid ranks {hybrid[:5]}")
    for mode in ("lexical", "semantic", "rrf"):
        sk.search(query, mode=mode)


def _disagreeing(lexical: list[str], semantic: list[str]) -> list[tuple[str, str]]:
    """Pairs (a, b) that lexical ranks a before b and semantic b before a."""
    items = sorted(set(lexical) | set(semantic))
    return [
        (a, b)
        for a in items
        for b in items
        if _rank(lexical, a) < _rank(lexical, b) and _rank(semantic, b) < _rank(semantic, a)
    ]


def _orders(sk: SkWorld, query: str) -> tuple[list[str], list[str]]:
    """The item orders lexical and semantic search give ``query``."""
    return (
        sk.search(query, mode="lexical", max_results=50).items(),
        sk.search(query, mode="semantic", max_results=50).items(),
    )


def _both_orders(sk: SkWorld) -> tuple[str, list[str], list[str]]:
    """The direction query, and the item orders lexical and semantic search give it."""
    query = sk.corpus.direction_query
    return (query, *_orders(sk, query))


@R("SK-016")
def test_alpha_is_the_lexical_weight(sk: SkWorld) -> None:
    sk.need_control()
    query, lexical, semantic = _both_orders(sk)
    disagree = _disagreeing(lexical, semantic)
    if not disagree:
        pytest.skip("not verified: lexical and semantic search agree on this corpus (nothing shows alpha's direction)")
    judged = 0
    for alpha, like, order in ((1.0, "lexical", lexical), (0.0, "semantic", semantic)):
        hybrid = sk.search(query, mode="hybrid", alpha=alpha, max_results=50).items()
        for a, b in disagree:
            first, second = (a, b) if like == "lexical" else (b, a)
            if math.isinf(_rank(hybrid, first)) or math.isinf(_rank(hybrid, second)):
                continue  # a hybrid candidate pool may leave out what one retriever ranks low: judge pairs it shows
            judged += 1
            expect(
                _rank(hybrid, first) < _rank(hybrid, second),
                SK_016,
                f"hybrid alpha={alpha} ranks {second} before {first}, as {like} search does not "
                f"({like}: {order[:6]}; hybrid: {hybrid[:6]}): alpha must be the lexical weight",
            )
    if not judged:
        pytest.skip("not verified: hybrid search shows no pair that lexical and semantic search order differently")


@R("SK-016")
def test_an_edge_alpha_leaves_the_other_evidence_no_weight(sk: SkWorld) -> None:
    """At alpha 1 the semantic weight is 1 - alpha = 0: a document lexical search does not find
    has no lexical evidence, so its hybrid score is no higher than that of any document lexical
    search finds (at alpha 0 the same with the kinds swapped). For the evidence query, whose
    words no document but sk-exact holds (SK-028), every other document has exactly no lexical
    evidence, so at alpha 1 they all score the same, whatever their meaning. Judged by score:
    rank alone cannot tell a reordering from a tie (a min-max normalisation gives the weakest
    document of a list 0, the score of one the list leaves out), so a Core that gives no
    ``final``/``hybrid`` score is not judged here."""
    sk.need_control()
    judged = 0
    for query in dict.fromkeys((sk.corpus.evidence_query, sk.corpus.direction_query)):
        lexical, semantic = _orders(sk, query)
        for alpha, like, order in ((1.0, "lexical", lexical), (0.0, "semantic", semantic)):
            if not order or len(order) >= 50:
                continue  # a list cut at max_results may leave out a document with evidence
            scored = {
                item: float(value)
                for item, value in _scores(sk.search(query, mode="hybrid", alpha=alpha, max_results=50))
                if isinstance(value, (int, float)) and not isinstance(value, bool)
            }
            found = {item: value for item, value in scored.items() if item in order}
            left_out = {item: value for item, value in scored.items() if item not in order}
            if not left_out:
                continue
            judged += 1
            if found:
                weakest = min(found, key=lambda i: found[i])
                highest = max(left_out, key=lambda i: left_out[i])
                expect(
                    left_out[highest] <= found[weakest],
                    SK_016,
                    f"hybrid alpha={alpha:g} for {query!r} scores {highest} {left_out[highest]}, which {like} search "
                    f"does not find, above {weakest} ({found[weakest]}), which it finds ({like}: {order[:6]}): the "
                    f"other kind's weight is 1 - alpha = {1 - alpha:g}",
                )
            if query == sk.corpus.evidence_query and alpha == 1.0:
                low, high = min(left_out.values()), max(left_out.values())
                expect(
                    math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-12),
                    SK_016,
                    f"hybrid alpha=1 for {query!r} scores the documents that share no term with it from {low} to "
                    f"{high} ({sorted(left_out.items(), key=lambda kv: -kv[1])[:4]}): with no lexical evidence and "
                    "a semantic weight of 1 - alpha = 0 they must all score the same",
                )
    if not judged:
        pytest.skip("not verified: no scored hybrid result at alpha 0 or 1 that the other list leaves out")


def _scores(answer: Answer) -> list[tuple[str, Any]]:
    return [
        (str(h.get("knowledge_item_id")), (h.get("scores") or {}).get("final", (h.get("scores") or {}).get("hybrid")))
        for h in answer.hits()
    ]


@R("SK-016")
def test_alpha_is_clamped(sk: SkWorld) -> None:
    query = sk.corpus.direction_query
    for outside, edge in ((5.0, 1.0), (1.5, 1.0), (-3.0, 0.0), (-0.25, 0.0)):
        at_edge = sk.search(query, mode="hybrid", alpha=edge, max_results=50)
        if not at_edge.items():
            pytest.skip(f"not verified: hybrid search at alpha {edge} found nothing: two empty lists show no clamping")
        answer = sk.ask({"query": query, "mode": "hybrid", "alpha": outside, "max_results": 50})
        expect(answer.ok, SK_016, f"alpha {outside} was refused instead of clamped: {answer.raw}")
        expect(
            answer.items() == at_edge.items(),
            SK_016,
            f"alpha {outside} ranks {answer.items()[:6]}, alpha {edge} ranks {at_edge.items()[:6]}: not clamped",
        )
        got, want = _scores(answer), _scores(at_edge)
        same = all(
            not isinstance(x, (int, float))
            or not isinstance(y, (int, float))
            or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
            for (_, x), (_, y) in zip(got, want, strict=True)
        )
        expect(same, SK_016, f"alpha {outside} scores {got[:4]}, alpha {edge} scores {want[:4]}: not clamped")


@R("SK-025")
@pytest.mark.parametrize("which", ["direction", "evidence"])
def test_rrf_fuses_the_lexical_and_semantic_ranks(sk: SkWorld, which: str) -> None:
    sk.need_control()
    query = sk.corpus.direction_query if which == "direction" else sk.corpus.evidence_query
    lexical, semantic = _orders(sk, query)
    fused = sk.search(query, mode="rrf", max_results=50)
    expected = {
        i: sum(1 / (60 + order.index(i) + 1) for order in (lexical, semantic) if i in order)
        for i in set(lexical) | set(semantic)
    }
    order = [i for i in fused.items() if i in expected]
    expect(order, SK_025, "rrf search returned none of the documents lexical and semantic search rank")
    for a, b in pairs(order):
        expect(
            expected[a] >= expected[b] - 1e-12,
            SK_025,
            f"rrf ranks {a} ({expected[a]:.6f}) before {b} ({expected[b]:.6f}); 1/(60+rank) sums say otherwise",
        )
    best = max(expected.values())
    top = [i for i, v in expected.items() if math.isclose(v, best, abs_tol=1e-12)]
    expect(order[0] in top, SK_025, f"rrf's first result is {order[0]}, the fused sums put {top} first")
    for hit in fused.hits() if sk.strict else ():  # modes are judged by rank; strict also by the fused value
        value = (hit.get("scores") or {}).get("rrf")
        item = str(hit.get("knowledge_item_id"))
        if isinstance(value, (int, float)) and item in expected:
            expect(
                math.isclose(value, expected[item], rel_tol=1e-6),
                SK_025,
                f"{item} has rrf score {value}, 1/(60+rank) sums give {expected[item]:.8f}",
            )


# ----------------------------------------------------------------- each mode's own evidence
# The evidence query holds a rare term only sk-exact holds (in unrelated text) and a word no
# document holds whole; sk-meaning holds only other forms of that word ("photographer" for
# "photography": a shared stem and most character n-grams, so a concept table, a stemmer, an
# n-gram embedding and a trained model all relate them; a Porter or Snowball stemmer does not
# conflate them into one term). Modes are judged by which documents they find and by rank.
@R("SK-028")
def test_lexical_mode_ranks_by_shared_terms(sk: SkWorld) -> None:
    sk.need_control()
    lexical = sk.search(sk.corpus.evidence_query, mode="lexical", max_results=50).items()
    expect(
        lexical[:1] == ["sk-exact"],
        SK_028,
        f"lexical search ranks {lexical[:5]}: sk-exact, the only document holding the query's rare term, is not first",
    )
    expect(
        "sk-meaning" not in lexical,
        SK_028,
        f"lexical search finds sk-meaning, which shares no term with the query ({lexical[:5]}): that is not lexical evidence",
    )


@R("SK-029")
def test_semantic_mode_ranks_by_meaning(sk: SkWorld) -> None:
    """The seed does not define semantic similarity: a semantic search that finds neither the
    document related by meaning nor the one holding the rare term shows nothing (not verified);
    one that finds exactly what lexical search finds, and nothing sharing no term, is lexical."""
    sk.need_control()
    lexical, semantic = _orders(sk, sk.corpus.evidence_query)
    beyond = [i for i in semantic if i not in lexical]
    if not beyond and "sk-exact" not in semantic:
        pytest.skip(f"not verified: semantic search found neither sk-meaning nor sk-exact ({semantic[:5]})")
    expect(
        bool(beyond),
        SK_029,
        f"semantic search finds exactly what lexical search finds ({semantic[:5]}) and no document that shares no "
        "term with the query, not even sk-meaning (forms of the query's word): it ranks by shared terms",
    )


@R("SK-030")
def test_hybrid_mode_weighs_both_lists(sk: SkWorld) -> None:
    """At the default alpha both weights are positive: the best of each list is among hybrid's
    results, and a document ahead of another in both lists (and found by a list the other is
    not) is ahead in hybrid too, whatever monotone normalisation a Core uses."""
    sk.need_control()
    query = sk.corpus.evidence_query
    lexical, semantic = _orders(sk, query)
    hybrid = sk.search(query, mode="hybrid", max_results=50).items()
    for kind, order in (("lexical", lexical), ("semantic", semantic)):
        expect(
            not order or order[0] in hybrid,
            SK_030,
            f"hybrid search ({hybrid[:6]}) leaves out {order[:1]}, the best {kind} result: it ignores {kind} evidence",
        )
    for a, b in pairs(sorted(set(lexical) | set(semantic))):
        for first, second in ((a, b), (b, a)):
            ahead = all(_rank(o, first) <= _rank(o, second) for o in (lexical, semantic))
            strictly = any(first in o and second not in o for o in (lexical, semantic))
            if ahead and strictly and first in hybrid and second in hybrid:
                expect(
                    _rank(hybrid, first) < _rank(hybrid, second),
                    SK_030,
                    f"hybrid ranks {second} before {first}, which is ahead in lexical ({lexical[:6]}) and in "
                    f"semantic search ({semantic[:6]})",
                )


# ----------------------------------------------------------------- revisions and states
@R("SK-003", "SK-004", "SK-001", "SK-017", "SK-018")
def test_query_follows_the_current_revision_and_reads_address_revisions(sk: SkWorld) -> None:
    control = sk.need_control()
    first, old_title = sk.revisions["sk-evolving"], sk.corpus.titles["sk-evolving"]
    new_title, new_text = "Changed course", f"second revision {sk.corpus.token('second')} replaces the earlier"
    current = control.publish("sk-evolving", new_text, title=new_title)
    found = sk.search(sk.corpus.token("second"), mode="lexical")
    hits = [h for h in found.hits() if h.get("knowledge_item_id") == "sk-evolving"]
    expect(hits, SK_003, "a query for the new revision's text does not find the item")
    for hit in hits:
        _of_current_revision(hit, current, (new_title, new_text), (old_title, sk.corpus.texts["sk-evolving"]))
    for mode in ("lexical", "hybrid", "semantic", "rrf"):
        old = sk.search(sk.corpus.token("first"), mode=mode, max_results=50)
        mine = [h for h in old.hits() if h.get("knowledge_item_id") == "sk-evolving"]
        stale = [h.get("knowledge_revision_id") for h in mine if h.get("knowledge_revision_id") != current]
        expect(not stale, SK_003, f"{mode} search returned the historical revision {stale} of sk-evolving")
        expect(
            mode != "lexical" or not mine,
            SK_003,
            f"lexical search for {sk.corpus.token('first')}, a term only the historical revision holds, finds "
            "sk-evolving: it ranks a revision that is not current",
        )
        for hit in mine:
            _of_current_revision(hit, current, (new_title, new_text), (old_title, sk.corpus.texts["sk-evolving"]))
    body = sk.read(knowledge_item_id="sk-evolving")
    expect(
        body["knowledge_revision_id"] == current and body["content"] == new_text and body["title"] == new_title,
        SK_004,
        f"an addressed read without revision gave revision {body['knowledge_revision_id']} titled "
        f"{body['title']!r}; the current one is {current}, titled {new_title!r}",
    )
    pinned = sk.read(knowledge_item_id="sk-evolving", knowledge_revision_id=first)
    expect(
        pinned["knowledge_revision_id"] == first
        and pinned["content"] == sk.corpus.texts["sk-evolving"]
        and pinned["title"] == old_title,
        SK_004,
        "the addressed immutable revision did not read as it was published",
    )


def _revision_ids(value: Any) -> Iterator[tuple[str, Any]]:
    """Every member anywhere in ``value`` that names the revision it is of, with its value."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("knowledge_revision_id", "revision_id", "current_revision_id"):
                yield str(key), inner
            yield from _revision_ids(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _revision_ids(inner)


def _of_current_revision(hit: dict[str, Any], current: str, now: tuple[str, str], before: tuple[str, str]) -> None:
    """Every member of a query result is the current revision's: each revision ID it names, its
    title, and its excerpt (no term only the previous revision holds; an excerpt's first and last
    words may be cut)."""
    named = [(k, v) for k, v in _revision_ids(hit) if str(v) != str(current)]
    expect(not named, SK_003, f"a result for revision {current} also names {named}")
    title = str(hit.get("title", ""))
    expect(
        now[0] in title and before[0] not in title,
        SK_003,
        f"a result for the current revision {current} is titled {title!r}; its title is {now[0]!r} ({before[0]!r} before)",
    )
    inner = _WORDS.findall(str(hit.get("excerpt", "")).casefold())[1:-1]
    only_before = set(_WORDS.findall(f"{before[0]} {before[1]}".casefold())) - set(
        _WORDS.findall(f"{now[0]} {now[1]}".casefold())
    )
    leaked = sorted(set(inner) & only_before)
    expect(
        not leaked, SK_003, f"the excerpt of the current revision {current} holds {leaked}, words of the previous one"
    )


_WORDS = re.compile(r"\w+")


@R("SK-003", "SK-011")
def test_query_shows_only_visible_published_items_and_narrows_by_base(sk: SkWorld) -> None:
    sk.need_control()
    for mode in ("lexical", "hybrid", "rrf", "semantic"):
        hidden = sk.search(sk.corpus.token("hidden"), mode=mode, max_results=50).items()
        shown = sorted(set(hidden) & {"sk-archived", "sk-unpublished", "sk-private", "sk-in-archived-base"})
        expect(not shown, SK_003, f"{mode} search shows {shown}: archived, unpublished or unauthorized")
    shared = sk.corpus.token("shared")
    both = sk.search(shared, mode="lexical").items()
    expect({"sk-other", "sk-main-shared"} <= set(both), SK_003, f"a query over both bases found {both}")
    narrowed = sk.search(shared, mode="lexical", knowledge_base_id=OTHER)
    expect(
        "sk-main-shared" not in narrowed.items() and "sk-other" in narrowed.items(),
        SK_011,
        f"knowledge_base_id {OTHER} gave {narrowed.items()}",
    )
    expect(
        all(h.get("knowledge_base_id", OTHER) == OTHER for h in narrowed.hits()),
        SK_011,
        "a narrowed hit names another base",
    )
    _code(
        sk.ask({"knowledge_item_id": "sk-window", "knowledge_base_id": OTHER}),
        {UNAVAILABLE},
        SK_011,
        "an addressed item validated against another base",
    )
    sk.read(knowledge_item_id="sk-window", knowledge_base_id=MAIN)


@R("SK-023")
def test_unavailable_resources_are_indistinguishable(sk: SkWorld) -> None:
    sk.need_control()
    cases = {
        "absent item": {"knowledge_item_id": "sk-no-such-item"},
        "unauthorized item": {"knowledge_item_id": "sk-private"},
        "archived item": {"knowledge_item_id": "sk-archived"},
        "unpublished item": {"knowledge_item_id": "sk-unpublished"},
        "item in an archived base": {"knowledge_item_id": "sk-in-archived-base"},
        "absent revision": {"knowledge_item_id": "sk-window", "knowledge_revision_id": "rev-no-such-revision"},
        "another item's revision": {
            "knowledge_item_id": "sk-window",
            "knowledge_revision_id": sk.revisions["sk-lexical"],
        },
    }
    for what, item in {  # naming the item's own revision must not bypass its state or the caller's access
        "unauthorized item": "sk-private",
        "archived item": "sk-archived",
        "unpublished item": "sk-unpublished",
        "item in an archived base": "sk-in-archived-base",
    }.items():
        if item in sk.revisions:
            cases[f"{what}, its own revision named"] = {
                "knowledge_item_id": item,
                "knowledge_revision_id": sk.revisions[item],
            }
    seen: dict[str, tuple[Any, ...]] = {}
    for what, arguments in cases.items():
        answer = sk.ask(arguments)
        _code(answer, {UNAVAILABLE}, SK_023, what)
        text = message_of(answer)
        for value in arguments.values():
            text = text.replace(value, "<id>")
        seen[what] = (
            answer.is_error,
            tuple(sorted(answer.codes)),
            re.sub(r"\s+", " ", text),
            tuple(sorted(answer.body or {})),
        )
    if sk.strict:  # one answer, word for word, is this project's reading of "indistinguishable" (CHOICES.md)
        distinct = {v: k for k, v in seen.items()}
        expect(
            len(distinct) == 1, SK_023, f"strict: unavailable resources answer differently: {sorted(distinct.values())}"
        )
    for base in (PRIVATE, ARCHIVED_BASE, "kb-no-such-base"):
        answer = sk.ask({"query": sk.corpus.token("hidden"), "knowledge_base_id": base})
        expect(not answer.items(), SK_023, f"a query narrowed to {base} returned {answer.items()}")
        expect(answer.ok or answer.codes & {UNAVAILABLE}, SK_023, f"a query narrowed to {base}: {answer.raw}")


@R("SK-010")
def test_owner_and_scope_arguments_do_not_change_the_caller(sk: SkWorld) -> None:
    sk.need_control()
    for extra in ({"owner": "carol"}, {"scope": "all"}, {"team": "all"}, {"owner_id": "carol"}):
        answer = sk.ask({"query": sk.corpus.token("private"), "mode": "lexical", **extra})
        expect("sk-private" not in answer.items(), SK_010, f"with {extra} the caller found an item outside its scope")
        read = sk.ask({"knowledge_item_id": "sk-private", **extra})
        expect(not read.ok, SK_010, f"with {extra} the caller read an item outside its scope")
    expect(
        "sk-private" in sk.search(sk.corpus.token("private"), who="carol", mode="lexical").items(),
        SK_010,
        "carol, who sees every base, does not find the private item: the check shows nothing",
    )


@R("SK-008")
def test_knowledge_read_is_required(sk: SkWorld) -> None:
    sk.need_control()
    for arguments in ({"query": sk.corpus.token("many")}, {"knowledge_item_id": "sk-window"}):
        answer = sk.ask(arguments, who="bob")
        expect(
            not answer.ok and not answer.hits() and "content" not in (answer.body or {}),
            SK_008,
            f"a caller without knowledge:read got {answer.raw}",
        )


@R("SK-020")
def test_runtime_switch_off_is_knowledge_unavailable(sk: SkWorld) -> None:
    control = sk.need_control()
    control.runtime(False)
    try:
        for arguments in ({"query": sk.corpus.token("many")}, {"knowledge_item_id": "sk-window"}):
            answer = sk.ask(arguments)
            expect(answer.has("knowledge_runtime_disabled"), SK_020, f"runtime off answered {answer.raw}")
            expect(
                "knowledge_unavailable" in envelope_types(answer),
                SK_020,
                f"no knowledge_unavailable envelope: {answer.raw}",
            )
            expect(
                not answer.hits() and "content" not in (answer.body or {}),
                SK_020,
                "runtime off still returned knowledge",
            )
    finally:
        control.runtime(True)
    sk.search(sk.corpus.token("many"))


@R("SK-007", "SK-019")
def test_read_only_no_audit_event(sk: SkWorld) -> None:
    control = sk.need_control()
    before = control.audit()
    if before is None:
        pytest.skip("not verified: the control extension does not show the Knowledge audit log")
    answers = [  # asked, not searched: the audit envelope is judged before the result's shape
        sk.ask({"query": sk.corpus.token("many")}),
        sk.ask({"knowledge_item_id": "sk-window"}),
        sk.ask({"knowledge_item_id": "sk-no-such-item"}),
    ]
    for answer in answers:
        expect(
            not {"audit", "audit_event", "audit_events"} & set(answer.body or {}),
            SK_019,
            "a result carries an audit envelope",
        )
    after = control.audit()
    expect(after == before, SK_007, f"search_knowledge wrote audit events: {(after or [])[len(before) :][:3]}")


@R("SK-009")
def test_callable_whether_listed_or_not(sk: SkWorld) -> None:
    answer = sk.ask({"query": "knowledge"})
    expect(answer.ok, SK_009, f"search_knowledge is not callable: {answer.raw}")


@R("SK-027")
def test_not_in_the_minimal_tool_list(sk: SkWorld) -> None:
    """The seed keeps the tool out of "the minimal public marketplace-app tool list"; this project
    reads the Agent Session path's tools/list as that list (CHOICES.md), so a listing is a SHOULD
    warning (a failure with --fail-on should)."""
    sk.ask({"query": "knowledge"})  # the session exists (or the check is not verified)
    listed = {t.name for t in sk.sessions["alice"].tools()}
    expect(
        "search_knowledge" not in listed, SK_027, "search_knowledge is listed by tools/list of the Agent Session path"
    )


# ----------------------------------------------------------------- windows
def _unit(sk: SkWorld, text: str, body: dict[str, Any]) -> str:
    """Which character the server counts: code points, or UTF-16 units (unless strict)."""
    total = body.get("content_total_chars")
    if total == len(text):
        return "code point"
    if total == utf16_len(text) and not sk.strict:
        return "utf-16"
    expect(
        False,
        SK_026,
        f"content_total_chars is {total}; the text has {len(text)} code points"
        f"{'' if sk.strict else f' and {utf16_len(text)} UTF-16 units'} ({len(text.encode())} bytes)",
    )
    return ""


def _slice(unit: str, text: str, start: int, count: int) -> str:
    return text[start : start + count] if unit == "code point" else utf16_slice(text, start, count)


@R("SK-012", "SK-013")
def test_windows_count_characters(sk: SkWorld) -> None:
    sk.need_control()
    text = sk.corpus.texts["sk-window"]
    first = sk.read(knowledge_item_id="sk-window")
    expect(
        first["content_offset"] == 0 and first["content"] == text,
        SK_012,
        f"a read without offset does not start at character 0 ({first['content_offset']})",
    )
    for offset, limit in ((1, 3), (2, 5), (3, 1), (7, 11), (len(text) - 2, 5)):
        body = sk.read(knowledge_item_id="sk-window", offset=offset, limit_chars=limit)
        fits = body["content"] in (
            text[offset : offset + limit],
            *(() if sk.strict else (utf16_slice(text, offset, limit),)),
        )
        expect(
            fits,
            SK_012,
            f"offset {offset}, limit_chars {limit} gave {body['content']!r}; "
            f"{limit} characters from character {offset} are {text[offset : offset + limit]!r}",
        )
    long_text = sk.corpus.texts["sk-long"]
    body = sk.read(knowledge_item_id="sk-long")
    unit = _unit(sk, long_text, body)
    expect(
        body["content"] == _slice(unit, long_text, 0, 4000) and body["content_truncated"] is True,
        SK_013,
        f"the default window is {len(body['content'])} code points, truncated {body['content_truncated']}; expected 4000 {unit}s",
    )


@R("SK-026")
def test_paging_rebuilds_the_text_with_honest_truncation(sk: SkWorld) -> None:
    sk.need_control()
    text = sk.corpus.texts["sk-window"]
    unit = _unit(sk, text, sk.read(knowledge_item_id="sk-window", limit_chars=1))
    total = len(text) if unit == "code point" else utf16_len(text)
    offset, pieces = 0, []
    for _ in range(200):
        body = sk.read(knowledge_item_id="sk-window", offset=offset, limit_chars=7)
        expect(
            body["content_total_chars"] == total,
            SK_026,
            f"content_total_chars changed to {body['content_total_chars']}",
        )
        expect(body["content"] == _slice(unit, text, offset, 7), SK_026, f"the window at {offset} is not the text's")
        size = len(body["content"]) if unit == "code point" else utf16_len(body["content"])
        expect(
            body["content_truncated"] == (offset + size < total),
            SK_026,
            f"content_truncated is {body['content_truncated']} at {offset}+{size} of {total}",
        )
        pieces.append(body["content"])
        offset += size
        if not body["content_truncated"] or size == 0:
            break
    rebuilt = (
        "".join(pieces)
        if unit == "code point"
        else "".join(pieces).encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    )
    expect(rebuilt == text, SK_026, "the windows do not rebuild the revision's text")
    past = sk.ask({"knowledge_item_id": "sk-window", "offset": total + 10})
    if past.ok:
        expect(
            past.body is not None and past.body.get("content") == "" and past.body.get("content_truncated") is False,
            SK_026,
            f"a window past the end: {past.raw}",
        )
    else:
        expect(past.codes & {INVALID}, SK_026, f"a window past the end: {past.raw}")
