"""How the suite's search_knowledge profile reads an answer: codes wherever a server puts
them, protocol errors as refusals, and UTF-16 windows for servers that count in units."""

from __future__ import annotations

import json
from typing import Any

from conformance.mcp.session import ToolResult
from conformance.search_knowledge.answers import call, envelope_types, message_of, utf16_len, utf16_slice


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
