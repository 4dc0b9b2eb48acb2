"""Self-checks of the requirement catalogue."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from jsonschema import Draft202012Validator

from knowledge_schemas import SCHEMA_DIR, load_catalogue
from knowledge_schemas.catalogue import raw_catalogue


def test_catalogue_matches_its_schema() -> None:
    schema = json.loads((SCHEMA_DIR / "catalogue.schema.json").read_text("utf-8"))
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(raw_catalogue())]
    assert errors == []


def test_ids_are_unique_and_titles_distinct() -> None:
    cat = load_catalogue()
    dup_ids = [i for i, n in Counter(cat.ids).items() if n > 1]
    dup_titles = [t for t, n in Counter(r.title for r in cat).items() if n > 1]
    assert dup_ids == [] and dup_titles == []


def test_catalogue_covers_every_surface_of_both_seeds() -> None:
    cat = load_catalogue()
    assert {r.surface for r in cat} == {"server", "client", "host", "mcp", "tool"}
    assert {r.source_file for r in cat} == {"000", "003", "conventions"}
    assert sum(r.server_observable and r.level == "MUST" for r in cat) >= 40


def test_quotes_come_from_their_source() -> None:
    """Every quote of a seed is findable in that seed once markup is removed."""
    seeds = SCHEMA_DIR.parent.parent / "shared" / "seeds"
    files = {"000": "000_a0631c4036e27a8d.txt", "003": "003_de8e2aa62e19215f.txt"}
    texts = {k: (seeds / v) for k, v in files.items()}
    if not all(p.is_file() for p in texts.values()):
        pytest.skip("the seed texts are not beside this checkout")

    def norm(s: str) -> str:
        for ch in "`'\"·":
            s = s.replace(ch, "")
        return " ".join(s.split())

    loaded = {k: norm(p.read_text("utf-8")) for k, p in texts.items()}
    missing = [
        r.id
        for r in load_catalogue()
        if r.source_file in loaded and norm(r.quote.replace(" ... ", " ")) not in loaded[r.source_file]
    ]
    assert missing == []
