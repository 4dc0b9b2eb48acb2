"""search_knowledge's addressed windows: they count characters (a code point, or a UTF-16 unit
where the seed is open, code points under strict), the default window is 4000 characters, and
paging rebuilds the text with honest truncation."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common.rules import expect
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.answers import (
    utf16_len,
    utf16_slice,
)
from conformance.search_knowledge.world import INVALID, SkWorld

R = pytest.mark.requirement


# ----------------------------------------------------------------- windows
def _unit(tool: SkWorld, text: str, body: dict[str, Any]) -> str:
    """Which character the server counts: code points, or UTF-16 units (unless strict)."""
    total = body.get("content_total_chars")
    if total == len(text):
        return "code point"
    if total == utf16_len(text) and not tool.strict:
        return "utf-16"
    expect(
        False,
        sk.SK_026,
        f"content_total_chars is {total}; the text has {len(text)} code points"
        f"{'' if tool.strict else f' and {utf16_len(text)} UTF-16 units'} ({len(text.encode())} bytes)",
    )
    return ""


def _slice(unit: str, text: str, start: int, count: int) -> str:
    return text[start : start + count] if unit == "code point" else utf16_slice(text, start, count)


@R(sk.SK_012, sk.SK_013)
def test_windows_count_characters(tool: SkWorld) -> None:
    tool.need_control()
    text = tool.corpus.texts["sk-window"]
    first = tool.read(knowledge_item_id="sk-window")
    expect(
        first["content_offset"] == 0 and first["content"] == text,
        sk.SK_012,
        f"a read without offset does not start at character 0 ({first['content_offset']})",
    )
    for offset, limit in ((1, 3), (2, 5), (3, 1), (7, 11), (len(text) - 2, 5)):
        body = tool.read(knowledge_item_id="sk-window", offset=offset, limit_chars=limit)
        fits = body["content"] in (
            text[offset : offset + limit],
            *(() if tool.strict else (utf16_slice(text, offset, limit),)),
        )
        expect(
            fits,
            sk.SK_012,
            f"offset {offset}, limit_chars {limit} gave {body['content']!r}; "
            f"{limit} characters from character {offset} are {text[offset : offset + limit]!r}",
        )
    long_text = tool.corpus.texts["sk-long"]
    body = tool.read(knowledge_item_id="sk-long")
    unit = _unit(tool, long_text, body)
    expect(
        body["content"] == _slice(unit, long_text, 0, 4000) and body["content_truncated"] is True,
        sk.SK_013,
        f"the default window is {len(body['content'])} code points, truncated {body['content_truncated']}; expected 4000 {unit}s",
    )


@R(sk.SK_026)
def test_paging_rebuilds_the_text_with_honest_truncation(tool: SkWorld) -> None:
    tool.need_control()
    text = tool.corpus.texts["sk-window"]
    unit = _unit(tool, text, tool.read(knowledge_item_id="sk-window", limit_chars=1))
    total = len(text) if unit == "code point" else utf16_len(text)
    offset, pieces = 0, []
    for _ in range(200):
        body = tool.read(knowledge_item_id="sk-window", offset=offset, limit_chars=7)
        expect(
            body["content_total_chars"] == total,
            sk.SK_026,
            f"content_total_chars changed to {body['content_total_chars']}",
        )
        expect(body["content"] == _slice(unit, text, offset, 7), sk.SK_026, f"the window at {offset} is not the text's")
        size = len(body["content"]) if unit == "code point" else utf16_len(body["content"])
        expect(
            body["content_truncated"] == (offset + size < total),
            sk.SK_026,
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
    expect(rebuilt == text, sk.SK_026, "the windows do not rebuild the revision's text")
    past = tool.ask({"knowledge_item_id": "sk-window", "offset": total + 10})
    if past.ok:
        expect(
            past.body is not None and past.body.get("content") == "" and past.body.get("content_truncated") is False,
            sk.SK_026,
            f"a window past the end: {past.raw}",
        )
    else:
        expect(past.codes & {INVALID}, sk.SK_026, f"a window past the end: {past.raw}")
