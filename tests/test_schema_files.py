"""Self-checks of the contract data: schemas, examples, OpenAPI documents."""

from __future__ import annotations

import decimal
import enum
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


# ------------------------------------------- the fast path accepts only what the reference accepts
class _Code(enum.Enum):
    BAD = "not_found"


class _Flag(enum.Enum):
    ON = True


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None), max_size=20),  # lone surrogates and newlines too
    st.sampled_from(
        [
            *("", "auto", "a\n", "demo", "knowledge_reference_expired", "x" * 129),
            *("2026-01-01", "0000-01-01", "2016-12-31T23:59:60Z", "0000-01-01T00:00:00Z", "2026-13-01"),
            *("http://x", "not a uri", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b8109dad11d180b400c04fd430c8"),
        ]
    ),
    st.tuples(st.integers()),  # an array to jsonschema-rs, none to the reference
    st.sampled_from([_Code.BAD, _Flag.ON, decimal.Decimal(2), decimal.Decimal("1e400")]),  # their values to it
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _mutated(node: Any, data: st.DataObject) -> Any:
    """The example with one value somewhere in it replaced, removed or added."""
    if isinstance(node, dict) and node and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(node)))
        action = data.draw(st.sampled_from(["descend", "replace", "remove", "add"]))
        if action == "descend":
            return {**node, key: _mutated(node[key], data)}
        if action == "remove":
            return {k: v for k, v in node.items() if k != key}
        if action == "add":
            return {**node, data.draw(st.text(max_size=8)): data.draw(_VALUES)}
        return {**node, key: data.draw(_VALUES)}
    if isinstance(node, list) and node and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(node) - 1))
        return [*node[:at], _mutated(node[at], data), *node[at + 1 :]]
    return data.draw(_VALUES) if data.draw(st.booleans()) else node


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(EXAMPLES), st.data())
def test_the_fast_path_never_accepts_what_the_reference_refuses(path: Path, data: st.DataObject) -> None:
    """``errors()`` answers [] from jsonschema-rs alone when it accepts: so every instance it
    accepts, near a labelled example, the Python validator must accept too."""
    registry = load_registry()
    stem = path.parent.name
    instance = _mutated(json.loads(path.read_text("utf-8")), data)
    if registry.accepts(stem, instance):
        assert list(registry.validator(stem).iter_errors(instance)) == []
    assert registry.errors(stem, instance) == sorted_reference_errors(registry, stem, instance)


def sorted_reference_errors(registry: Any, stem: str, instance: Any) -> list[str]:
    found = sorted(registry.validator(stem).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}" for e in found]


def test_what_the_fast_path_cannot_take_goes_to_the_reference() -> None:
    """Found by review: jsonschema-rs takes a leap second and the year 0000 as dates and a tuple as
    an array; the reference refuses all three, so a schema with such a format, and an instance
    holding a tuple, are the reference's alone."""
    registry = load_registry()
    results = json.loads((SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json").read_text("utf-8"))
    for started in ("2016-12-31T23:59:60Z", "0000-01-01T00:00:00Z"):
        assert registry.errors("results", {**results, "started": started}) == [
            f"/started: {started!r} is not a 'date-time'"
        ]
    assert registry.fast("results") is None and registry.formats("results") == {"date", "date-time"}
    assert registry.formats("search-response") == {"uuid"}, "a format of a schema it refers to counts"
    assert (
        registry.errors("error", {"error": "abc", "details": (1,)})
        == registry.errors("error", {"error": "abc", "details": [1]})
        == []
    )
    assert registry.accepts("error", {"error": "abc", "details": (1,)}) is False
    assert registry.errors("error", {"error": _Code.BAD}) == [
        "/error: <_Code.BAD: 'not_found'> is not of type 'string'"
    ]
    assert registry.accepts("error", {"error": "abc", "retryable": _Flag.ON}) is False
    assert registry.accepts("error", {"error": "abc"}) is True
    assert registry.accepts("error", {"error": "abc\ud800"}) is False  # not UTF-8: jsonschema-rs cannot take it
    assert registry.errors("error", {"error": "abc\ud800"}) != []  # the reference names the pattern
    assert (
        registry.errors("error", {"error": "abc\n"}) == []
    )  # Python's $ before a final newline: the reference's verdict
