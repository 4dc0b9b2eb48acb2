"""The house a contributor works in: every surface's tests one file per area (none much over 400
lines), each surface's world beside its rules, and a rule named by handle through its surface's
rules module, so the catalogue and the registration are the only places an ID is written."""

from __future__ import annotations

import ast
from pathlib import Path

import conformance
from tests.parsing import parse

ROOT = Path(conformance.__file__).resolve().parent
SUITE = ROOT / "suite"
AREA_LINES = 420  # "about 400": past it, a file holds more than one area
SURFACE_RULES = {"server", "mcp", "search_knowledge", "clients"}


def test_every_test_module_is_one_area_of_about_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted(SUITE.rglob("test_*.py"))
        if (n := len(p.read_text("utf-8").splitlines())) > AREA_LINES
    }
    assert long == {}, "split these by area, as conformance/suite/server/ is"


def test_each_surface_with_a_world_keeps_it_beside_its_rules() -> None:
    """No test module defines a world: a surface's world is its package's ``world.py``."""
    for surface in ("server", "search_knowledge", "clients"):
        assert (ROOT / surface / "world.py").is_file() and (ROOT / surface / "rules.py").is_file()
    worlds = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"
        for p in sorted(SUITE.rglob("*.py"))
        for node in ast.walk(parse(p.read_text("utf-8")))
        if isinstance(node, ast.ClassDef) and node.name.endswith("World")
    ]
    assert worlds == []


def test_rules_are_imported_as_modules() -> None:
    """``from conformance.server import rules as server``, never a list of handles: a list is a
    copy of the registrations that each module keeps again (they were the largest duplicated
    blocks of the tree)."""
    lists = [
        f"{p.relative_to(ROOT.parent)}:{node.lineno}"
        for p in sorted(ROOT.rglob("*.py"))
        for node in ast.walk(parse(p.read_text("utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module in {f"conformance.{s}.rules" for s in SURFACE_RULES}
    ]
    assert lists == [], "import the surface's rules module and name handles through it"


def test_the_test_commands_schedule_names_only_files_that_exist() -> None:
    """A file renamed away from tests/conftest.py's LONGEST_FIRST would silently lose its place."""
    from tests.conftest import LONGEST_FIRST

    here = Path(__file__).resolve().parent
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []
