"""Load the OpenAPI documents and bundle them into one self-contained mapping.

The documents point at the schema files by relative ``$ref``. Tools that
resolve references over the network (or not at all) get a bundled copy: every
schema file is inlined under ``components/schemas`` and its references are
rewritten to local pointers.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from knowledge_schemas._files import SCHEMA_DIR, load_yaml, schema_names

DOCUMENTS = ("openapi.yaml", "control-openapi.yaml")


def load_document(name: str = "openapi.yaml") -> dict[str, Any]:
    doc = load_yaml(name)
    if not isinstance(doc, dict):
        raise ValueError(f"{name} is not a mapping")
    return doc


def _component_key(filename: str) -> str:
    return filename.removesuffix(".schema.json").replace("-", "_")


def _rewrite(node: Any) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and not value.startswith("#"):
                target, _, pointer = value.partition("#")
                out[key] = f"#/components/schemas/{_component_key(target)}{pointer}"
            elif key in ("$id", "$schema"):
                continue
            else:
                out[key] = _rewrite(value)
        return out
    if isinstance(node, list):
        return [_rewrite(v) for v in node]
    return node


def _rewrite_internal(node: Any, owner: str) -> Any:
    """Make a schema file's own ``#/...`` references point inside its component."""
    if isinstance(node, dict):
        return {
            k: (
                f"#/components/schemas/{owner}{v[1:]}"
                if k == "$ref" and isinstance(v, str) and v.startswith("#/")
                else _rewrite_internal(v, owner)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_internal(v, owner) for v in node]
    return node


def bundle(name: str = "openapi.yaml") -> dict[str, Any]:
    """A self-contained copy of an OpenAPI document with every schema file inlined (the caller may mutate it)."""
    return copy.deepcopy(_bundled(name))


@cache
def _bundled(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = _rewrite(load_document(name))
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for filename in schema_names():
        key = _component_key(filename)
        raw = json.loads((SCHEMA_DIR / filename).read_text("utf-8"))
        schemas[key] = _rewrite(_rewrite_internal(raw, key))
    return doc


def component_validator(document: str, component: str) -> Any:
    """A validator for one ``components/schemas`` entry of a bundled OpenAPI document."""
    from jsonschema import Draft202012Validator

    root = {"$ref": f"#/components/schemas/{component}", "components": _bundled(document)["components"]}
    return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)
