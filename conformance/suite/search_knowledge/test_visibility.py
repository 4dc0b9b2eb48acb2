"""Who sees what through search_knowledge: only visible, published items of the caller's bases,
narrowed by base on request; unavailable resources indistinguishable from absent ones; no argument
that changes the caller; knowledge:read required."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.search_knowledge.answers import (
    ARCHIVED_BASE,
    MAIN,
    OTHER,
    PRIVATE,
    message_of,
)
from conformance.search_knowledge.rules import (
    SK_003,
    SK_008,
    SK_010,
    SK_011,
    SK_023,
)
from conformance.search_knowledge.world import UNAVAILABLE, SkWorld
from conformance.target.rules import expect

R = pytest.mark.requirement


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
    sk.refused(
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
        sk.refused(answer, {UNAVAILABLE}, SK_023, what)
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
