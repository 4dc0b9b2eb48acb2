"""search_knowledge and revisions: a query follows the current revision (every member of a
result is the current revision's), and an addressed read names an immutable revision."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from conformance.common.rules import expect
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.world import SkWorld

R = pytest.mark.requirement


@R(sk.SK_003, sk.SK_004, sk.SK_001, sk.SK_017, sk.SK_018)
def test_query_follows_the_current_revision_and_reads_address_revisions(tool: SkWorld) -> None:
    control = tool.need_control()
    first, old_title = tool.revisions["sk-evolving"], tool.corpus.titles["sk-evolving"]
    new_title, new_text = "Changed course", f"second revision {tool.corpus.token('second')} replaces the earlier"
    current = control.publish("sk-evolving", new_text, title=new_title)
    found = tool.search(tool.corpus.token("second"), mode="lexical")
    hits = [h for h in found.hits() if h.get("knowledge_item_id") == "sk-evolving"]
    expect(hits, sk.SK_003, "a query for the new revision's text does not find the item")
    for hit in hits:
        _of_current_revision(hit, current, (new_title, new_text), (old_title, tool.corpus.texts["sk-evolving"]))
    for mode in ("lexical", "hybrid", "semantic", "rrf"):
        old = tool.search(tool.corpus.token("first"), mode=mode, max_results=50)
        mine = [h for h in old.hits() if h.get("knowledge_item_id") == "sk-evolving"]
        stale = [h.get("knowledge_revision_id") for h in mine if h.get("knowledge_revision_id") != current]
        expect(not stale, sk.SK_003, f"{mode} search returned the historical revision {stale} of sk-evolving")
        expect(
            mode != "lexical" or not mine,
            sk.SK_003,
            f"lexical search for {tool.corpus.token('first')}, a term only the historical revision holds, finds "
            "sk-evolving: it ranks a revision that is not current",
        )
        for hit in mine:
            _of_current_revision(hit, current, (new_title, new_text), (old_title, tool.corpus.texts["sk-evolving"]))
    body = tool.read(knowledge_item_id="sk-evolving")
    expect(
        body["knowledge_revision_id"] == current and body["content"] == new_text and body["title"] == new_title,
        sk.SK_004,
        f"an addressed read without revision gave revision {body['knowledge_revision_id']} titled "
        f"{body['title']!r}; the current one is {current}, titled {new_title!r}",
    )
    pinned = tool.read(knowledge_item_id="sk-evolving", knowledge_revision_id=first)
    expect(
        pinned["knowledge_revision_id"] == first
        and pinned["content"] == tool.corpus.texts["sk-evolving"]
        and pinned["title"] == old_title,
        sk.SK_004,
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
    expect(not named, sk.SK_003, f"a result for revision {current} also names {named}")
    title = str(hit.get("title", ""))
    expect(
        now[0] in title and before[0] not in title,
        sk.SK_003,
        f"a result for the current revision {current} is titled {title!r}; its title is {now[0]!r} ({before[0]!r} before)",
    )
    inner = _WORDS.findall(str(hit.get("excerpt", "")).casefold())[1:-1]
    only_before = set(_WORDS.findall(f"{before[0]} {before[1]}".casefold())) - set(
        _WORDS.findall(f"{now[0]} {now[1]}".casefold())
    )
    leaked = sorted(set(inner) & only_before)
    expect(
        not leaked,
        sk.SK_003,
        f"the excerpt of the current revision {current} holds {leaked}, words of the previous one",
    )


_WORDS = re.compile(r"\w+")
