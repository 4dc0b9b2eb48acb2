"""The layers of ARCHITECTURE.md hold: every import goes to the importer's layer or below, no
import circle anywhere, and the suite and the simulator never import each other.

The layers are read from ARCHITECTURE.md itself (its ``layers`` block), so the document and
this test cannot drift apart. Imports inside functions count; imports under
``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.parsing import parse

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "knowledge_schemas" if (ROOT / "knowledge_schemas").is_dir() else ROOT / "schemas"
PACKAGES = {"knowledge_schemas": SCHEMAS, "conformance": ROOT / "conformance", "simulator": ROOT / "simulator"}


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(package, folder, path)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def _project_module(name: str) -> str | None:
    """The project module an import names (``a.b.c`` of ``from a.b import c`` when that is one), or None."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in modules().items():
        tree = parse(path.read_text("utf-8"))
        skipped = _type_checking_only(tree)
        named: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (base, node.module or "") if p)
                named.add(module)
                named.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {m for n in named if (m := _project_module(n)) is not None and m != name}
    return graph


@cache
def layers() -> list[list[str]]:
    """The ``layers`` block of ARCHITECTURE.md: one layer a line, lowest first, as module prefixes
    (``=name``: that module alone, so a bare package holds no module that was never placed)."""
    text = (ROOT / "ARCHITECTURE.md").read_text("utf-8")
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    found = []
    for line in block.group(1).splitlines():
        entries = line.split("#", 1)[0].split()
        if entries:
            found.append(entries)
    return found


def _stack(module: str) -> str:
    return module.split(".", 1)[0]


def layer_of(module: str) -> tuple[str, int]:
    """(stack, index) of the layer whose longest prefix matches ``module``."""
    best: tuple[int, int] | None = None
    for index, entries in enumerate(layers()):
        for entry in entries:
            exact, prefix = entry.startswith("="), entry.lstrip("=")
            if module == prefix or (not exact and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer of ARCHITECTURE.md"
    return _stack(module), best[1]


def test_every_module_is_in_a_layer() -> None:
    missing = []
    for module in modules():
        try:
            layer_of(module)
        except AssertionError:
            missing.append(module)
    assert missing == []


def test_imports_go_down_never_up() -> None:
    upward = []
    for module, targets in sorted(imports().items()):
        stack, index = layer_of(module)
        for target in sorted(targets):
            other, at = layer_of(target)
            if other == "knowledge_schemas":
                continue  # the contract as data sits below both stacks
            if other != stack:
                upward.append(f"{module} -> {target} (the suite and the simulator never import each other)")
            elif at > index:
                upward.append(f"{module} (layer {index}: {' '.join(layers()[index])}) -> {target} (layer {at})")
    assert upward == []


def test_no_import_circle() -> None:
    graph, circles = imports(), []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from conformance.server import checks\n", {"conformance.server", "conformance.server.checks"}),
        ("def f():\n    from conformance.common.rules import expect\n", {"conformance.common.rules"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from conformance.server.world import World\n",
            set(),
        ),
    ],
)
def test_the_reader_sees_module_function_level_imports_and_skips_type_checking_ones(
    tmp_path: Path, source: str, expected: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test of the test: an import it cannot see is an arrow it cannot judge."""
    folder = tmp_path / "conformance" / "probe"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "mod.py").write_text(source)
    known = {**modules(), "conformance.probe": folder / "__init__.py", "conformance.probe.mod": folder / "mod.py"}
    monkeypatch.setattr(f"{__name__}.modules", lambda: known)
    imports.cache_clear()
    try:
        assert imports()["conformance.probe.mod"] == expected
    finally:
        imports.cache_clear()
