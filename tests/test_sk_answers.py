"""How the suite's search_knowledge profile reads an answer: codes wherever a server puts
them, protocol errors as refusals, a success as JSON text with bounded excerpts, and UTF-16
windows for servers that count in units."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.common.outcomes import ContractViolation
from conformance.common.rules import recording
from conformance.mcp.records import ToolResult
from conformance.search_knowledge.answers import (
    EXCERPT_BOUND,
    Corpus,
    call,
    envelope_types,
    message_of,
    utf16_len,
    utf16_slice,
)


class _Session:
    def __init__(self, result: ToolResult | Exception) -> None:
        self.result = result

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        assert name == "search_knowledge"
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _answer(body: Any, *, is_error: bool = False, structured: bool = True) -> Any:
    result = ToolResult(is_error, body if structured else None, structured, (json.dumps(body),))
    return call(_Session(result), {"query": "x"})  # type: ignore[arg-type]


def test_codes_are_found_at_the_top_or_inside_error_or_feedback() -> None:
    assert _answer({"error": "knowledge_invalid_request"}, is_error=True).codes == {"knowledge_invalid_request"}
    assert _answer({"error": {"code": "knowledge_item_required", "message": "m"}}, is_error=True).codes == {
        "knowledge_item_required"
    }
    assert _answer({"feedback": {"code": "knowledge_query_required"}}, is_error=True).codes == {
        "knowledge_query_required"
    }
    assert _answer({"code": "x"}, structured=False).codes == {"x"}


def test_only_a_typed_result_without_codes_is_a_success() -> None:
    assert _answer({"type": "knowledge_search", "results": []}).ok
    assert not _answer({"type": "knowledge_search", "results": []}, is_error=True).ok
    assert not _answer({"type": "knowledge_search", "error": "knowledge_runtime_disabled"}).ok
    assert not _answer({"results": []}).ok


def test_a_protocol_error_is_a_refusal() -> None:
    result = ToolResult(False, None, False, (), protocol_error="JSON-RPC error -32602: bad")
    answer = call(_Session(result), {})  # type: ignore[arg-type]
    assert (answer.ok, answer.is_error, answer.codes) == (False, True, frozenset({"jsonrpc:-32602"}))


def test_the_unavailable_envelope_may_be_a_value_or_a_member() -> None:
    assert "knowledge_unavailable" in envelope_types(_answer({"type": "knowledge_unavailable", "error": "x"}))
    assert "knowledge_unavailable" in envelope_types(_answer({"knowledge_unavailable": {"error": "x"}}))
    assert "knowledge_unavailable" not in envelope_types(_answer({"type": "knowledge_error", "error": "x"}))
    assert message_of(_answer({"error": {"code": "c", "message": "gone"}})) == "gone"


def test_utf16_windows() -> None:
    text = "a\U0001f600e\u0301"
    assert utf16_len(text) == 5 and len(text) == 4
    assert utf16_slice(text, 1, 2) == "\U0001f600" and utf16_slice(text, 3, 2) == "e\u0301"
    assert utf16_slice(text, 1, 1) == "\ud83d"  # a cut pair is a lone surrogate, as JSON can carry it


SEARCH = {"type": "knowledge_search", "results": [{"knowledge_item_id": "a", "title": "T", "excerpt": "x"}]}
READ = {"type": "knowledge", "knowledge_item_id": "a", "content": "abc", "content_truncated": False}


def _texts(body: Any, *texts: str, structured: bool = True, judge: bool = True) -> Any:
    result = ToolResult(False, body if structured else None, structured, texts)
    return call(_Session(result), {"query": "x"}, judge=judge)  # type: ignore[arg-type]


def _violated(body: Any, *texts: str, structured: bool = True) -> ContractViolation:
    with pytest.raises(ContractViolation) as info:
        _texts(body, *texts, structured=structured)
    return info.value


def test_a_success_is_the_same_json_as_text() -> None:
    with recording() as ledger:
        assert _texts(SEARCH, json.dumps(SEARCH)).ok
        assert _texts(READ, json.dumps(READ, indent=2)).ok
        assert _texts(SEARCH, json.dumps(SEARCH), structured=False).ok  # the text alone is the result
        assert _texts(SEARCH, "Found 1 result:", json.dumps(SEARCH)).ok  # a summary beside the JSON text
        assert _texts({"type": "knowledge", "n": 1}, '{"type": "knowledge", "n": 1.0}').ok  # one JSON number
    assert ledger.passed == {"SK-017", "SK-018"}


def test_a_success_whose_text_is_not_its_json_breaks_the_result_shape() -> None:
    """The seed: "Query returns JSON text ...", "Addressed read returns JSON text ..."."""
    summary = _violated(SEARCH, "Found 1 result:\n1. T (a)")
    assert summary.requirement == "SK-017" and "not a JSON object" in str(summary) and "Found 1 result" in str(summary)
    assert _violated(READ).requirement == "SK-018"  # no text block at all
    assert "no text content block" in str(_violated(READ))
    other = _violated(READ, json.dumps({**READ, "content": "abd"}))
    assert other.requirement == "SK-018" and "not the same JSON as its structuredContent" in str(other)
    assert _violated(READ, json.dumps({**READ, "type": "knowledge_search"})).requirement == "SK-018"
    assert _violated(READ, json.dumps({**READ, "content_truncated": 0})).requirement == "SK-018"  # false is not 0
    assert _violated(SEARCH, json.dumps([SEARCH])).requirement == "SK-017"  # JSON, but not an object


def test_the_text_shown_is_cut() -> None:
    message = str(_violated(SEARCH, "Found " + "many " * 10_000 + "results"))
    assert len(message) < 600 and "results" not in message.split("Found", 1)[1]


def test_refusals_and_probes_are_not_judged_as_successes() -> None:
    refusal = ToolResult(True, {"type": "knowledge_error", "error": "e"}, True, ("refused",))
    assert not call(_Session(refusal), {}).ok  # type: ignore[arg-type]
    assert _texts(SEARCH, "Found 1 result", judge=False).ok


def test_every_query_result_has_a_bounded_excerpt() -> None:
    """By default one addressed window (CHOICES.md; strict holds it to 2000 in the tests)."""
    at_bound = {**SEARCH, "results": [{"knowledge_item_id": "a", "excerpt": "e" * EXCERPT_BOUND}]}
    assert _texts(at_bound, json.dumps(at_bound)).ok
    whole = {**SEARCH, "results": [{"knowledge_item_id": "a", "excerpt": "e" * (EXCERPT_BOUND + 1)}]}
    broken = _violated(whole, json.dumps(whole))
    assert broken.requirement == "SK-017" and f"an excerpt of {EXCERPT_BOUND + 1} characters" in str(broken)
    long_read = {**READ, "content": "e" * (EXCERPT_BOUND + 1)}  # an addressed read's window is bounded elsewhere
    assert _texts(long_read, json.dumps(long_read)).ok


def test_the_corpus_holds_a_document_longer_than_the_excerpt_bound_that_its_token_finds() -> None:
    corpus = Corpus()
    corpus.build()
    text = corpus.texts["sk-long"]
    assert len(text) > EXCERPT_BOUND and utf16_len(text) > EXCERPT_BOUND
    holders = [item for item, content in corpus.texts.items() if corpus.token("long") in content]
    assert holders == ["sk-long"]
