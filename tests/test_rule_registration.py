"""A check names its requirement once: registered rules, a ledger per test, no stray ID literals."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import conformance
from conformance.target.outcomes import ContractViolation
from conformance.target.rules import Ledger, Rule, expect, held, recording, rule
from knowledge_schemas import load_catalogue

ROOT = Path(conformance.__file__).resolve().parent
ID = re.compile(r"^[A-Z]{2,6}-\d{3}$")
SURFACE_RULES = {
    "conformance.server.rules": {"server"},
    "conformance.mcp.rules": {"mcp"},
    "conformance.search_knowledge.rules": {"tool"},
    "conformance.clients.rules": {"client", "host"},
}


def test_an_unknown_id_is_refused_at_registration() -> None:
    with pytest.raises(LookupError, match="READ-999"):
        rule("READ-999")


def test_a_rule_is_its_id() -> None:
    read = rule("READ-002")
    keyed: dict[str, int] = {read: 1}
    assert isinstance(read, str) and read == "READ-002" and keyed["READ-002"] == 1


def test_a_passing_check_is_recorded_and_a_failing_one_names_its_rule() -> None:
    read, search = rule("READ-002"), rule("SRCH-003")
    with recording() as ledger:
        expect(True, read, "never shown")
        with pytest.raises(ContractViolation) as info:
            expect(False, search, "three hints at most")
    assert ledger.passed == {"READ-002"} and info.value.requirement == "SRCH-003"


def test_only_raising_records_nothing_and_held_records() -> None:
    read = rule("READ-002")
    with recording() as ledger:
        with pytest.raises(ContractViolation):
            raise read.violated("broken")
    assert ledger.passed == frozenset()
    with recording() as ledger:
        held([read])
        rule("READ-003").held()
    assert ledger.passed == {"READ-002", "READ-003"}


def test_recording_restores_the_outer_ledger() -> None:
    outer = Ledger()
    with recording(outer):
        with recording() as inner:
            rule("READ-002").held()
        rule("READ-003").held()
    assert inner.passed == {"READ-002"} and outer.passed == {"READ-003"}


@pytest.mark.parametrize("module", sorted(SURFACE_RULES))
def test_each_surface_registers_only_its_own_rules(module: str) -> None:
    catalogue = load_catalogue()
    registered = [v for v in vars(importlib.import_module(module)).values() if isinstance(v, Rule)]
    assert registered, module
    assert {catalogue[r].surface for r in registered} <= SURFACE_RULES[module]
    assert all(
        name == r.replace("-", "_") for name, r in vars(importlib.import_module(module)).items() if isinstance(r, Rule)
    )


def _marks(tree: ast.AST) -> set[int]:
    """Positions of string arguments of requirement marks (``R(...)``, ``requirement(...)``, ``pytest.mark.requirement``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("R", "requirement"):
                found.update(id(a) for a in node.args)
    return found


def test_no_requirement_id_literal_outside_registrations_and_marks() -> None:
    """An ID written as a string anywhere else in the suite would be a second, unchecked naming."""
    stray = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "rules.py" and path.parent != ROOT / "target":
            continue  # the registrations
        tree = ast.parse(path.read_text("utf-8"))
        marks = _marks(tree)
        stray += [
            f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ID.match(node.value)
            if id(node) not in marks
        ]
    assert stray == []
