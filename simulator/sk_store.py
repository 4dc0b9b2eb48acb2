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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from simulator.sk_ranking import Embedder

READ_SCOPE = "knowledge:read"


@dataclass
class WorkspaceState:
    inactive_bases: set[str] = field(default_factory=set)
    inactive_items: set[str] = field(default_factory=set)
    unpublished_items: set[str] = field(default_factory=set)
    runtime_enabled: bool = True
    scopes: dict[str, frozenset[str]] = field(default_factory=dict)  # account -> scopes, when control set them
    audit: list[dict[str, Any]] = field(default_factory=list)
    history: dict[str, list[str]] = field(default_factory=dict)  # item -> revision IDs, oldest first


class SkState:
    """Seed 003's states of each workspace, and the embedding cache."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._lock = threading.RLock()
        self._routes: dict[str, WorkspaceState] = {}
        self._vectors: dict[str, list[float]] = {}

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
        with self._lock:
            self.of(route).audit.append({"action": action, "at": at, **subject})

    def set_item(self, route: str, item_id: str, *, active: bool | None, published: bool | None, at: float) -> None:
        state = self.of(route)
        with self._lock:
            if active is not None:
                (state.inactive_items.discard if active else state.inactive_items.add)(item_id)
                self.audit(route, "knowledge.item.activated" if active else "knowledge.item.archived", at, item_id=item_id)
            if published is not None:
                (state.unpublished_items.discard if published else state.unpublished_items.add)(item_id)
                self.audit(route, "knowledge.item.published" if published else "knowledge.item.unpublished", at, item_id=item_id)

    def set_base(self, route: str, base_id: str, *, active: bool, at: float) -> None:
        state = self.of(route)
        with self._lock:
            (state.inactive_bases.discard if active else state.inactive_bases.add)(base_id)
            self.audit(route, "knowledge.base.activated" if active else "knowledge.base.archived", at, base_id=base_id)

    def published(self, route: str, item_id: str, previous: str, revision_id: str, at: float) -> None:
        state = self.of(route)
        with self._lock:
            history = state.history.setdefault(item_id, [previous])
            history.append(revision_id)
            state.unpublished_items.discard(item_id)
            self.audit(route, "knowledge.revision.published", at, item_id=item_id, revision_id=revision_id)

    def set_runtime(self, route: str, enabled: bool, at: float) -> None:
        with self._lock:
            self.of(route).runtime_enabled = enabled
            self.audit(route, "knowledge.runtime.enabled" if enabled else "knowledge.runtime.disabled", at)

    def set_scopes(self, route: str, account: str, scopes: list[str]) -> None:
        with self._lock:
            self.of(route).scopes[account] = frozenset(scopes)
