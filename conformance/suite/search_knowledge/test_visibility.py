"""Who sees what through search_knowledge: only visible, published items of the caller's bases,
narrowed by base on request; unavailable resources indistinguishable from absent ones; no argument
that changes the caller; knowledge:read required."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.common.rules import expect
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.answers import (
    ARCHIVED_BASE,
    MAIN,
    OTHER,
    PRIVATE,
    message_of,
)
from conformance.search_knowledge.world import UNAVAILABLE, SkWorld

R = pytest.mark.requirement


@R(sk.SK_003, sk.SK_011)
def test_query_shows_only_visible_published_items_and_narrows_by_base(tool: SkWorld) -> None:
    tool.need_control()
    for mode in ("lexical", "hybrid", "rrf", "semantic"):
        hidden = tool.search(tool.corpus.token("hidden"), mode=mode, max_results=50).items()
        shown = sorted(set(hidden) & {"sk-archived", "sk-unpublished", "sk-private", "sk-in-archived-base"})
        expect(not shown, sk.SK_003, f"{mode} search shows {shown}: archived, unpublished or unauthorized")
    shared = tool.corpus.token("shared")
    both = tool.search(shared, mode="lexical").items()
    expect({"sk-other", "sk-main-shared"} <= set(both), sk.SK_003, f"a query over both bases found {both}")
    narrowed = tool.search(shared, mode="lexical", knowledge_base_id=OTHER)
    expect(
        "sk-main-shared" not in narrowed.items() and "sk-other" in narrowed.items(),
        sk.SK_011,
        f"knowledge_base_id {OTHER} gave {narrowed.items()}",
    )
    expect(
        all(h.get("knowledge_base_id", OTHER) == OTHER for h in narrowed.hits()),
        sk.SK_011,
        "a narrowed hit names another base",
    )
    tool.refused(
        tool.ask({"knowledge_item_id": "sk-window", "knowledge_base_id": OTHER}),
        {UNAVAILABLE},
        sk.SK_011,
        "an addressed item validated against another base",
    )
    tool.read(knowledge_item_id="sk-window", knowledge_base_id=MAIN)


@R(sk.SK_023)
def test_unavailable_resources_are_indistinguishable(tool: SkWorld) -> None:
    tool.need_control()
    cases = {
        "absent item": {"knowledge_item_id": "sk-no-such-item"},
        "unauthorized item": {"knowledge_item_id": "sk-private"},
        "archived item": {"knowledge_item_id": "sk-archived"},
        "unpublished item": {"knowledge_item_id": "sk-unpublished"},
        "item in an archived base": {"knowledge_item_id": "sk-in-archived-base"},
        "absent revision": {"knowledge_item_id": "sk-window", "knowledge_revision_id": "rev-no-such-revision"},
        "another item's revision": {
            "knowledge_item_id": "sk-window",
            "knowledge_revision_id": tool.revisions["sk-lexical"],
        },
    }
    for what, item in {  # naming the item's own revision must not bypass its state or the caller's access
        "unauthorized item": "sk-private",
        "archived item": "sk-archived",
        "unpublished item": "sk-unpublished",
        "item in an archived base": "sk-in-archived-base",
    }.items():
        if item in tool.revisions:
            cases[f"{what}, its own revision named"] = {
                "knowledge_item_id": item,
                "knowledge_revision_id": tool.revisions[item],
            }
    seen: dict[str, tuple[Any, ...]] = {}
    for what, arguments in cases.items():
        answer = tool.ask(arguments)
        tool.refused(answer, {UNAVAILABLE}, sk.SK_023, what)
        text = message_of(answer)
        for value in arguments.values():
            text = text.replace(value, "<id>")
        seen[what] = (
            answer.is_error,
            tuple(sorted(answer.codes)),
            re.sub(r"\s+", " ", text),
            tuple(sorted(answer.body or {})),
        )
    if tool.strict:  # one answer, word for word, is this project's reading of "indistinguishable" (CHOICES.md)
        distinct = {v: k for k, v in seen.items()}
        expect(
            len(distinct) == 1,
            sk.SK_023,
            f"strict: unavailable resources answer differently: {sorted(distinct.values())}",
        )
    for base in (PRIVATE, ARCHIVED_BASE, "kb-no-such-base"):
        answer = tool.ask({"query": tool.corpus.token("hidden"), "knowledge_base_id": base})
        expect(not answer.items(), sk.SK_023, f"a query narrowed to {base} returned {answer.items()}")
        expect(answer.ok or answer.codes & {UNAVAILABLE}, sk.SK_023, f"a query narrowed to {base}: {answer.raw}")


@R(sk.SK_010)
def test_owner_and_scope_arguments_do_not_change_the_caller(tool: SkWorld) -> None:
    tool.need_control()
    for extra in ({"owner": "carol"}, {"scope": "all"}, {"team": "all"}, {"owner_id": "carol"}):
        answer = tool.ask({"query": tool.corpus.token("private"), "mode": "lexical", **extra})
        expect(
            "sk-private" not in answer.items(), sk.SK_010, f"with {extra} the caller found an item outside its scope"
        )
        read = tool.ask({"knowledge_item_id": "sk-private", **extra})
        expect(not read.ok, sk.SK_010, f"with {extra} the caller read an item outside its scope")
    expect(
        "sk-private" in tool.search(tool.corpus.token("private"), who="carol", mode="lexical").items(),
        sk.SK_010,
        "carol, who sees every base, does not find the private item: the check shows nothing",
    )


OTHER_SCOPES = ["knowledge:write", "knowledge:reader"]
"""Scopes of the tool's own namespace that are not ``knowledge:read``: a check by prefix
(``knowledge:``, ``knowledge:read``) lets them through."""


@R(sk.SK_008)
def test_knowledge_read_is_required(tool: SkWorld) -> None:
    """bob holds no scope, then only other ``knowledge:`` scopes: "knowledge:read is required", and a
    caller who "lacks knowledge:read" is refused whatever else it holds."""
    control = tool.need_control()
    try:
        for scopes in ([], OTHER_SCOPES):
            control.scopes("bob", scopes)
            for arguments in ({"query": tool.corpus.token("many")}, {"knowledge_item_id": "sk-window"}):
                answer = tool.ask(arguments, who="bob")
                expect(
                    not answer.ok and not answer.hits() and "content" not in (answer.body or {}),
                    sk.SK_008,
                    f"a caller holding {scopes or 'no scope'}, without knowledge:read, got {answer.raw}",
                )
    finally:
        control.scopes("bob", [])  # as the world has it
