"""Self-checks of the contract data: schemas, examples, OpenAPI documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing.exceptions import Unresolvable

from knowledge_schemas import SCHEMA_DIR, load_registry, schema_names
from knowledge_schemas._files import BASE_URI
from knowledge_schemas.openapi import DOCUMENTS, bundle, load_document

EXAMPLES = sorted((SCHEMA_DIR / "examples").glob("*/*.json"))


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


@pytest.mark.parametrize("name", schema_names())
def test_schema_is_valid_against_its_metaschema(name: str) -> None:
    doc = json.loads((SCHEMA_DIR / name).read_text("utf-8"))
    Draft202012Validator.check_schema(doc)
    assert doc["$id"] == BASE_URI + name, "the $id must be the file's stable URI"


@pytest.mark.parametrize("name", schema_names())
def test_every_ref_resolves(name: str) -> None:
    registry = load_registry()
    doc = registry.contents[name]
    resolver = registry.registry.resolver(base_uri=doc["$id"])
    for ref in _refs(doc):
        try:
            resolver.lookup(ref)
        except Unresolvable as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{name}: $ref {ref!r} does not resolve: {exc}")


def test_there_are_examples_for_every_wire_message() -> None:
    with_examples = {p.parent.name for p in EXAMPLES}
    wire = {n.removesuffix(".schema.json") for n in schema_names()} - {"common", "catalogue", "feedback"}
    assert wire <= with_examples, f"schemas without examples: {sorted(wire - with_examples)}"
    for stem in with_examples:
        labels = {p.name.split("-")[0] for p in EXAMPLES if p.parent.name == stem}
        assert labels == {"valid", "invalid"}, f"{stem} needs both valid and invalid examples"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_example_validates_as_labelled(path: Path) -> None:
    registry = load_registry()
    errors = registry.errors(path.parent.name, json.loads(path.read_text("utf-8")))
    if path.name.startswith("valid-"):
        assert errors == []
    else:
        assert path.name.startswith("invalid-"), "examples are named valid-* or invalid-*"
        assert errors, f"{path.name} is labelled invalid but validates"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_openapi_document_loads_and_refs_point_at_schema_files(name: str) -> None:
    doc = load_document(name)
    assert doc["openapi"].startswith("3.1")
    for ref in _refs(doc):
        target = ref.partition("#")[0]
        if target:
            assert (SCHEMA_DIR / target).is_file(), f"{name} refers to missing file {target}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_bundled_openapi_is_a_valid_self_contained_document(name: str) -> None:
    doc = bundle(name)
    assert all(ref.startswith("#/") for ref in _refs(doc)), "bundling must leave only local refs"
    validate_openapi(doc)


def test_core_openapi_covers_the_four_endpoints_with_auth_and_errors() -> None:
    doc = load_document()
    ops = {
        (m.upper(), p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1]) for p, item in doc["paths"].items() for m in item
    }
    assert ops == {
        ("GET", "knowledge/capabilities"),
        ("POST", "knowledge/search"),
        ("POST", "knowledge/read"),
        ("POST", "{route}/turns"),
    }
    assert doc["security"] == [{"bearerAuth": []}]
    for path, item in doc["paths"].items():
        for op in item.values():
            assert {"200", "400", "401"} <= set(op["responses"]), path
