"""A check names its requirement once: registered rules, a ledger per test, no stray ID literals."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import conformance
from conformance.common.outcomes import ContractViolation
from conformance.common.rules import Ledger, Rule, expect, held, named_in, recording, rule
from knowledge_schemas import Catalogue, load_catalogue
from tests.parsing import parse

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


def test_a_message_made_by_a_function_is_made_only_for_a_violation() -> None:
    """A check may pass a function for its message (scrubbing a Core's answer costs more than
    the check): a pass never calls it, a violation carries what it makes."""
    read = rule("READ-002")
    made: list[str] = []

    def message() -> str:
        made.append("made")
        return "the page was 4,097 bytes"

    with recording() as ledger:
        expect(True, read, message)
        assert made == []
        with pytest.raises(ContractViolation, match="4,097 bytes") as info:
            expect(False, read, message)
    assert made == ["made"] and info.value.requirement == "READ-002" and ledger.passed == {"READ-002"}


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


READ_002 = rule("READ-002")


def _helper() -> None:
    expect(True, rule("SRCH-003"), "a helper's check is its own, not the test's")


def test_a_test_names_the_rules_of_its_own_code() -> None:
    """Handles read as globals or from a rules module (a closure's too), inside comprehensions
    too; not the helpers it calls, nor a rule built at run time."""
    from conformance.server import rules as server

    def body() -> None:
        expect(True, READ_002, "a global handle")
        server.READ_003.held()
        assert [server.SRCH_004 for _ in range(1)]  # a comprehension is code of its own
        _helper()

    assert named_in(body) == {"READ-002", "READ-003", "SRCH-004"}
    assert named_in(len) == frozenset()


def _rules_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_rules", ROOT.parent / "tools" / "generate_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rules_modules_are_written_from_the_catalogue() -> None:
    """A requirement's registration follows from its catalogue entry (``tools/generate_rules.py``):
    adding one is an edit of the catalogue, and a hand edit of a rules module is undone here."""
    stale = _rules_generator().stale(load_catalogue())
    assert [str(path.relative_to(ROOT.parent)) for path in stale] == [], "run python tools/generate_rules.py"


def test_a_new_catalogue_entry_gets_its_handle_in_its_surface_s_module(tmp_path: Path) -> None:
    generator = _rules_generator()
    catalogue = load_catalogue()
    entry = dataclasses.replace(catalogue["SK-001"], id="SK-999")
    text = generator.module_text(("tool",), "The tool's rules", Catalogue((*catalogue, entry)))
    assert 'SK_999 = rule("SK-999")' in text and "READ_001" not in text
    assert generator.stale(catalogue, tmp_path), "a missing module is not current"


@pytest.mark.parametrize("module", sorted(SURFACE_RULES))
def test_each_surface_registers_only_its_own_rules(module: str) -> None:
    catalogue = load_catalogue()
    registered = [v for v in vars(importlib.import_module(module)).values() if isinstance(v, Rule)]
    assert registered, module
    assert {catalogue[r].surface for r in registered} == SURFACE_RULES[module]
    assert all(
        name == r.replace("-", "_") for name, r in vars(importlib.import_module(module)).items() if isinstance(r, Rule)
    )


def test_no_requirement_id_literal_outside_registrations() -> None:
    """An ID is written in the catalogue and at its registration, nowhere else: a mark names the
    handle (``@R(server.READ_002)``), so a string anywhere would be a third, unchecked naming."""
    stray = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "rules.py" and path.parent != ROOT / "target":
            continue  # the registrations
        tree = parse(path.read_text("utf-8"))
        stray += [
            f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ID.match(node.value)
        ]
    assert stray == []
