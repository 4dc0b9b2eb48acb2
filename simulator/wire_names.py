"""Serve the open member names under other spellings.

The seeds leave the member names of the capabilities body, its limits, a
turn's ``context`` and its ``knowledge_delivery`` object open (``[names.*]`` of wire-defaults.toml). The Core
produces canonical bodies; this step renames members where a response is
serialised, so a simulator can stand in for a Core that chose other names.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowledge_schemas import load_wire_defaults
from simulator.sizing import dumps


def _checked(overrides: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Defaults overlaid with ``overrides``; a ValueError names an unknown table or key, or a clash."""
    tables: dict[str, dict[str, str]] = load_wire_defaults()["names"]
    for table, members in overrides.items():
        if table not in tables:
            raise ValueError(f"wire names: unknown table [names.{table}]; known: {', '.join(sorted(tables))}")
        if not isinstance(members, Mapping):
            raise ValueError(f"wire names: [names.{table}] must be a table")
        unknown = sorted(set(members) - set(tables[table]))
        if unknown:
            raise ValueError(f"wire names: unknown key(s) {unknown} in [names.{table}]; known: {sorted(tables[table])}")
        tables[table].update(members)
    for table, members in tables.items():
        names = list(members.values())
        if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"wire names: [names.{table}] needs distinct non-empty string names, got {members}")
    return tables


def _rename(body: Any, mapping: Mapping[str, str]) -> Any:
    if not isinstance(body, dict):
        return body
    return {mapping.get(key, key): value for key, value in body.items()}


class WireNames:
    """Canonical -> served member names for capabilities, limits, turn context and its delivery object."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self.tables = _checked(overrides or {})
        self._changed = {t: {k: v for k, v in m.items() if k != v} for t, m in self.tables.items()}

    @property
    def is_default(self) -> bool:
        return not any(self._changed.values())

    def capabilities(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.is_default:
            return body
        limits = body.get("limits")
        out = _rename(
            {**body, "limits": _rename(limits, self._changed["limits"])} if "limits" in body else body,
            self._changed["capabilities"],
        )
        return dict(out)

    def turn(self, raw: bytes) -> bytes:
        """A serialised turn response (as stored for replays) with its context members, and those
        of its delivery object, renamed."""
        if self.is_default or not (self._changed["turn_context"] or self._changed["knowledge_delivery"]):
            return raw
        body = json.loads(raw)
        if isinstance(body, dict) and isinstance(body.get("context"), dict):
            context = body["context"]
            if isinstance(context.get("knowledge_delivery"), dict):
                context["knowledge_delivery"] = _rename(
                    context["knowledge_delivery"], self._changed["knowledge_delivery"]
                )
            body["context"] = _rename(context, self._changed["turn_context"])
        return dumps(body)


def load_wire_names(path: str) -> dict[str, Any]:
    """The ``[names.*]`` tables of a TOML file (the layout of wire-defaults.toml)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text("utf-8"))
    except OSError as exc:
        raise ValueError(f"--wire-names {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--wire-names {path}: not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"names"})
    if extra:
        raise ValueError(f"--wire-names {path}: only [names.*] tables belong here, found {extra}")
    names = data.get("names", {})
    _checked(names)
    return dict(names)
