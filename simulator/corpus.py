"""Corpora: the built-in demo, and loaders for a folder of Markdown/text files or a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.store import ItemInput

if TYPE_CHECKING:
    from simulator.core import Core

DEMO_DIR = Path(__file__).with_name("demo")
Bases = list[tuple[str, str, list[ItemInput]]]


def _title_of(path: Path, text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip() or path.stem
    return path.stem.replace("-", " ").replace("_", " ")


def load_folder(folder: Path) -> Bases:
    """Each ``*.md``/``*.txt`` file is an item; its sub-folder (or ``default``) is its base."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    grouped: dict[str, list[ItemInput]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.suffix in (".md", ".txt") and p.is_file()):
        text = path.read_text("utf-8")
        rel = path.relative_to(folder)
        base = rel.parts[0] if len(rel.parts) > 1 else "default"
        item_id = "-".join(rel.with_suffix("").parts).replace(" ", "_")[:128]
        grouped.setdefault(base, []).append(ItemInput(item_id, _title_of(path, text), text))
    if not grouped:
        raise ValueError(f"{folder} holds no .md or .txt files")
    return [(base, base, items) for base, items in sorted(grouped.items())]


def load_jsonl(path: Path) -> Bases:
    """One object a line: ``{"base", "id", "title", "content", "summary"?}``."""
    grouped: dict[str, list[ItemInput]] = {}
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            item = ItemInput(str(row["id"]), str(row["title"]), str(row["content"]), row.get("summary"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: expected {{base, id, title, content}}: {exc}") from None
        grouped.setdefault(str(row.get("base", "default")), []).append(item)
    return [(base, base, items) for base, items in sorted(grouped.items())]


def load_corpus(source: str) -> Bases:
    path = Path(source)
    return load_jsonl(path) if path.suffix == ".jsonl" else load_folder(path)


def seed_demo(core: Core, corpus: Bases | None = None) -> None:
    """The demo workspace: a small corpus; alice with two tokens of one session and a second session, and bob."""
    route = core.config.demo_route
    core.store.create_workspace(route)
    core.store.replace_corpus(route, corpus if corpus is not None else load_folder(DEMO_DIR), core.clock.now())
    alice = core.store.mint_identity("alice", route, core.config.hub, None)
    core.store.mint_identity("alice", route, core.config.hub, alice.session_id)
    core.store.mint_identity("alice", route, core.config.hub, None)
    core.store.mint_identity("bob", route, core.config.hub, None)
