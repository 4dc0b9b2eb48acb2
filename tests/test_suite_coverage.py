"""Every server-observable MUST of the catalogue has a test in the suite."""

from __future__ import annotations

import importlib
import pkgutil

import conformance.suite
from knowledge_schemas import load_catalogue


def _tagged() -> set[str]:
    found: set[str] = set()
    for info in pkgutil.iter_modules(conformance.suite.__path__):
        module = importlib.import_module(f"conformance.suite.{info.name}")
        for obj in vars(module).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == "requirement":
                    found.update(mark.args)
    return found


def test_every_server_observable_must_has_a_test() -> None:
    tagged = _tagged()
    missing = [r.id for r in load_catalogue() if r.server_observable and r.level == "MUST" and r.id not in tagged]
    assert missing == []


def test_suite_names_only_catalogued_ids() -> None:
    assert _tagged() - set(load_catalogue().ids) == set()
