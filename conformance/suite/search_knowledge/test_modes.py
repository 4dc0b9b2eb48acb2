"""search_knowledge's modes: an unrecognised mode is hybrid, alpha is the lexical weight (and
clamped), rrf fuses the two ranks, and each mode ranks by its own evidence. Nothing here depends
on how a server ranks: the corpus makes lexical and semantic evidence disagree, and the checks
compare a server's own orders with each other."""

from __future__ import annotations

import math
from typing import Any

import pytest

from conformance.search_knowledge.answers import (
    Answer,
    pairs,
)
from conformance.search_knowledge.rules import (
    SK_015,
    SK_016,
    SK_025,
    SK_028,
    SK_029,
    SK_030,
)
from conformance.search_knowledge.world import SkWorld
from conformance.target.rules import expect

R = pytest.mark.requirement


def _rank(order: list[str], item: str) -> float:
    return order.index(item) if item in order else math.inf


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
