"""Corpora: the built-in demo, and loaders for a folder of Markdown/text files or a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.store import Identity, ItemInput, Store

if TYPE_CHECKING:
    from simulator.core import Core

DEMO_DIR = Path(__file__).with_name("demo")
Bases = list[tuple[str, str, list[ItemInput]]]
KIT_MANIFEST = "manifest.json"
"""A folder with this file is a conformance corpus kit (``knowledge-conformance corpus export``)."""
STATES = ("disabled", "legacy", "unavailable")
"""The workspace states a staging Core can be kept in by hand, one workspace each."""
OTHER_HUB = "https://other-hub.knowledge-sim.example"
_ONE_DIFFERENCE: dict[tuple[str, ...], str] = {
    (): "same_session",
    ("session",): "other_session",
    ("account",): "other_account",
    ("route",): "other_route",
    ("hub",): "other_hub",
}
"""The role of an identity by the one binding in which it differs from ``primary`` (README's table)."""


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


def load_kit(folder: Path) -> Bases:
    """A corpus kit: its manifest names each document's file, base, item ID, title and summary;
    the file's UTF-8 bytes are the content, unchanged (read as bytes: no newline translation)."""
    try:
        data = json.loads((folder / KIT_MANIFEST).read_text("utf-8"))
        grouped: dict[str, list[ItemInput]] = {}
        for entry in data["documents"]:
            text = (folder / entry["file"]).read_bytes().decode("utf-8")
            item = ItemInput(str(entry["item_id"]), str(entry["title"]), text, entry.get("summary"))
            grouped.setdefault(str(entry["base"]), []).append(item)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{folder}: not a corpus kit ({type(exc).__name__}: {exc})") from None
    return [(base, base, items) for base, items in sorted(grouped.items())]


def load_corpus(source: str) -> Bases:
    path = Path(source)
    if path.is_dir() and (path / KIT_MANIFEST).is_file():
        return load_kit(path)
    return load_jsonl(path) if path.suffix == ".jsonl" else load_folder(path)


def seed_staging(core: Core, corpus: Bases, route: str) -> tuple[dict[str, Identity], dict[str, Identity]]:
    """A staging deployment as a Core without control keeps it: ``corpus`` in ``route`` and in a
    second workspace, a token for every identity role a target configuration names, and one
    workspace per state (``route-disabled``, ...) holding the corpus too. Returns the identities
    by role and the state workspaces' identities by state."""
    store, now, hub = core.store, core.clock.now(), core.config.hub
    other = f"{route}-other"
    for at, mode in ((route, "normal"), (other, "normal"), *((f"{route}-{state}", state) for state in STATES)):
        store.create_workspace(at, mode)
        store.replace_corpus(at, corpus, now)
    primary = store.mint_identity("alice", route, hub, None)
    roles = {
        "primary": primary,
        "same_session": store.mint_identity("alice", route, hub, primary.session_id),
        "other_session": store.mint_identity("alice", route, hub, None),
        "other_account": store.mint_identity("bob", route, hub, primary.session_id),
        "other_route": store.mint_identity("alice", other, hub, primary.session_id),
        "other_hub": store.mint_identity("alice", route, OTHER_HUB, primary.session_id),
    }
    states = {state: store.mint_identity("alice", f"{route}-{state}", hub, None) for state in STATES}
    return roles, states


def target_toml(url: str, route: str, roles: dict[str, Identity], states: dict[str, Identity], *, kit: bool) -> str:
    """A target configuration for the suite (``--write-target``): the URL, the identities, the
    state workspaces and, for a corpus kit, its route. Tokens are written as they are: a test setting."""
    lines = ["[target]", f'url = "{url}"', f'route = "{route}"', 'probe_query = "binding"']
    if kit:
        lines.append(f'kit_route = "{route}"')
    for role, ident in roles.items():
        lines += ["", f"[identities.{role}]", f'token = "{ident.token}"', f'route = "{ident.route}"']
        lines += [f'account = "{ident.account}"', f'session = "{ident.session_id}"']
    for state, ident in states.items():
        lines += ["", f"[target.workspaces.{state}]", f'route = "{ident.route}"', f'token = "{ident.token}"']
    return "\n".join(lines) + "\n"


def seed_demo(core: Core, corpus: Bases | None = None) -> None:
    """The demo workspace: a small corpus (the built-in one has a document that pages and one past the
    chain budget); alice with two tokens of one session and a second session, and bob in alice's
    session: primary, same_session, other_session and other_account of ``roles_in``."""
    route = core.config.demo_route
    core.store.create_workspace(route)
    core.store.replace_corpus(route, corpus if corpus is not None else load_folder(DEMO_DIR), core.clock.now())
    alice = core.store.mint_identity("alice", route, core.config.hub, None)
    core.store.mint_identity("alice", route, core.config.hub, alice.session_id)
    core.store.mint_identity("alice", route, core.config.hub, None)
    core.store.mint_identity("bob", route, core.config.hub, alice.session_id)


def roles_in(store: Store, route: str, hub: str) -> tuple[dict[str, Identity], dict[str, Identity]]:
    """The identity roles a store holds for ``route``, told by what each identity shares with the
    route's first one (``primary``): the first identity that differs in exactly one binding takes
    that binding's role (``other_route`` on ``route-other``, ``other_hub`` of another Hub), and the
    first identity of each state workspace (``route-disabled``, ...) stands for it. Works on a store
    seeded by ``seed_staging`` or ``seed_demo``, freshly or kept from an earlier start; identities
    minted later (through control) take no role. Returns roles and states as ``seed_staging`` does."""
    candidates = [i for i in store.identities(route) if i.hub == hub]
    if not candidates:
        return {}, {}
    primary = candidates[0]
    roles = {"primary": primary}
    for ident in [*store.identities(route), *store.identities(f"{route}-other")]:
        differs = tuple(
            name
            for name, same in (
                ("route", ident.route == primary.route),
                ("hub", ident.hub == primary.hub),
                ("account", ident.account == primary.account),
                ("session", ident.session_id == primary.session_id),
            )
            if not same
        )
        role = _ONE_DIFFERENCE.get(differs)
        if role is not None and ident.token != primary.token:
            roles.setdefault(role, ident)
    states: dict[str, Identity] = {}
    for state in STATES:
        kept = store.identities(f"{route}-{state}")
        if kept:
            states[state] = kept[0]
    return roles, states
