"""The knowledge store: workspaces, bases, items, immutable revisions, scopes,
identities, runs and turns, in SQLite (in memory by default, a file when given).

Ranked lexical search is SQLite FTS5's BM25 over each item's current
published revision; older revisions stay addressable by ID, so the
``search_knowledge`` tool of seed 003 can be served from the same tables.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from random import Random

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workspaces(
  route TEXT PRIMARY KEY, mode TEXT NOT NULL DEFAULT 'normal', legacy_status INTEGER NOT NULL DEFAULT 404);
CREATE TABLE IF NOT EXISTS bases(route TEXT NOT NULL, base_id TEXT NOT NULL, name TEXT NOT NULL,
  PRIMARY KEY(route, base_id));
CREATE TABLE IF NOT EXISTS items(route TEXT NOT NULL, item_id TEXT NOT NULL, base_id TEXT NOT NULL,
  current_revision TEXT NOT NULL, PRIMARY KEY(route, item_id));
CREATE TABLE IF NOT EXISTS revisions(revision_id TEXT PRIMARY KEY, route TEXT NOT NULL, item_id TEXT NOT NULL,
  title TEXT NOT NULL, summary TEXT, content TEXT NOT NULL, published_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS scopes(route TEXT NOT NULL, account TEXT NOT NULL, bases TEXT, version INTEGER NOT NULL,
  PRIMARY KEY(route, account));
CREATE TABLE IF NOT EXISTS identities(token TEXT PRIMARY KEY, account TEXT NOT NULL, hub TEXT NOT NULL,
  session_id TEXT NOT NULL, route TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, route TEXT NOT NULL, session_id TEXT NOT NULL,
  account TEXT NOT NULL, hub TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS turns(turn_key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, run_id TEXT NOT NULL,
  response TEXT NOT NULL);
"""
_DATA_TABLES = ("workspaces", "bases", "items", "revisions", "scopes", "identities", "runs", "turns")
_WORD = re.compile(r"\w+", re.UNICODE)


def _index_name(route: str) -> str:
    """The full-text index of one workspace: its own table, so ranking statistics (document
    frequencies, average lengths) come from that workspace alone, never from another tenant's."""
    return '"fts_' + hashlib.sha256(route.encode("utf-8")).hexdigest()[:24] + '"'


@dataclass(frozen=True)
class Identity:
    token: str
    account: str
    hub: str
    session_id: str
    route: str


@dataclass(frozen=True)
class Run:
    run_id: str
    route: str
    session_id: str
    account: str
    hub: str


@dataclass(frozen=True)
class Revision:
    revision_id: str
    item_id: str
    base_id: str
    title: str
    summary: str | None
    content: str


@dataclass(frozen=True)
class Scope:
    bases: tuple[str, ...] | None  # None: every base of the workspace
    version: int


@dataclass(frozen=True)
class ItemInput:
    item_id: str
    title: str
    content: str
    summary: str | None = None


