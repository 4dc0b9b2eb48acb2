"""What the ``search_knowledge`` tool (seed 003) knows beyond the shared corpus.

Bases, items and immutable revisions are the simulator's one store (``simulator.store``):
the Core's HTTP search and this tool read the same revisions, and an item's current revision
is the one the store publishes. This layer adds the states of seed 003, kept in memory per
workspace and dropped whenever the workspace's corpus is replaced or the store is reset:

- a base or an item can be inactive (archived); an item can be unpublished;
- the Knowledge runtime switch of a workspace (on by default);
- which accounts lack ``knowledge:read`` (every identity holds it unless control removes it);
- the audit log of the Knowledge service operations (publish, archive, unpublish, switch):
  the read-only tool writes none, and control can show the log to prove it;
- the revision history control published, oldest first (to show a historical revision is
  never what query search returns);
- an embedding cache per revision: revisions are immutable, so a vector never goes stale.

Once ``attach``-ed to the store (``SearchKnowledge`` does it), every state but the embedding
cache is kept in the store's SQLite database beside the corpus: a served simulator with
``--database FILE`` restarts with its archived, unpublished and inactive resources, its runtime
switches, scopes, revision history and audit log as they were. Each workspace's states are one
JSON row (written whole on each change, under the lock; they are small), the audit log its own
rows (appended). In memory they are a cache of those rows, loaded once at start.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator.search_knowledge.ranking import Embedder

if TYPE_CHECKING:
    from simulator.store import Store

READ_SCOPE = "knowledge:read"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sk_states(route TEXT PRIMARY KEY, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sk_audit(seq INTEGER PRIMARY KEY AUTOINCREMENT, route TEXT NOT NULL, event TEXT NOT NULL)",
)


@dataclass
class WorkspaceState:
    inactive_bases: set[str] = field(default_factory=set)
    inactive_items: set[str] = field(default_factory=set)
    unpublished_items: set[str] = field(default_factory=set)
    runtime_enabled: bool = True
    scopes: dict[str, frozenset[str]] = field(default_factory=dict)  # account -> scopes, when control set them
    audit: list[dict[str, Any]] = field(default_factory=list)
    history: dict[str, list[str]] = field(default_factory=dict)  # item -> revision IDs, oldest first

    def to_json(self) -> str:
        """Everything but the audit log (kept as rows of its own)."""
        return json.dumps(
            {
                "inactive_bases": sorted(self.inactive_bases),
                "inactive_items": sorted(self.inactive_items),
                "unpublished_items": sorted(self.unpublished_items),
                "runtime_enabled": self.runtime_enabled,
                "scopes": {a: sorted(s) for a, s in sorted(self.scopes.items())},
                "history": self.history,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, audit: list[dict[str, Any]]) -> WorkspaceState:
        data = json.loads(text)
        return cls(
            set(data["inactive_bases"]),
            set(data["inactive_items"]),
            set(data["unpublished_items"]),
            bool(data["runtime_enabled"]),
            {a: frozenset(s) for a, s in data["scopes"].items()},
            audit,
            {i: list(r) for i, r in data["history"].items()},
        )


class SkState:
    """Seed 003's states of each workspace, and the embedding cache."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._lock = threading.RLock()
        self._routes: dict[str, WorkspaceState] = {}
        self._vectors: dict[str, list[float]] = {}
        self._store: Store | None = None

    def attach(self, store: Store) -> None:
        """Keep the states in ``store``'s database, and load what an earlier start kept there."""
        with self._lock, store.transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            audit: dict[str, list[dict[str, Any]]] = {}
            for row in db.execute("SELECT route, event FROM sk_audit ORDER BY seq"):
                audit.setdefault(row["route"], []).append(json.loads(row["event"]))
            self._routes = {
                row["route"]: WorkspaceState.from_json(row["state"], audit.pop(row["route"], []))
                for row in db.execute("SELECT route, state FROM sk_states")
            }
            for route, events in audit.items():  # a workspace whose only states are audit events
                self._routes[route] = WorkspaceState(audit=events)
            self._store = store

    def _save(self, route: str) -> None:
        """Write a workspace's states through to the store (called under the lock, after a change)."""
        if self._store is not None:
            with self._store.transaction() as db:
                db.execute("INSERT OR REPLACE INTO sk_states VALUES(?, ?)", (route, self.of(route).to_json()))

    def of(self, route: str) -> WorkspaceState:
        with self._lock:
            return self._routes.setdefault(route, WorkspaceState())

    def forget(self, route: str | None = None) -> None:
        """Drop a workspace's states (its corpus was replaced or it was deleted), or every one."""
        with self._lock:
            if route is None:
                self._routes.clear()
                self._vectors.clear()
            else:
                self._routes.pop(route, None)
            if self._store is not None:
                with self._store.transaction() as db:
                    for table in ("sk_states", "sk_audit"):
                        db.execute(
                            f"DELETE FROM {table}" + ("" if route is None else " WHERE route=?"),
                            () if route is None else (route,),
                        )

    # ------------------------------------------------------------- reads
    def can_read(self, route: str, account: str) -> bool:
        scopes = self.of(route).scopes.get(account)
        return scopes is None or READ_SCOPE in scopes

    def vector(self, revision_id: str, text: str) -> list[float]:
        with self._lock:
            found = self._vectors.get(revision_id)
            if found is None:
                found = self._vectors[revision_id] = self.embedder.embed(text)
            return found

    # ------------------------------------------------------------ writes (control, the service operations)
    def audit(self, route: str, action: str, at: float, **subject: str) -> None:
        event = {"action": action, "at": at, **subject}
        with self._lock:
            self.of(route).audit.append(event)
            if self._store is not None:
                with self._store.transaction() as db:
                    db.execute(
                        "INSERT INTO sk_audit(route, event) VALUES(?, ?)",
                        (route, json.dumps(event, ensure_ascii=False)),
                    )

    def set_item(self, route: str, item_id: str, *, active: bool | None, published: bool | None, at: float) -> None:
        state = self.of(route)
        with self._lock:
            if active is not None:
                (state.inactive_items.discard if active else state.inactive_items.add)(item_id)
                self.audit(
                    route, "knowledge.item.activated" if active else "knowledge.item.archived", at, item_id=item_id
                )
            if published is not None:
                (state.unpublished_items.discard if published else state.unpublished_items.add)(item_id)
                self.audit(
                    route,
                    "knowledge.item.published" if published else "knowledge.item.unpublished",
                    at,
                    item_id=item_id,
                )
            self._save(route)

    def set_base(self, route: str, base_id: str, *, active: bool, at: float) -> None:
        state = self.of(route)
        with self._lock:
            (state.inactive_bases.discard if active else state.inactive_bases.add)(base_id)
            self.audit(route, "knowledge.base.activated" if active else "knowledge.base.archived", at, base_id=base_id)
            self._save(route)

    def published(self, route: str, item_id: str, previous: str, revision_id: str, at: float) -> None:
        state = self.of(route)
        with self._lock:
            history = state.history.setdefault(item_id, [previous])
            history.append(revision_id)
            state.unpublished_items.discard(item_id)
            self.audit(route, "knowledge.revision.published", at, item_id=item_id, revision_id=revision_id)
            self._save(route)

    def set_runtime(self, route: str, enabled: bool, at: float) -> None:
        with self._lock:
            self.of(route).runtime_enabled = enabled
            self.audit(route, "knowledge.runtime.enabled" if enabled else "knowledge.runtime.disabled", at)
            self._save(route)

    def set_scopes(self, route: str, account: str, scopes: list[str]) -> None:
        with self._lock:
            self.of(route).scopes[account] = frozenset(scopes)
            self._save(route)
