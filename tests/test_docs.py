"""The documentation: its generated pages current (so no count is edited by hand), the site built
with ``mkdocs build --strict`` (no broken link or anchor, no page outside the nav, no warning), the
README short with the two commands first, every user page opening on its three commands, every
requirement in the browser with its clause and its proof, and the contributor's recipe naming
only what the tree has."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from conformance.common.config import validate_config_data
from knowledge_schemas import load_catalogue
from simulator.quirks import QUIRKS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/knowledge-conformance run",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest -n 3 --dist loadfile",
)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_docs", ROOT / "tools" / "generate_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def _blocks(text: str, kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", text, re.S)


def test_the_generated_pages_are_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "generate_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-1000:]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # the theme's notice about its own future, not a docs problem
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "WARNING" not in out, out[-3000:]
    assert (tmp_path / "site" / "reference" / "requirements-server" / "index.html").is_file()


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= 150
    assert [b.strip() for b in _blocks(text, "sh")[:2]] == list(COMMANDS)
    first = text.index("```sh")
    assert text[:first].count("\n## ") == 0, "nothing comes before the two commands"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).is_file(), f"README links to {target}, which is not in the tree"


@pytest.mark.parametrize(
    "page", ["core-implementer.md", "ci-engineer.md", "sdk-host-author.md", "mcp-server-author.md"]
)
def test_each_user_page_starts_with_its_three_commands(page: str) -> None:
    lines = (DOCS / "users" / page).read_text("utf-8").splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] == "```sh", lines[:3]
    block = lines[3 : lines.index("```", 3)]
    assert len(block) == 3 and all(line.split()[0] in ("knowledge-conformance", "knowledge-sim") for line in block)


def test_every_documented_configuration_is_valid() -> None:
    """Every target configuration a page shows passes the schema the suite checks files against;
    a waivers example is a waivers file the suite reads."""
    from conformance.report.results import load_waivers

    shown = 0
    for page in [README, *DOCS.rglob("*.md")]:
        for block in _blocks(page.read_text("utf-8"), "toml"):
            data = tomllib.loads(block)
            if "waiver" in data:
                continue
            validate_config_data(data, str(page.relative_to(ROOT)))
            shown += 1
    assert shown >= 5
    for page in (README, DOCS / "gates.md"):
        (block, *_) = [b for b in _blocks(page.read_text("utf-8"), "toml") if "[[waiver]]" in b]
        file = page.parent / ".waivers-example.toml"
        try:
            file.write_text(block, "utf-8")
            assert load_waivers(str(file), load_catalogue())
        finally:
            file.unlink()


def test_the_browser_lists_every_requirement_with_its_clause_and_proof() -> None:
    catalogue = load_catalogue()
    proofs = GENERATOR.proofs()
    pages = {s: (DOCS / "reference" / f"requirements-{s}.md").read_text("utf-8") for s in GENERATOR.SURFACES}
    for req in catalogue:
        page = pages[req.surface]
        start = page.index(f"{{#{req.id.lower()}}}")
        entry = page[start : page.find("\n### ", start)]
        assert f"> {GENERATOR._text(req.quote)}" in entry, req.id
        assert f"**{req.level}**" in entry and "**Checked by:**" in entry and "**Proof it can fail:**" in entry
        for proof in proofs.get(req.id, []):
            assert f"`{proof.name}`" in entry, (req.id, proof.name)


def test_the_figures_come_from_the_data() -> None:
    """The counts a reader is told (once stated by hand in the README) are the data's."""
    index = (DOCS / "reference" / "requirements.md").read_text("utf-8")
    fast = GENERATOR._fast_quirks()
    assert set(fast) <= set(QUIRKS)
    assert f"**{len(load_catalogue())} requirements**" in index
    assert f"a fast subset of {len(fast)} of the {len(QUIRKS)} by default" in index
    assert f"because the whole table is {len(QUIRKS)} whole-suite runs" in index
    hand_written = [p for p in DOCS.rglob("*.md") if "reference" not in p.parts]
    for page in [README, *hand_written]:
        text = page.read_text("utf-8")
        assert f"{len(load_catalogue())} requirements" not in text, f"{page.name} states the catalogue's size by hand"
        assert f"of the {len(QUIRKS)}" not in text, f"{page.name} states the quirk table's size by hand"


def test_the_recipe_names_only_what_the_tree_has() -> None:
    """The contributor's recipe, checked against the tree: the files and folders it names exist,
    and so do the functions its example calls."""
    text = (DOCS / "contributing" / "recipes.md").read_text("utf-8")
    paths = set(re.findall(r"`((?:schemas|conformance|simulator|tests|tools|docs)/[\w./<> -]*?)`", text))
    assert len(paths) > 15
    for path in paths:
        if "<" in path:  # conformance/suite/<surface>/<area file>: each surface folder exists
            for surface in ("server", "mcp", "search_knowledge", "clients"):
                assert (ROOT / "conformance" / "suite" / surface).is_dir()
            continue
        assert (ROOT / path.rstrip("/")).exists(), f"the recipe names {path}, which the tree does not have"
    from conformance.clients import miniatures as clients
    from conformance.common.rules import Rule, expect, rule
    from conformance.server import checks
    from conformance.server.world import World
    from simulator.miniatures import search

    assert callable(checks.search_response) and callable(World.start_run) and callable(World.search)
    assert callable(expect) and callable(rule) and callable(Rule.held) and callable(Rule.fail)
    assert search.MINIATURES and clients.MINIATURES