class Store:
    """Thread-safe access to one SQLite database; every write is one transaction."""

    def __init__(self, path: str, rng: Random, *, key_source: Callable[[], bytes] | None = None) -> None:
        """``rng`` draws IDs and tokens; ``key_source`` makes the signing key the first time the
        store is opened (default: the operating system's secret source). The key is never drawn
        from ``rng``: IDs are public, and a generator's outputs reveal its state."""
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._key_source = key_source or (lambda: secrets.token_bytes(32))
        self._db.executescript(_SCHEMA)
        # Reopening a kept store must not replay the ID stream of an earlier start (IDs would collide
        # with stored ones): each start of the same store draws from its own stream, still a function
        # of the seed and of how many times the store was opened, so a replay stays a replay.
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='opened'").fetchone()
            opened = int(row["value"]) + 1 if row is not None else 1
            db.execute("INSERT OR REPLACE INTO meta VALUES('opened', ?)", (str(opened),))
        self._rng = rng if opened == 1 else Random(f"{rng.getrandbits(64)}:{opened}")

    # ------------------------------------------------------------ plumbing
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _one(self, sql: str, args: Sequence[object] = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, args).fetchone()
            return row

    def new_id(self, prefix: str, nbytes: int = 8) -> str:
        return f"{prefix}{self._rng.getrandbits(nbytes * 8):0{nbytes * 2}x}"

    def new_uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def signing_key(self) -> bytes:
        """The reference-signing key; created once and kept with the store."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='signing_key'").fetchone()
            if row is None:
                key = self._key_source()
                db.execute("INSERT INTO meta VALUES('signing_key', ?)", (key.hex(),))
                return key
            return bytes.fromhex(row["value"])

    def reset(self) -> None:
        with self.transaction() as db:
            for table in _DATA_TABLES:
                db.execute(f"DELETE FROM {table}")
            indexes = [r["name"] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%'")]
            for name in indexes:
                db.execute(f'DROP TABLE IF EXISTS "{name}"')

    # ---------------------------------------------------------- workspaces
    def create_workspace(self, route: str, mode: str = "normal") -> bool:
        with self.transaction() as db:
            cur = db.execute("INSERT OR IGNORE INTO workspaces(route, mode) VALUES(?, ?)", (route, mode))
            return cur.rowcount == 1

    def delete_workspace(self, route: str) -> bool:
        """Remove a workspace and everything in it (corpus, scopes, identities, runs, turns)."""
        with self.transaction() as db:
            db.execute("DELETE FROM turns WHERE run_id IN (SELECT run_id FROM runs WHERE route=?)", (route,))
            for table in ("bases", "items", "revisions", "scopes", "identities", "runs"):
                db.execute(f"DELETE FROM {table} WHERE route=?", (route,))
            db.execute(f"DROP TABLE IF EXISTS {_index_name(route)}")
            return db.execute("DELETE FROM workspaces WHERE route=?", (route,)).rowcount == 1

    def workspace(self, route: str) -> tuple[str, int] | None:
        row = self._one("SELECT mode, legacy_status FROM workspaces WHERE route=?", (route,))
        return None if row is None else (row["mode"], row["legacy_status"])

    def set_mode(self, route: str, mode: str, legacy_status: int | None) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE workspaces SET mode=?, legacy_status=COALESCE(?, legacy_status) WHERE route=?",
                (mode, legacy_status, route),
            )

    def routes(self) -> list[str]:
        with self._lock:
            return [r["route"] for r in self._db.execute("SELECT route FROM workspaces ORDER BY route")]

    # --------------------------------------------------------------- corpus
    def replace_corpus(self, route: str, bases: list[tuple[str, str, list[ItemInput]]], now: float) -> dict[str, str]:
        """Swap a workspace's whole corpus atomically; returns item -> current revision."""
        published: dict[str, str] = {}
        with self.transaction() as db:
            for table in ("bases", "items", "revisions"):
                db.execute(f"DELETE FROM {table} WHERE route=?", (route,))
            db.execute(f"DROP TABLE IF EXISTS {_index_name(route)}")
            db.execute("UPDATE scopes SET version = version + 1 WHERE route=?", (route,))
            for base_id, name, items in bases:
                db.execute("INSERT INTO bases VALUES(?, ?, ?)", (route, base_id, name))
                for item in items:
                    if item.item_id in published:
                        raise ValueError(f"item id {item.item_id!r} appears twice")
                    rev = self.new_id("rev_")
                    db.execute("INSERT INTO items VALUES(?, ?, ?, ?)", (route, item.item_id, base_id, rev))
                    self._insert_revision(db, route, base_id, item, rev, now)
                    published[item.item_id] = rev
        return published

    def _insert_revision(self, db: sqlite3.Connection, route: str, base_id: str, item: ItemInput, rev: str, now: float) -> None:
        db.execute(
            "INSERT INTO revisions VALUES(?, ?, ?, ?, ?, ?, ?)",
            (rev, route, item.item_id, item.title, item.summary, item.content, now),
        )
        index = _index_name(route)
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {index} USING fts5("
                   "title, content, item_id UNINDEXED, base_id UNINDEXED, tokenize='unicode61')")
        db.execute(f"INSERT INTO {index}(title, content, item_id, base_id) VALUES(?, ?, ?, ?)", (item.title, item.content, item.item_id, base_id))

    def publish_revision(self, route: str, item_id: str, content: str, title: str | None, summary: str | None, now: float) -> str | None:
        with self.transaction() as db:
            row = db.execute(
                "SELECT i.base_id, r.title, r.summary FROM items i JOIN revisions r ON r.revision_id = i.current_revision "
                "WHERE i.route=? AND i.item_id=?",
                (route, item_id),
            ).fetchone()
            if row is None:
                return None
            rev = self.new_id("rev_")
            db.execute(f"DELETE FROM {_index_name(route)} WHERE item_id=?", (item_id,))  # only the current revision is searchable
            item = ItemInput(item_id, title if title is not None else row["title"], content,
                             summary if summary is not None else (row["summary"] if title is None else None))
            self._insert_revision(db, route, row["base_id"], item, rev, now)
            db.execute("UPDATE items SET current_revision=? WHERE route=? AND item_id=?", (rev, route, item_id))
            return rev

    def current_revision(self, route: str, item_id: str) -> Revision | None:
        row = self._one(
            "SELECT r.*, i.base_id FROM items i JOIN revisions r ON r.revision_id = i.current_revision "
            "WHERE i.route=? AND i.item_id=?",
            (route, item_id),
        )
        return None if row is None else _revision(row)

    def revision(self, route: str, revision_id: str) -> Revision | None:
        row = self._one(
            "SELECT r.*, i.base_id FROM revisions r JOIN items i ON i.route = r.route AND i.item_id = r.item_id "
            "WHERE r.route=? AND r.revision_id=?",
            (route, revision_id),
        )
        return None if row is None else _revision(row)

    def base_ids(self, route: str) -> list[str]:
        with self._lock:
            return [r["base_id"] for r in self._db.execute("SELECT base_id FROM bases WHERE route=? ORDER BY base_id", (route,))]

    def search(self, route: str, query: str, bases: Sequence[str] | None, limit: int) -> list[Revision]:
        """BM25-ranked current revisions matching any word of ``query``."""
        words = _WORD.findall(query)
        if not words or limit <= 0 or (bases is not None and not bases):
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:32])
        index = _index_name(route)
        sql = f"SELECT item_id FROM {index} WHERE {index} MATCH ?"
        args: list[object] = [match]
        if bases is not None:
            sql += f" AND base_id IN ({','.join('?' * len(bases))})"
            args.extend(bases)
        sql += f" ORDER BY bm25({index}, 2.0, 1.0), item_id LIMIT ?"
        args.append(limit)
        with self._lock:
            try:
                ids = [r["item_id"] for r in self._db.execute(sql, args)]
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []  # a workspace that never had a document
                raise
        found = (self.current_revision(route, i) for i in ids)
        return [r for r in found if r is not None]

    def first_items(self, route: str, bases: Sequence[str] | None, limit: int) -> list[Revision]:
        with self._lock:
            ids = [r["item_id"] for r in self._db.execute("SELECT item_id, base_id FROM items WHERE route=? ORDER BY item_id", (route,))
                   if bases is None or r["base_id"] in bases]
        found = (self.current_revision(route, i) for i in ids[:limit])
        return [r for r in found if r is not None]

    # --------------------------------------------------------------- scopes
    def scope(self, route: str, account: str) -> Scope:
        row = self._one("SELECT bases, version FROM scopes WHERE route=? AND account=?", (route, account))
        if row is None:
            return Scope(None, 0)
        return Scope(None if row["bases"] is None else tuple(json.loads(row["bases"])), row["version"])

    def set_scope(self, route: str, account: str, bases: list[str]) -> Scope:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO scopes VALUES(?, ?, ?, 1) ON CONFLICT(route, account) "
                "DO UPDATE SET bases=excluded.bases, version=version + 1",
                (route, account, json.dumps(sorted(bases))),
            )
        return self.scope(route, account)

    # ----------------------------------------------------------- identities
    def mint_identity(self, account: str, route: str, hub: str, session_id: str | None) -> Identity:
        ident = Identity(self.new_id("bha_", 24), account, hub, session_id or self.new_uuid(), route)
        with self.transaction() as db:
            db.execute("INSERT INTO identities VALUES(?, ?, ?, ?, ?)", (ident.token, ident.account, ident.hub, ident.session_id, ident.route))
        return ident

    def identity(self, token: str) -> Identity | None:
        return _identity(self._one("SELECT * FROM identities WHERE token=?", (token,)))

    def identities(self, route: str) -> list[Identity]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM identities WHERE route=? ORDER BY rowid", (route,)).fetchall()
        return [i for i in map(_identity, rows) if i is not None]

    def first_identity(self, route: str) -> Identity | None:
        return _identity(self._one("SELECT * FROM identities WHERE route=? ORDER BY rowid LIMIT 1", (route,)))

    # ---------------------------------------------------------- runs, turns
    def run(self, run_id: str) -> Run | None:
        row = self._one("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return None if row is None else Run(row["run_id"], row["route"], row["session_id"], row["account"], row["hub"])

    def turn(self, turn_key: str) -> tuple[str, str] | None:
        row = self._one("SELECT fingerprint, response FROM turns WHERE turn_key=?", (turn_key,))
        return None if row is None else (row["fingerprint"], row["response"])

    def commit_turn(self, turn_key: str, fingerprint: str, run: Run, response: str, now: float) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO runs VALUES(?, ?, ?, ?, ?, ?)", (run.run_id, run.route, run.session_id, run.account, run.hub, now))
            db.execute("INSERT OR REPLACE INTO turns VALUES(?, ?, ?, ?)", (turn_key, fingerprint, run.run_id, response))


def _identity(row: sqlite3.Row | None) -> Identity | None:
    return None if row is None else Identity(row["token"], row["account"], row["hub"], row["session_id"], row["route"])


def _revision(row: sqlite3.Row) -> Revision:
    return Revision(row["revision_id"], row["item_id"], row["base_id"], row["title"], row["summary"], row["content"])
