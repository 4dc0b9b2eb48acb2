"""The model of conformance/server/model.py on its own: events in, predictions out, no target.

Each prediction the seeds pin is checked one way, and each one they leave open
is checked to allow every behaviour; the page judge must fail each kind of bad page."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common import contract as C
from conformance.server.model import AWAY, HOME, REFERENCE_KINDS, Doc, Model, PageExpectation, Prediction

TEXT = "alphadoc " + "é😀 line\n" * 40
LONG = "longdoc " + "x" * (C.READ_CHAIN_MAX_BYTES + 10)


def _model(*, strict: bool = False, skew: float = 0.0) -> Model:
    def docs() -> dict[str, Doc]:
        return {
            "alpha": Doc("alpha", "alphadoc", "kb-main", "alphadoc Alpha", TEXT),
            "second": Doc("second", "seconddoc", "kb-second", "seconddoc Second", "seconddoc note"),
            "long": Doc("long", "longdoc", "kb-main", "longdoc Long", LONG),
        }

    model = Model({HOME: docs(), AWAY: docs()}, strict=strict, skew=skew)
    model.turn_started("primary", "k1", "run-1")
    model.turn_started("primary", "k2", "run-2")
    model.turn_started("other_session", "k3", "run-3")
    return model


def _issue(model: Model, doc: str = "alpha", token: str = "ref-1", run: str = "run-1") -> str:
    """A hint issued by search, identified by its first page."""
    model.hints_issued("primary", run, [token])
    first = model.predict_read("primary", run, token)
    assert first.verdict == "page" and first.page is not None
    text = model.docs[HOME][doc].text
    more = len(text) > 50
    found, outcome = model.judge_page(
        "primary", first.page, _page(text[:50], cursor=f"{token}-c1" if more else None, truncated=more)
    )
    assert found is None and outcome.doc == doc
    return token


def _page(
    content: str, *, cursor: str | None = None, truncated: bool = False, exhausted: bool = False, **extra: Any
) -> dict[str, Any]:
    return {
        "content": content,
        "next_cursor": cursor,
        "truncated": truncated,
        "budget_exhausted": exhausted,
        "revision": "r1",
        **extra,
    }


def _read(
    model: Model, token: str = "ref-1", who: str = "primary", run: str = "run-1", cursor: str | None = None
) -> Prediction:
    return model.predict_read(who, run, token, cursor)


# ------------------------------------------------------------------ expiry
@pytest.mark.parametrize(
    ("age", "strict", "skew", "verdict"),
    [
        (299, False, 0, "page"),
        (300, False, 0, "either"),
        (300, True, 0, "refused"),
        (301, False, 0, "refused"),
        (297, True, 2, "page"),
        (298, True, 2, "either"),
        (302, True, 2, "either"),
        (302.5, False, 2, "refused"),
    ],
)
def test_expiry_is_exact_at_300_seconds_and_open_only_where_the_seed_or_the_skew_leaves_it(
    age: float, strict: bool, skew: float, verdict: str
) -> None:
    model = _model(strict=strict, skew=skew)
    _issue(model)
    model.advance(age)
    predicted = _read(model)
    assert predicted.verdict == verdict
    if verdict != "page":  # strict's reading of the exact edge is the edge's own rule
        edge = age == 300 and strict and skew == 0
        assert predicted.kinds == {"reference_expired"} and predicted.rule == ("REF-016" if edge else "REF-001")


def test_only_a_reference_valid_until_the_last_second_counts_for_ref_002() -> None:
    model = _model()
    _issue(model)
    model.advance(299)
    assert _read(model).age == 299 and _read(model).verdict == "page"


# ----------------------------------------------------------------- binding
@pytest.mark.parametrize(
    ("who", "run", "rule", "kinds"),
    [
        ("other_session", "run-1", "REF-004", {"reference_mismatch", "run_not_found"}),
        ("other_session", "run-3", "REF-004", {"reference_mismatch"}),
        ("other_hub", "run-1", "REF-003", {"reference_mismatch", "run_not_found"}),
        ("other_route", "run-1", "REF-005", {"reference_mismatch", "run_not_found"}),
        ("other_account", "run-1", "REF-009", {"reference_mismatch", "run_not_found"}),
        ("primary", "run-2", "REF-006", {"reference_mismatch"}),
        ("primary", "run-3", "REF-006", {"reference_mismatch", "run_not_found"}),
    ],
)
def test_a_reference_under_another_binding_is_refused_by_mismatch_or_run(
    who: str, run: str, rule: str, kinds: set[str]
) -> None:
    model = _model()
    _issue(model)
    predicted = _read(model, who=who, run=run)
    assert (predicted.verdict, predicted.rule, set(predicted.kinds), predicted.single) == ("refused", rule, kinds, rule)


def test_another_token_of_the_same_session_reads_like_the_first() -> None:
    model = _model()
    _issue(model)
    assert _read(model, who="same_session").verdict == "page"


def test_several_causes_allow_the_kind_of_any_of_them_and_attribute_none() -> None:
    model = _model()
    _issue(model)
    model.advance(400)
    model.publish(HOME, "alpha", "alphadoc new")
    predicted = _read(model, who="other_session")
    assert predicted.kinds == {"reference_mismatch", "run_not_found", "reference_expired", "revision_changed"}
    assert predicted.verdict == "refused" and predicted.single is None


# ------------------------------------------------------ revision, scope, mode
def test_a_new_revision_refuses_its_references_only() -> None:
    model = _model()
    _issue(model)
    _issue(model, "second", "ref-2")
    model.publish(HOME, "alpha", "alphadoc rewritten")
    assert (_read(model).verdict, _read(model).single) == ("refused", "REF-008")
    assert _read(model, "ref-2").verdict == "page"


def test_a_scope_change_keeping_the_document_is_open_and_one_dropping_it_refuses() -> None:
    model = _model()
    _issue(model)
    model.set_scope(HOME, "alice", ["kb-main"])
    kept = _read(model)
    assert (kept.verdict, kept.kinds) == ("either", frozenset({"scope_changed"}))
    model.set_scope(HOME, "alice", ["kb-second"])
    assert (_read(model).verdict, _read(model).single) == ("refused", "REF-007")
    model.set_scope(HOME, "bob", ["kb-second"])  # another account's scope: no cause for alice's reference
    assert model.predict_search("primary", "run-1").hidden_titles == ("alphadoc Alpha", "longdoc Long")


@pytest.mark.parametrize(
    ("mode", "verdict", "kinds"),
    [
        ("disabled", "refused", {"disabled"}),
        ("unavailable", "either", {"unavailable"}),
        ("partial", "either", {"unavailable"}),
        ("normal", "page", set()),
    ],
)
def test_modes(mode: str, verdict: str, kinds: set[str]) -> None:
    model = _model()
    _issue(model)
    model.set_mode(HOME, mode)
    predicted = _read(model)
    assert (predicted.verdict, predicted.kinds) == (verdict, frozenset(kinds))
    assert model.predict_enabled("primary") is (mode != "disabled")
    assert _read(model, who="other_route", run="run-1").kinds >= {
        "reference_mismatch"
    }  # the other route keeps its mode


def test_legacy_answers_every_knowledge_request_with_an_old_status() -> None:
    model = _model()
    _issue(model)
    model.set_mode(HOME, "legacy")
    assert (
        _read(model).legacy
        and model.predict_search("primary", "run-1").legacy
        and model.predict_enabled("primary") is None
    )


def test_a_tampered_reference_is_invalid_and_a_cursor_presented_again_is_open() -> None:
    model = _model()
    token = _issue(model)
    tampered = model.predict_read("primary", "run-1", token + "x", tampered="ref", original=token)
    assert (tampered.verdict, set(tampered.kinds), tampered.single) == ("refused", {"reference_invalid"}, "REF-015")
    assert _read(model, cursor="ref-1-c1").verdict == "page"
    model.presented_cursor("ref-1-c1")
    again = _read(model, cursor="ref-1-c1")
    assert again.verdict == "either" and again.kinds == REFERENCE_KINDS


# ------------------------------------------------------------------- pages
def _expect(model: Model, start: int = 0, consumed: int = 0, token: str = "ref-1", text: str = TEXT) -> PageExpectation:
    return PageExpectation(token, text, start, consumed, 7, 1, HOME)


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (_page(TEXT[1:40], cursor="c", truncated=True), "READ-015"),  # does not start where the chain stands
        (_page(TEXT[:20] + "\ufffd", cursor="c", truncated=True), "READ-016"),  # a split character
        (_page(TEXT, truncated=True), "READ-009"),  # complete, says truncated
        (_page(TEXT[:40]), "READ-011"),  # stops early without budget_exhausted (and says complete)
        (_page(TEXT[:40], truncated=True), "READ-011"),  # stops early, truncated but no budget_exhausted
        (_page(TEXT, total_content_bytes=len(TEXT)), "READ-014"),  # counts characters
    ],
)
def test_the_page_judge_fails_each_kind_of_bad_page(body: dict[str, Any], rule: str) -> None:
    model = _model()
    _issue(model)
    found, _ = model.judge_page("primary", _expect(model), body)
    assert found is not None and found.rule == rule, found


def test_a_good_page_registers_its_cursor_and_position() -> None:
    model = _model()
    _issue(model)
    found, outcome = model.judge_page(
        "primary", _expect(model), _page(TEXT[:30], cursor="c2", truncated=True, total_content_bytes=C.utf8_size(TEXT))
    )
    assert found is None and outcome.cursor == "c2" and "READ-014" in outcome.exercised
    assert (model.cursors["c2"].start, model.cursors["c2"].consumed) == (30, C.utf8_size(TEXT[:30]))
    found, outcome = model.judge_page("primary", _expect(model, 30, C.utf8_size(TEXT[:30])), _page(TEXT[30:]))
    assert found is None and "READ-015" in outcome.exercised


def test_the_chain_budget_stops_with_budget_exhausted_and_never_goes_past_it() -> None:
    model = _model()
    _issue(model, "long", "ref-9")
    budget = C.READ_CHAIN_MAX_BYTES
    near = _expect(model, budget - 100, budget - 100, "ref-9", LONG)
    found, outcome = model.judge_page(
        "primary", near, _page(LONG[budget - 100 : budget], truncated=True, exhausted=True)
    )
    assert found is None and {"READ-010", "READ-011"} <= outcome.exercised
    past, _ = model.judge_page("primary", near, _page(LONG[budget - 100 : budget + 5], cursor="c", truncated=True))
    assert past is not None and past.rule == "READ-011"
    assert model.invariant_violation() is None
    model.judge_page("primary", near, _page(LONG[budget - 100 : budget + 5], truncated=True, exhausted=True))
    over = model.invariant_violation()
    assert over is not None and over.rule == "READ-010"


def test_a_chain_reporting_two_revisions_breaks_the_invariant() -> None:
    model = _model()
    _issue(model)
    model.judge_page("primary", _expect(model), _page(TEXT[:30], cursor="c2", truncated=True))
    model.judge_page("primary", _expect(model, 30, C.utf8_size(TEXT[:30])), {**_page(TEXT[30:]), "revision": "r2"})
    found = model.invariant_violation()
    assert found is not None and found.rule == "READ-002"


def test_a_hint_reading_as_a_document_outside_the_scope_is_a_leak() -> None:
    model = _model()
    model.set_scope(HOME, "alice", ["kb-main"])
    model.hints_issued("primary", "run-1", ["ref-s"])
    first = model.predict_read("primary", "run-1", "ref-s")
    assert first.page is not None
    found, _ = model.judge_page("primary", first.page, _page("seconddoc note"))
    assert found is not None and found.rule == "REF-007"
