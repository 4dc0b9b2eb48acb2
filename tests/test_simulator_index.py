"""The per-workspace full-text index: ranked by BM25 over current revisions only, ties broken by
item ID (the index numbers its rows in item ID order rather than reading every match's item)."""

from __future__ import annotations

from random import Random

import pytest

from simulator.store import ItemInput, Store


@pytest.mark.parametrize("concurrent", [False, True])
def test_ties_break_by_item_id_whatever_the_corpus_order_and_after_a_publish(concurrent: bool) -> None:
    store = Store(":memory:", Random(3), concurrent=concurrent)
    store.create_workspace("w")
    ids = ["m", "b", "z", "a", "é", "B", "k"]  # code point order: B a b k m z é
    store.replace_corpus(
        "w",
        [
            ("one", "one", [ItemInput(i, "same", "tapir tapir") for i in ids[:4]]),
            ("two", "two", [ItemInput(i, "same", "tapir tapir") for i in ids[4:]]),
        ],
        0.0,
    )
    assert [r.item_id for r in store.search("w", "tapir", None, 10)] == sorted(ids)
    assert [r.item_id for r in store.search("w", "tapir", ["two"], 10)] == ["B", "k", "é"]
    store.publish_revision("w", "a", "tapir tapir", None, None, 1.0)  # same text, new revision: same place
    assert [r.item_id for r in store.search("w", "tapir", None, 3)] == ["B", "a", "b"]
    store.publish_revision("w", "z", "tapir tapir tapir okapi", None, None, 2.0)  # both words: first
    found = store.search("w", "tapir okapi", None, 10)
    assert found[0].item_id == "z" and found[0].content.endswith("okapi")
    assert [r.item_id for r in store.search("w", "okapi", ["one"], 10)] == ["z"]
    assert store.search("w", "okapi", ["two"], 10) == []
    store.close()


@pytest.mark.parametrize("concurrent", [False, True])
def test_only_the_current_revision_of_an_item_is_found(concurrent: bool) -> None:
    store = Store(":memory:", Random(4), concurrent=concurrent)
    store.create_workspace("w")
    store.replace_corpus(
        "w", [("kb", "kb", [ItemInput("a", "first title", "aardvark"), ItemInput("b", "other", "badger")])], 0.0
    )
    store.publish_revision("w", "a", "pangolin", "second title", None, 1.0)
    assert store.search("w", "aardvark", None, 3) == [] and store.search("w", "first", None, 3) == []
    assert [(r.item_id, r.title) for r in store.search("w", "pangolin second", None, 3)] == [("a", "second title")]
    store.publish_revision("w", "a", "aardvark again", None, None, 2.0)  # the title is kept
    assert [(r.item_id, r.title) for r in store.search("w", "aardvark", None, 3)] == [("a", "second title")]
    assert store.search("w", "pangolin", None, 3) == []
    store.close()
