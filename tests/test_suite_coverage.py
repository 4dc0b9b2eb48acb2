"""Every server-observable MUST of the catalogue has a test in the suite."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import conformance.suite
from knowledge_schemas import load_catalogue

PARAMETER_SET = type(pytest.param(None))


def _tagged() -> set[str]:
    """IDs on test functions and on their parametrized cases (``pytest.param(..., marks=...)``)."""
    found: set[str] = set()
    for info in pkgutil.walk_packages(conformance.suite.__path__, "conformance.suite."):
        if info.ispkg or info.name.startswith(
            "conformance.suite.clients."
        ):  # client checks: tests/test_client_harness.py
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == "requirement":
                    found.update(mark.args)
                if mark.name == "parametrize":
                    cases = [c for c in mark.args[1] if isinstance(c, PARAMETER_SET)]
                    found.update(rid for c in cases for m in c.marks if m.name == "requirement" for rid in m.args)
    return found


def test_every_server_observable_must_has_a_test() -> None:
    tagged = _tagged()
    missing = [r.id for r in load_catalogue() if r.server_observable and r.level == "MUST" and r.id not in tagged]
    assert missing == []


def test_suite_names_only_catalogued_ids() -> None:
    assert _tagged() - set(load_catalogue().ids) == set()
