"""One cached registry of every schema, and validators built once from it.

Every check of a schema that allows it has a compiled fast path: jsonschema-rs says "valid" in well
under a microsecond, where the Python validator walks an answer in a few hundred (a suite run
validates thousands). Only acceptance is fast: whatever the fast path doubts, or cannot take (a
string with a lone surrogate, a number it cannot hold), goes to the Python validator
(``jsonschema``, the project's reference), which then accepts it or names every problem, so a
refusal and its messages are always the reference's. Where jsonschema-rs is known to accept what
the reference refuses, the reference alone decides: a schema that uses (or refers to one that
uses) a format other than ``uuid`` (jsonschema-rs takes a leap second in a ``date-time`` and the
year 0000 in a ``date``), and an instance of anything but the types ``json.loads`` makes (a tuple
is an array to jsonschema-rs, an Enum member or a Decimal its value; none of them to the reference)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from knowledge_schemas._files import BASE_URI, SCHEMA_DIR, schema_names


class SchemaRegistry:
    """Validators for the wire messages, keyed by schema file stem (``read-response``)."""

    def __init__(self, contents: dict[str, dict[str, Any]]) -> None:
        self.contents = contents
        self.registry: Registry[Any] = Registry().with_resources(
            (BASE_URI + name, Resource.from_contents(doc, default_specification=DRAFT202012))
            for name, doc in contents.items()
        )
        self._validators: dict[str, Draft202012Validator] = {}
        self._fast: dict[str, Any] = {}

    def _name(self, stem: str) -> str:
        name = stem if stem.endswith(".schema.json") else f"{stem}.schema.json"
        if name not in self.contents:
            raise KeyError(f"no schema named {name!r}; known: {sorted(self.contents)}")
        return name

    def fast(self, stem: str) -> Any | None:
        """The compiled validator of a schema (jsonschema-rs), whose acceptance only is trusted;
        None where the schema's formats leave the reference alone to decide."""
        name = self._name(stem)
        if name not in self._fast:
            resources = [(BASE_URI + other, doc) for other, doc in self.contents.items()]
            trusted = self.formats(name) <= FAST_FORMATS
            self._fast[name] = (
                jsonschema_rs.validator_for(
                    self.contents[name], registry=jsonschema_rs.Registry(resources), validate_formats=True
                )
                if trusted
                else None
            )
        return self._fast[name]

    def formats(self, stem: str) -> set[str]:
        """Every ``format`` of the schema and of the schemas it refers to, however indirectly."""
        seen: set[str] = set()
        waiting = [self._name(stem)]
        found: set[str] = set()
        while waiting:
            name = waiting.pop()
            if name in seen or name not in self.contents:
                continue
            seen.add(name)
            for key, value in _items(self.contents[name]):
                if key == "format" and isinstance(value, str):
                    found.add(value)
                elif key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    waiting.append(value.partition("#")[0].rpartition("/")[2] or name)
        return found

    def accepts(self, stem: str, instance: Any) -> bool:
        """Whether the fast path finds ``instance`` valid (False: ask the reference)."""
        fast = self.fast(stem)
        if fast is None or not _plain_json(instance):
            return False
        try:
            return bool(fast.is_valid(instance))
        except (ValueError, OverflowError, RecursionError):  # a lone surrogate (UnicodeEncodeError), a huge number
            return False

    def validator(self, stem: str) -> Draft202012Validator:
        name = self._name(stem)
        if name not in self._validators:
            self._validators[name] = Draft202012Validator(
                self.contents[name],
                registry=self.registry,
                format_checker=Draft202012Validator.FORMAT_CHECKER,
            )
        return self._validators[name]

    def errors(self, stem: str, instance: Any) -> list[str]:
        """Every violation as ``path: message``; empty when the instance is valid."""
        if self.accepts(stem, instance):
            return []
        found = sorted(self.validator(stem).iter_errors(instance), key=lambda e: list(e.absolute_path))
        return [_describe(e) for e in found]

    def is_valid(self, stem: str, instance: Any) -> bool:
        return self.accepts(stem, instance) or bool(self.validator(stem).is_valid(instance))


FAST_FORMATS = frozenset({"uuid"})
"""The formats whose jsonschema-rs check accepts nothing the reference's refuses."""


def _items(node: Any) -> Any:
    """Every (key, value) pair of a JSON document, at any depth."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                yield key, value
                stack.append(value)
        elif isinstance(current, list):
            stack.extend(current)


_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})


def _plain_json(node: Any) -> bool:
    """Whether ``node`` is made of exactly the types ``json.loads`` makes (a dict with string keys,
    a list, str, int, float, bool, None): jsonschema-rs reads a tuple as an array, an Enum member
    or a Decimal as its value, where the reference refuses them, so anything else is the
    reference's to judge (found by review)."""
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is dict:
            if any(type(key) is not str for key in current):
                return False
            stack.extend(current.values())
        elif kind is list:
            stack.extend(current)
        elif kind not in _JSON_LEAVES:
            return False
    return True


def _describe(error: ValidationError) -> str:
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message[:300]}"


@cache
def load_registry() -> SchemaRegistry:
    """The registry of the installed schema files (read once per process)."""
    contents = {name: json.loads((SCHEMA_DIR / name).read_text("utf-8")) for name in schema_names()}
    return SchemaRegistry(contents)
