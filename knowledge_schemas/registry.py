"""One cached registry of every schema, and validators built once from it."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

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

    def validator(self, stem: str) -> Draft202012Validator:
        name = stem if stem.endswith(".schema.json") else f"{stem}.schema.json"
        if name not in self.contents:
            raise KeyError(f"no schema named {name!r}; known: {sorted(self.contents)}")
        if name not in self._validators:
            self._validators[name] = Draft202012Validator(
                self.contents[name],
                registry=self.registry,
                format_checker=Draft202012Validator.FORMAT_CHECKER,
            )
        return self._validators[name]

    def errors(self, stem: str, instance: Any) -> list[str]:
        """Every violation as ``path: message``; empty when the instance is valid."""
        found = sorted(self.validator(stem).iter_errors(instance), key=lambda e: list(e.absolute_path))
        return [_describe(e) for e in found]

    def is_valid(self, stem: str, instance: Any) -> bool:
        return bool(self.validator(stem).is_valid(instance))


def _describe(error: ValidationError) -> str:
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message[:300]}"


@cache
def load_registry() -> SchemaRegistry:
    """The registry of the installed schema files (read once per process)."""
    contents = {name: json.loads((SCHEMA_DIR / name).read_text("utf-8")) for name in schema_names()}
    return SchemaRegistry(contents)
