"""pyproject.toml's package list against the tree.

The list is written by hand (setuptools' package discovery cannot also map the contract's
data folder ``schemas/`` into ``knowledge_schemas``), so a forgotten sub-package would be
missing from the wheel without a word: these tests say which. tests/test_wheel.py checks the
built wheel itself.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CODE = ("conformance", "simulator", "knowledge_schemas")
DATA_PACKAGE, DATA_DIR = "knowledge_schemas.schemas", "schemas"


def _setuptools() -> dict[str, Any]:
    table: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    return table


def _ignored(path: Path) -> bool:
    return any(part == "__pycache__" or part.startswith(".") for part in path.relative_to(ROOT).parts)


def test_the_package_list_is_every_folder_with_an_init_module() -> None:
    in_tree = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in CODE
        for init in (ROOT / top).rglob("__init__.py")
        if not _ignored(init)
    }
    listed = set(_setuptools()["packages"])
    assert sorted(in_tree - listed) == [], "packages missing from pyproject.toml's [tool.setuptools] packages"
    assert sorted(listed - in_tree - {DATA_PACKAGE}) == [], "listed packages with no folder (or no __init__.py)"
    assert DATA_PACKAGE in listed


def test_every_folder_of_python_modules_is_a_package() -> None:
    """A module in a folder without ``__init__.py`` would be in no listed package, so in no wheel."""
    orphans = sorted(
        str(module.relative_to(ROOT))
        for top in CODE
        for module in (ROOT / top).rglob("*.py")
        if not _ignored(module) and not (module.parent / "__init__.py").is_file()
    )
    assert orphans == []


def test_the_contract_data_folder_is_mapped_and_holds_no_code() -> None:
    """schemas/ is data only: the loaders are knowledge_schemas/, the one place mypy and imports
    see them; the wheel ships schemas/ as the data package knowledge_schemas.schemas."""
    setuptools = _setuptools()
    assert setuptools["package-dir"] == {DATA_PACKAGE: DATA_DIR}
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / DATA_DIR).rglob("*.py")) == []
    data = setuptools["package-data"]
    assert set(data) <= set(setuptools["packages"]), "package-data for a package that is not listed"
