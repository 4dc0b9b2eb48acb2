"""Each surface's rules module, written from the catalogue: one handle a live requirement
(``SK_031 = rule("SK-031")``), in the module of the surface the catalogue gives it, so adding a
requirement is its catalogue entry and nothing here by hand.

    python tools/generate_rules.py            # write conformance/<surface>/rules.py
    python tools/generate_rules.py --check    # exit 1 naming each module that is not current

Checks and marks name the handles (``@R(sk.SK_031)``), so a misspelt one stays a name error ruff
and mypy see; ``rule()`` still refuses an ID the catalogue lacks when the module is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: the packages are beside it
    sys.path.insert(0, str(ROOT))

from knowledge_schemas import Catalogue, load_catalogue  # noqa: E402

MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "conformance/server/rules.py": (
        ("server",),
        "The Core HTTP surface's rules (capabilities, turns, search, read, references, wire)",
    ),
    "conformance/mcp/rules.py": (("mcp",), "The MCP surfaces' rules (the Agent Session path and the job path)"),
    "conformance/search_knowledge/rules.py": (("tool",), "The rules of the ``search_knowledge`` MCP tool (seed 003)"),
    "conformance/clients/rules.py": (("client", "host"), "The client (SDK) and host transport rules"),
}
"""Each rules module: the catalogue surfaces it registers, and what its docstring says it holds."""


def module_text(surfaces: tuple[str, ...], what: str, catalogue: Catalogue) -> str:
    """One rules module: its docstring, the import, a handle per live requirement of its surfaces."""
    ids = sorted(r.id for r in catalogue if r.surface in surfaces)
    lines = [
        f'"""{what}: each registered once, by its catalogue ID (see conformance.common.rules).',
        "",
        "Written by tools/generate_rules.py from schemas/requirements.yaml: add a requirement there and",
        'run it; this file is not edited by hand."""',
        "",
        "from conformance.common.rules import rule",
        "",
        *(f'{rid.replace("-", "_")} = rule("{rid}")' for rid in ids),
    ]
    return "\n".join(lines) + "\n"


def stale(catalogue: Catalogue, root: Path = ROOT) -> dict[Path, str]:
    """Each module whose text is not what the catalogue gives, with the text it should have."""
    out = {}
    for relative, (surfaces, what) in MODULES.items():
        path, text = root / relative, module_text(surfaces, what, catalogue)
        if not path.is_file() or path.read_text("utf-8") != text:
            out[path] = text
    return out


def main(argv: list[str]) -> int:
    wrong = stale(load_catalogue())
    if "--check" in argv:
        for path in wrong:
            print(f"not current: {path.relative_to(ROOT)} (run python tools/generate_rules.py)")
        return 1 if wrong else 0
    for path, text in wrong.items():
        path.write_text(text, "utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
