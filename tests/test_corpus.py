"""The suite's corpus forces what its checks claim of it: the three worst-case documents found
together cannot fit the 4096-byte search bound without a cut, whatever a Core does with titles
and summaries, and every way of miscounting their bytes is far off; the bound is judged on the
complete response."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from conformance.common import contract as C
from conformance.common.outcomes import ContractViolation
from conformance.server import checks, corpus

DOCS = corpus.build()
WORST = [DOCS[key] for key in corpus.WORST_KEYS]
DERIVED = (16, 60, 240)  # summaries a Core may derive from the content: its first so many characters


def _least(text: str) -> int:
    """The fewest UTF-8 bytes ``text`` can take as a JSON string, quotes included: only what JSON
    must escape is escaped (a Core that also escapes non-ASCII or U+2028 sends more)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def _opening(doc: corpus.Doc, chars: int) -> str:
    """A summary derived from the content: its first ``chars`` characters after the token and the query word."""
    head = f"{doc.token} {corpus.WORST_WORD} "
    assert doc.content.startswith(head)
    return doc.content[len(head) : len(head) + chars]


def test_the_seeded_titles_alone_overflow_the_bound() -> None:
    """Whatever a Core's summaries are (the seeded ones, its own, none), the three titles must be
    cut; a Core that decorates titles only adds bytes. Any two of them overflow it too."""
    sizes = sorted(_least(doc.stored_title) for doc in WORST)
    assert sum(sizes[:2]) > C.SEARCH_MAX_BYTES


def test_each_seeded_summary_alone_overflows_the_bound() -> None:
    """Whatever a Core's titles are, a seeded summary must be cut: one alone is past the bound."""
    assert all(_least(doc.summary or "") > C.SEARCH_MAX_BYTES for doc in WORST)


@pytest.mark.parametrize("chars", DERIVED)
def test_a_summary_derived_from_the_content_is_as_costly_a_character(chars: int) -> None:
    """A Core that derives its own summaries from the content gets worst-case text too: at least
    two bytes a character (a character count is off by half or more)."""
    for doc in WORST:
        text = _opening(doc, chars)
        assert len(text) == chars and _least(text) - 2 >= 2 * chars


def test_every_miscount_is_far_off_on_the_seeded_texts() -> None:
    """What a Core that miscounts would save, on the seeded titles and summaries of the three:
    characters for bytes, each six-byte escape as one byte, UTF-8 before escaping. Each is far
    more than the trust and status members a Core might fit without (about 40 bytes)."""
    texts = [t for doc in WORST for t in (doc.stored_title, doc.summary or "")]
    short = "\b\f\n\r\t"
    escapes = sum(1 for t in texts for ch in t if ch < " " and ch not in short)
    chars = sum(_least(t) - len(json.dumps(t, ensure_ascii=False)) for t in texts)
    unescaped = sum(_least(t) - 2 - len(t.encode("utf-8")) for t in texts)
    assert min(chars, 5 * escapes, unescaped) > 1000


def test_the_search_bound_is_judged_on_the_complete_response() -> None:
    """Hints that fit 4096 bytes by themselves, in a response whose other members take it past the
    bound: SRCH-008 fails on the bytes sent, not on the hints."""
    hint = {"title": "t", "summary": "中" * 1300, "ref": "r"}
    body = {"status": "ok", "trust": "reference_only", "hints": [hint]}
    fits = json.dumps(body, ensure_ascii=False).encode("utf-8")
    padding = C.SEARCH_MAX_BYTES + 1 - len(fits)
    assert len(json.dumps([hint], ensure_ascii=False).encode("utf-8")) < C.SEARCH_MAX_BYTES and padding > 0
    over = fits[:-1] + b" " * padding + b"}"  # the same JSON, whitespace before its closing brace
    assert len(over) == C.SEARCH_MAX_BYTES + 1
    assert checks.search_response(httpx.Response(200, content=fits))["status"] == "ok"
    with pytest.raises(ContractViolation, match=r"SRCH-008.*4097 bytes"):
        checks.search_response(httpx.Response(200, content=over))


def test_corpus_export_keeps_a_folder_of_other_files_and_refuses_an_empty_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export wrote over a README.txt and a manifest.json of the user's own, and an empty name
    (an unset variable) exported into the working folder: both are usage errors; a kit exported
    before is replaced."""
    from conformance.cli import main

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.txt").write_text("my notes", "utf-8")
    assert main(["corpus", "export", str(mine)]) == 4
    assert (mine / "README.txt").read_text("utf-8") == "my notes"
    assert main(["corpus", "export", ""]) == 4
    assert "needs a folder" in capsys.readouterr().err
    kit = tmp_path / "kit"
    assert main(["corpus", "export", str(kit)]) == 0
    assert main(["corpus", "export", str(kit)]) == 0, "a kit exported before is replaced"
