"""Member names the seeds leave open: the ``[names.*]`` tables of the wire configuration.

A Core may call the capabilities members, the limits, the members of a
turn's ``context`` and those of its ``knowledge_delivery`` object by other names. Checks look members up by their configured
names; schema validation first maps a body back to the canonical names, so the
JSON Schemas stay the single source of truth for the shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from knowledge_schemas import load_wire_defaults
from knowledge_schemas.openapi import load_document

TABLES = ("capabilities", "limits", "turn_context", "knowledge_delivery")


def check_names(names: Mapping[str, Any], where: str) -> None:
    """Every configured name is a non-empty string, distinct within its table (so it maps back)."""
    for table, members in names.items():
        seen: dict[str, str] = {}
        for canonical, name in members.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}: [names.{table}].{canonical} must be a non-empty string")
            if name in seen:
                raise ValueError(f"{where}: [names.{table}] gives {seen[name]} and {canonical} the same name {name!r}")
            seen[name] = canonical


def _rename(body: Any, mapping: Mapping[str, str]) -> Any:
    """``body`` with its members renamed by ``mapping`` (configured -> canonical); others kept.

    A member that carries a canonical name which this wire calls otherwise is
    an extra here (the schemas allow extras): it is left out, so it can neither
    stand in for the configured member nor hide it."""
    if not isinstance(body, dict):
        return body
    renamed_away = set(mapping.values())
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in mapping:
            out[mapping[key]] = value
        elif key not in renamed_away:
            out[key] = value
    return out


class WireNames:
    """The configured member names, and the way back to the canonical ones."""

    def __init__(self, names: Mapping[str, Mapping[str, str]] | None = None) -> None:
        defaults = load_wire_defaults()["names"]
        self.tables: dict[str, dict[str, str]] = {t: {**defaults[t], **dict((names or {}).get(t, {}))} for t in TABLES}
        check_names(self.tables, "wire names")
        self._back = {
            t: {name: canonical for canonical, name in m.items() if name != canonical} for t, m in self.tables.items()
        }

    @property
    def capabilities(self) -> dict[str, str]:
        return self.tables["capabilities"]

    @property
    def limits(self) -> dict[str, str]:
        return self.tables["limits"]

    @property
    def turn_context(self) -> dict[str, str]:
        return self.tables["turn_context"]

    @property
    def knowledge_delivery(self) -> dict[str, str]:
        return self.tables["knowledge_delivery"]

    def delivery(self, context: Any) -> Any:
        """A turn context's delivery object (looked up by its configured name) with canonical
        member names; None when the context has none, the value as sent when it is not an object."""
        if not isinstance(context, dict):
            return None
        return _rename(context.get(self.turn_context["knowledge_delivery"]), self._back["knowledge_delivery"])

    @property
    def is_default(self) -> bool:
        return not any(self._back.values())

    def to_canonical(self, stem: str, body: Any) -> Any:
        """A capabilities or turn response with the canonical member names (other bodies unchanged)."""
        if stem == "capabilities-response":
            caps = _rename(body, self._back["capabilities"])
            if isinstance(caps, dict) and "limits" in caps:
                caps["limits"] = _rename(caps["limits"], self._back["limits"])
            return caps
        if stem == "turn-response" and isinstance(body, dict) and "context" in body:
            context = _rename(body["context"], self._back["turn_context"])
            if isinstance(context, dict) and "knowledge_delivery" in context:
                context["knowledge_delivery"] = _rename(context["knowledge_delivery"], self._back["knowledge_delivery"])
            return {**body, "context": context}
        return body

    def canonical_content(self, stem: str | None, content: bytes) -> bytes:
        """Raw JSON bytes of a response, re-encoded with canonical names when any differ."""
        if stem is None or self.is_default:
            return content
        try:
            body = json.loads(content)
        except ValueError:
            return content
        return json.dumps(self.to_canonical(stem, body), ensure_ascii=False).encode("utf-8")


@cache
def response_stem(path: str, method: str, status: int) -> str | None:
    """The schema (file stem) of an operation's documented JSON response in openapi.yaml, if it names one."""
    operation = load_document()["paths"].get(path, {}).get(method.lower(), {})
    response = operation.get("responses", {}).get(str(status), {})
    ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
    return ref.removesuffix(".schema.json") if ref.endswith(".schema.json") else None
