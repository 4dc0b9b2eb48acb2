"""The knowledge store: workspaces, bases, items, immutable revisions, scopes,
identities, runs and turns, in SQLite (in memory by default, a file when given).

Ranked lexical search is BM25 over each item's current published revision, answered by a
tantivy index per workspace (``simulator.index``: ranking statistics never mix tenants, and a
search's cost grows with its top-k, not with the rows that match); older revisions stay
addressable by ID, so the ``search_knowledge`` tool of seed 003 can be served from the same
tables. ``search_rows`` numbers each workspace's items in item ID order (ties break by that
number), ``search_generations`` counts the changes of its searchable text: each search reads its
generation in its snapshot and asks the index of exactly that generation.

Earlier layouts kept the index in SQLite FTS5; it scored every matching row, so a broad query
cost time linear in the corpus whatever the LIMIT. Measured on the synthetic corpus of
benchmarks/simulator_throughput.py (documents of about 2 KB; "broad" is a word in 98% of them,
"x32" the 32 commonest words), top 3, CPU milliseconds of one query (best of 3):

=============================================  ==========  ============  ==========  ============
                                               10k broad   10k x32       100k broad  100k x32
=============================================  ==========  ============  ==========  ============
FTS5, text in the index, ``ORDER BY bm25()``   26          185           270         1,753
FTS5 contentless + rows table (the last one)   7.8         157           78          1,506
counting the FTS5 matches only (a floor)       0.4         13            4.1         123
tantivy 0.27 (block-max WAND; wall clock)      --          --            1           20
=============================================  ==========  ============  ==========  ============

A store opened from an FTS5 layout drops those tables and builds its tantivy indexes.

Two ways to share the database between requests:

- one connection behind a lock (the default, and what the in-process simulator the suite drives
  uses): every call runs on the caller's thread in order, so a run is reproducible;
- ``concurrent=True`` (``knowledge-sim serve``): the file in WAL mode, one writer connection behind
  the lock and a read connection per thread, so searches and reads run side by side in a thread
  pool and never wait for each other or for a writer. ``snapshot()`` answers every read a request
  makes from one read transaction: one consistent state of the store, whatever is published
  meanwhile. An in-memory store is then a private temporary file, removed when the store closes.

Inside a snapshot, the lookups every request makes (identity, workspace, scope, run, current
revision, a workspace's generation) and whole search rankings are answered from memory (``_Memo``):
a search made some fifteen SQLite queries, a read eight, and they were a sixth of the served
simulator's CPU time. The memory is of one version of the store, a counter every write
transaction counts up (whichever process commits it), read once per snapshot: a newer version
empties it, an older snapshot neither reads nor fills it, so it never answers from another state
than the snapshot's own. Outside a snapshot every lookup goes to SQLite.

A request's work runs on the event loop when it is cheap (``snapshot(inline=True)``): a search whose ranking is
neither remembered nor short (its words' postings are longer than ``inline_postings``) raises
``WouldBlock`` before it starts ranking, and the caller runs the work again on a store thread, so a
long search never holds up the other requests, and a short one costs no hand-off between threads.
"""

from __future__ import annotations

import json
import mmap
import os
import secrets
import shutil
import sqlite3
import struct
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from random import Random
from typing import Any, TypeVar, cast

from simulator.index import Entry, Indexes, terms

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
CREATE TABLE IF NOT EXISTS search_rows(route TEXT NOT NULL, rid INTEGER NOT NULL, item_id TEXT NOT NULL,
  PRIMARY KEY(route, rid), UNIQUE(route, item_id));
CREATE TABLE IF NOT EXISTS search_generations(route TEXT PRIMARY KEY, generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS store_version(id INTEGER PRIMARY KEY CHECK (id = 0), writes INTEGER NOT NULL);
INSERT OR IGNORE INTO store_version VALUES(0, 0);
"""
_COUNT_WRITE = "UPDATE store_version SET writes = writes + 1 WHERE id = 0"
T = TypeVar("T")
_MISSING: Any = object()
INLINE_POSTINGS = 50_000
"""Postings (documents per query word, title and content, summed) up to which a search that is not
remembered is ranked on the event loop: some 0.3 ms of tantivy's time (measured on the benchmark's
corpora: 10,000 postings 0.07 ms, 100,000 postings 0.6 ms, 2.8 million 6.4 ms); longer ones go
to a store thread."""


class WouldBlock(Exception):
    """A search in an ``inline`` snapshot would rank at length: run the work on a store thread instead."""


class Moved(Exception):
    """An optimistic snapshot's first read found a newer store than the one its memory answered
    for: nothing it did can stand, run the work again in a plain snapshot."""


_U64 = struct.Struct("<Q")


class _SharedCounter:
    """The store's version (``store_version.writes``), readable by every process sharing the store
    file without a system call: 8 bytes of a file beside it (``FILE.version``), mapped into memory.
    A writer sets it under SQLite's write lock just before its commit, so a reader that finds it
    equal to the version its memory holds knows no commit came after that version's."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _U64.size:
                os.ftruncate(fd, _U64.size)
            self._map = mmap.mmap(fd, _U64.size)
        finally:
            os.close(fd)

    def get(self) -> int:
        return int(_U64.unpack_from(self._map)[0])

    def set(self, value: int) -> None:
        _U64.pack_into(self._map, 0, value)

    def close(self) -> None:
        self._map.close()


class _Memo:
    """Answers of the store's lookups for one version of the store (see the module docstring).

    ``state`` is (version, tables), replaced whole when a newer version is seen, so a reader holds
    the tables of its own version or none; each table is emptied when it reaches ``LIMIT`` entries
    (a stream of unknown tokens or distinct queries cannot grow it without bound)."""

    LIMIT = 65_536
    SEARCH_LIMIT = 4096  # rankings (each holds up to 3 revisions, their content included)

    def __init__(self) -> None:
        self.state: tuple[int, dict[str, dict[Hashable, Any]]] = (-1, {})
        self._lock = threading.Lock()

    def tables(self, version: int) -> dict[str, dict[Hashable, Any]] | None:
        current, tables = self.state
        if current == version:
            return tables
        if current > version:
            return None  # a snapshot older than the memory: SQLite answers it
        with self._lock:
            current, tables = self.state
            if version > current:
                tables = {}
                self.state = (version, tables)
            return tables if version >= current else None


_DATA_TABLES = (
    "workspaces",
    "bases",
    "items",
    "revisions",
    "scopes",
    "identities",
    "runs",
    "turns",
    "search_rows",
    "search_generations",
)
_INDEX_TABLES = ("search_rows", "search_generations")


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


class _Snapshot:
    """``Store.snapshot()``: a class, not a generator, as every request enters two."""

    __slots__ = ("_inline", "_nested", "_optimistic", "_store")

    def __init__(self, store: Store, optimistic: bool, inline: bool) -> None:
        self._store = store
        self._optimistic = optimistic
        self._inline = inline
        self._nested = False

    def __enter__(self) -> None:
        store = self._store
        local = store._local
        depth = getattr(local, "depth", 0)
        if depth:
            local.depth, self._nested = depth + 1, True
            return
        local.inline = self._inline
        if not store.concurrent:
            store._lock.acquire()
            try:
                local.version = _version(store._db)
            except BaseException:
                store._lock.release()
                raise
            local.tables, local.depth = store._memory.tables(local.version), 1
            return
        if self._optimistic and store._counter is not None:
            version = store._counter.get()
            memory = store._memory.state
            if version == memory[0]:  # no commit since the memory's version: read nothing yet
                local.depth, local.version, local.tables, local.txn = 1, version, memory[1], False
                return
        db = store._reader()
        db.execute("BEGIN")
        try:
            local.version = _version(db)
        except BaseException:
            db.execute("COMMIT")
            raise
        local.tables, local.depth, local.txn = store._memory.tables(local.version), 1, True

    def __exit__(self, *exc: object) -> None:
        store = self._store
        local = store._local
        if self._nested:
            local.depth -= 1
            return
        local.depth, local.version, local.tables, local.inline = 0, None, None, False
        if not store.concurrent:
            store._lock.release()
        elif local.txn:
            local.txn = False
            store._reader().execute("COMMIT")


class Store:
    """Thread-safe access to one SQLite database; every write is one transaction."""

    def __init__(
        self, path: str, rng: Random, *, key_source: Callable[[], bytes] | None = None, concurrent: bool = False
    ) -> None:
        """``rng`` draws IDs and tokens; ``key_source`` makes the signing key the first time the
        store is opened (default: the operating system's secret source). The key is never drawn
        from ``rng``: IDs are public, and a generator's outputs reveal its state. ``concurrent``:
        a read connection per thread beside the writer (see the module docstring)."""
        self.concurrent = concurrent
        self.inline_postings = INLINE_POSTINGS
        self._memory = _Memo()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()
        if concurrent and path == ":memory:":
            folder = tempfile.mkdtemp(prefix="knowledge-sim-")
            weakref.finalize(self, shutil.rmtree, folder, True)
            path = f"{folder}/store.sqlite"
        self._path = path
        self._db = self._connect()
        # after SQLite said the path is good (its own message names a bad one)
        self._counter = _SharedCounter(f"{path}.version") if concurrent else None
        self.indexes = Indexes(None if path == ":memory:" else f"{path}.index")  # after SQLite said the path is good
        self._lock = threading.RLock()
        if concurrent:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: a killed process loses nothing committed
        self._key_source = key_source or (lambda: secrets.token_bytes(32))
        self._db.executescript(_SCHEMA)
        # Reopening a kept store must not replay the ID stream of an earlier start (IDs would collide
        # with stored ones): each start of the same store draws from its own stream, still a function
        # of the seed and of how many times the store was opened, so a replay stays a replay.
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='opened'").fetchone()
            opened = int(row["value"]) + 1 if row is not None else 1
            db.execute("INSERT OR REPLACE INTO meta VALUES('opened', ?)", (str(opened),))
            _drop_fts5_layout(db)
        self._open_indexes()
        self._rng = rng if opened == 1 else Random(f"{rng.getrandbits(64)}:{opened}")

    # ------------------------------------------------------------ plumbing
    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        db.row_factory = sqlite3.Row
        if self.concurrent:
            db.execute("PRAGMA mmap_size=1073741824")  # readers share the OS's pages, not a cache each
            db.execute("PRAGMA busy_timeout=30000")
        return db

    def close(self) -> None:
        with self._lock, self._readers_lock:
            for db in [*self._readers, self._db]:
                db.close()
            self._readers.clear()
            if self._counter is not None:
                self._counter.close()

    def _reader(self) -> sqlite3.Connection:
        """This thread's read connection (concurrent), made on first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            db.execute("PRAGMA query_only=1")
            self._local.db = db
            with self._readers_lock:  # not the writer's lock: a long write never delays a first read
                self._readers.append(db)
        return db

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection a read uses: this thread's own (inside its snapshot, if one is open), or
        the single shared one under the lock."""
        if not self.concurrent:
            with self._lock:
                yield self._db
            return
        db = self._reader()
        local = self._local
        if getattr(local, "depth", 0) and not local.txn:  # an optimistic snapshot's first read
            db.execute("BEGIN")
            local.txn = True
            if _version(db) != local.version:
                raise Moved("the store changed before this snapshot's first read")
        yield db

    def snapshot(self, *, optimistic: bool = False, inline: bool = False) -> _Snapshot:
        """Every read in the block sees one state of the store: a read transaction on this thread's
        connection (concurrent), or the lock held throughout (single connection). Writes made in the
        block commit on their own; the block's reads do not see them (concurrent). Re-entrant. Its
        lookups are answered from memory when it holds that state (``_Memo``). Never held across an
        ``await``: it belongs to the thread, and coroutines share the event loop's.

        ``optimistic`` (concurrent): when the shared counter says the memory is of the newest
        version, the snapshot opens no transaction; a block served from memory reads SQLite not at
        all (a read transaction's locks were some 15% of a served read's CPU time). Its first
        read opens the transaction and raises ``Moved`` if a commit came in between: only a
        caller that can run the block again asks for this. ``inline``: the block runs on the
        event loop, and a search that would rank at length raises ``WouldBlock`` instead."""
        return _Snapshot(self, optimistic, inline)

    def _memo(self, table: str, key: Hashable, load: Callable[[], T], limit: int = _Memo.LIMIT) -> T:
        """``load()``, remembered under ``key`` for this snapshot's version of the store (its tables,
        found once when the snapshot began: a read made seven lookups)."""
        tables: dict[str, dict[Hashable, Any]] | None = getattr(self._local, "tables", None)
        if tables is None:
            return load()
        entries = tables.get(table)
        if entries is None:
            entries = tables.setdefault(table, {})
        found = entries.get(key, _MISSING)
        if found is not _MISSING:
            return cast(T, found)
        value = load()
        if len(entries) >= limit:
            entries.clear()
        entries[key] = value
        return value

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; it counts up the store's version (what the memory of lookups follows)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute(_COUNT_WRITE)
                if self._counter is not None:  # before the commit: a reader never sees it behind the store
                    self._counter.set(_version(self._db))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _one(self, sql: str, args: Sequence[object] = ()) -> sqlite3.Row | None:
        with self._reading() as db:
            row: sqlite3.Row | None = db.execute(sql, args).fetchone()
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
        self.indexes.drop_all()

    # ------------------------------------------------------------ the search index
    def _open_indexes(self) -> None:
        """Each workspace's kept index if it is the store's generation, else one rebuilt (see simulator.index)."""
        with self.transaction() as db:
            routes = [r["route"] for r in db.execute("SELECT DISTINCT route FROM items ORDER BY route")]
            for route in routes:
                if db.execute("SELECT 1 FROM search_rows WHERE route=? LIMIT 1", (route,)).fetchone() is None:
                    _number_rows(db, route)  # a store of an earlier layout
                generation = _generation(db, route)
                if generation is None:
                    generation = _bump_generation(db, route)
                if not self.indexes.open(route, generation):
                    self.indexes.build(route, generation, _entries(db, route))
        self.indexes.forget_others(routes)

    @contextmanager
    def _indexed(self, route: str) -> Iterator[sqlite3.Connection]:
        """A write transaction that changes ``route``'s searchable text: the index commits inside it,
        so its searcher exists before the store's new state does. If the transaction fails, the
        index is rebuilt from what the store kept."""
        try:
            with self.transaction() as db:
                yield db
        except BaseException:
            with self.transaction() as db:
                generation = _generation(db, route)
                if generation is None:
                    self.indexes.drop(route)
                else:
                    self.indexes.build(route, generation, _entries(db, route))
            raise

    # ---------------------------------------------------------- workspaces
    def create_workspace(self, route: str, mode: str = "normal") -> bool:
        with self.transaction() as db:
            cur = db.execute("INSERT OR IGNORE INTO workspaces(route, mode) VALUES(?, ?)", (route, mode))
            return cur.rowcount == 1

    def delete_workspace(self, route: str) -> bool:
        """Remove a workspace and everything in it (corpus, scopes, identities, runs, turns)."""
        with self.transaction() as db:
            db.execute("DELETE FROM turns WHERE run_id IN (SELECT run_id FROM runs WHERE route=?)", (route,))
            for table in ("bases", "items", "revisions", "scopes", "identities", "runs", *_INDEX_TABLES):
                db.execute(f"DELETE FROM {table} WHERE route=?", (route,))
            deleted = db.execute("DELETE FROM workspaces WHERE route=?", (route,)).rowcount == 1
        self.indexes.drop(route)
        return deleted

    def workspace(self, route: str) -> tuple[str, int] | None:
        def load() -> tuple[str, int] | None:
            row = self._one("SELECT mode, legacy_status FROM workspaces WHERE route=?", (route,))
            return None if row is None else (row["mode"], row["legacy_status"])

        return self._memo("workspace", route, load)

    def set_mode(self, route: str, mode: str, legacy_status: int | None) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE workspaces SET mode=?, legacy_status=COALESCE(?, legacy_status) WHERE route=?",
                (mode, legacy_status, route),
            )

    def routes(self) -> list[str]:
        with self._reading() as db:
            return [r["route"] for r in db.execute("SELECT route FROM workspaces ORDER BY route")]

    # --------------------------------------------------------------- corpus
    def replace_corpus(self, route: str, bases: list[tuple[str, str, list[ItemInput]]], now: float) -> dict[str, str]:
        """Swap a workspace's whole corpus atomically; returns item -> current revision."""
        published: dict[str, str] = {}
        with self._indexed(route) as db:
            for table in ("bases", "items", "revisions", "search_rows"):
                db.execute(f"DELETE FROM {table} WHERE route=?", (route,))
            db.execute("UPDATE scopes SET version = version + 1 WHERE route=?", (route,))
            for base_id, name, items in bases:
                db.execute("INSERT INTO bases VALUES(?, ?, ?)", (route, base_id, name))
                for item in items:
                    if item.item_id in published:
                        raise ValueError(f"item id {item.item_id!r} appears twice")
                    rev = self.new_id("rev_")
                    db.execute("INSERT INTO items VALUES(?, ?, ?, ?)", (route, item.item_id, base_id, rev))
                    self._insert_revision(db, route, item, rev, now)
                    published[item.item_id] = rev
            _number_rows(db, route)
            self.indexes.build(route, _bump_generation(db, route), _entries(db, route))
        return published

    def _insert_revision(self, db: sqlite3.Connection, route: str, item: ItemInput, rev: str, now: float) -> None:
        db.execute(
            "INSERT INTO revisions VALUES(?, ?, ?, ?, ?, ?, ?)",
            (rev, route, item.item_id, item.title, item.summary, item.content, now),
        )

    def publish_revision(
        self, route: str, item_id: str, content: str, title: str | None, summary: str | None, now: float
    ) -> str | None:
        with self._indexed(route) as db:
            row = db.execute(
                "SELECT i.base_id, r.title, r.summary, r.content FROM items i JOIN revisions r ON r.revision_id = i.current_revision "
                "WHERE i.route=? AND i.item_id=?",
                (route, item_id),
            ).fetchone()
            if row is None:
                return None
            rev = self.new_id("rev_")
            found = db.execute("SELECT rid FROM search_rows WHERE route=? AND item_id=?", (route, item_id)).fetchone()
            if found is None:
                raise LookupError(f"item {item_id!r} of route {route!r} is not indexed")
            item = ItemInput(
                item_id,
                title if title is not None else row["title"],
                content,
                summary if summary is not None else (row["summary"] if title is None else None),
            )
            self._insert_revision(db, route, item, rev, now)
            db.execute("UPDATE items SET current_revision=? WHERE route=? AND item_id=?", (rev, route, item_id))
            rid: int = found["rid"]  # an item keeps its row number: only the current revision is searchable
            entry = Entry(rid, row["base_id"], item.title, item.content)
            self.indexes.update(route, _bump_generation(db, route), [rid], [entry])
            return rev

    def current_revision(self, route: str, item_id: str) -> Revision | None:
        def load() -> Revision | None:
            row = self._one(
                "SELECT r.*, i.base_id FROM items i JOIN revisions r ON r.revision_id = i.current_revision "
                "WHERE i.route=? AND i.item_id=?",
                (route, item_id),
            )
            return None if row is None else _revision(row)

        return self._memo("current_revision", (route, item_id), load)

    def revision(self, route: str, revision_id: str) -> Revision | None:
        row = self._one(
            "SELECT r.*, i.base_id FROM revisions r JOIN items i ON i.route = r.route AND i.item_id = r.item_id "
            "WHERE r.route=? AND r.revision_id=?",
            (route, revision_id),
        )
        return None if row is None else _revision(row)

    def base_ids(self, route: str) -> list[str]:
        def load() -> tuple[str, ...]:
            with self._reading() as db:
                rows = db.execute("SELECT base_id FROM bases WHERE route=? ORDER BY base_id", (route,))
                return tuple(r["base_id"] for r in rows)

        return list(self._memo("base_ids", route, load))

    def search(
        self, route: str, query: str, bases: Sequence[str] | None, limit: int, *, viewer: str | None = None
    ) -> list[Revision]:
        """BM25-ranked current revisions matching any word of ``query`` (its first 32), from the
        workspace's index at the generation this snapshot sees (simulator.index).

        A ranking is remembered for this version of the store (any write forgets it), under
        everything its answer depends on: the workspace and its generation, the query's index
        terms (two queries of the same terms rank alike), the bases searched (the asker's scope),
        the limit, and ``viewer`` (the asking account: no ranking is ever handed to another
        account, even one of the same scope). References are never remembered: the Core signs them
        for each request, with its own run, identity and time."""
        if limit <= 0 or (bases is not None and not bases):
            return []
        words = tuple(terms(query))
        with self.snapshot():
            generation = self._memo("generation", route, lambda: self._generation(route))
            if generation is None:
                return []  # a workspace that never had a document
            key = (route, generation, words, None if bases is None else tuple(bases), limit, viewer)
            ranked = self._memo(
                "search",
                key,
                lambda: tuple(self._rank(route, generation, query, words, bases, limit)),
                _Memo.SEARCH_LIMIT,
            )
        return list(ranked)

    def _generation(self, route: str) -> int | None:
        with self._reading() as db:
            return _generation(db, route)

    def _rank(
        self, route: str, generation: int, query: str, words: Sequence[str], bases: Sequence[str] | None, limit: int
    ) -> list[Revision]:
        if getattr(self._local, "inline", False) and (
            self.indexes.postings(route, generation, words) > self.inline_postings
        ):
            raise WouldBlock(f"a search of {len(words)} words in {route!r}")
        rids = self.indexes.search(route, generation, query, bases, limit)
        if not rids:
            return []
        marks = ",".join("?" * len(rids))
        with self._reading() as db:  # one query for the hits' current revisions, not one a hit
            rows = db.execute(
                "SELECT s.rid, r.*, i.base_id FROM search_rows s "
                "JOIN items i ON i.route = s.route AND i.item_id = s.item_id "
                f"JOIN revisions r ON r.revision_id = i.current_revision WHERE s.route=? AND s.rid IN ({marks})",
                (route, *rids),
            )
            found = {row["rid"]: _revision(row) for row in rows}
        return [found[rid] for rid in rids if rid in found]

    def first_items(self, route: str, bases: Sequence[str] | None, limit: int) -> list[Revision]:
        with self.snapshot(), self._reading() as db:
            ids = [
                r["item_id"]
                for r in db.execute("SELECT item_id, base_id FROM items WHERE route=? ORDER BY item_id", (route,))
                if bases is None or r["base_id"] in bases
            ]
            found = [self.current_revision(route, i) for i in ids[:limit]]
        return [r for r in found if r is not None]

    # --------------------------------------------------------------- scopes
    def scope(self, route: str, account: str) -> Scope:
        def load() -> Scope:
            row = self._one("SELECT bases, version FROM scopes WHERE route=? AND account=?", (route, account))
            if row is None:
                return Scope(None, 0)
            return Scope(None if row["bases"] is None else tuple(json.loads(row["bases"])), row["version"])

        return self._memo("scope", (route, account), load)

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
            db.execute(
                "INSERT INTO identities VALUES(?, ?, ?, ?, ?)",
                (ident.token, ident.account, ident.hub, ident.session_id, ident.route),
            )
        return ident

    def identity(self, token: str) -> Identity | None:
        return self._memo(
            "identity", token, lambda: _identity(self._one("SELECT * FROM identities WHERE token=?", (token,)))
        )

    def identities(self, route: str) -> list[Identity]:
        with self._reading() as db:
            rows = db.execute("SELECT * FROM identities WHERE route=? ORDER BY rowid", (route,)).fetchall()
        return [i for i in map(_identity, rows) if i is not None]

    def first_identity(self, route: str) -> Identity | None:
        return _identity(self._one("SELECT * FROM identities WHERE route=? ORDER BY rowid LIMIT 1", (route,)))

    # ---------------------------------------------------------- runs, turns
    def run(self, run_id: str) -> Run | None:
        def load() -> Run | None:
            row = self._one("SELECT * FROM runs WHERE run_id=?", (run_id,))
            return (
                None if row is None else Run(row["run_id"], row["route"], row["session_id"], row["account"], row["hub"])
            )

        return self._memo("run", run_id, load)

    def turn(self, turn_key: str) -> tuple[str, str] | None:
        row = self._one("SELECT fingerprint, response FROM turns WHERE turn_key=?", (turn_key,))
        return None if row is None else (row["fingerprint"], row["response"])

    def commit_turn(self, turn_key: str, fingerprint: str, run: Run, response: str, now: float) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs VALUES(?, ?, ?, ?, ?, ?)",
                (run.run_id, run.route, run.session_id, run.account, run.hub, now),
            )
            db.execute("INSERT OR REPLACE INTO turns VALUES(?, ?, ?, ?)", (turn_key, fingerprint, run.run_id, response))


def _drop_fts5_layout(db: sqlite3.Connection) -> None:
    """A store written by an earlier layout kept its indexes in SQLite (FTS5 tables and a rows table
    per workspace): dropped, and the rows numbered again (simulator.index holds the index now)."""
    names = [
        r["name"]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND (sql LIKE 'CREATE VIRTUAL TABLE%' "
            "OR name LIKE 'fti!_%' ESCAPE '!')"
        )
    ]
    for name in names:
        db.execute(f'DROP TABLE IF EXISTS "{name}"')
    if names:
        for table in _INDEX_TABLES:
            db.execute(f"DELETE FROM {table}")


def _number_rows(db: sqlite3.Connection, route: str) -> None:
    """Number a workspace's items in item ID order (code point order, SQLite's too), so ties broken
    by row number are broken by item ID. An item keeps its number across revisions; items only ever
    arrive with a whole corpus."""
    db.execute("DELETE FROM search_rows WHERE route=?", (route,))
    db.execute(
        "INSERT INTO search_rows(route, rid, item_id) "
        "SELECT route, ROW_NUMBER() OVER (ORDER BY item_id), item_id FROM items WHERE route=?",
        (route,),
    )


def _version(db: sqlite3.Connection) -> int:
    """The store's version as ``db`` sees it: how many write transactions were committed."""
    row = db.execute("SELECT writes FROM store_version WHERE id = 0").fetchone()
    return 0 if row is None else int(row[0])


def _generation(db: sqlite3.Connection, route: str) -> int | None:
    row = db.execute("SELECT generation FROM search_generations WHERE route=?", (route,)).fetchone()
    return None if row is None else int(row["generation"])


def _bump_generation(db: sqlite3.Connection, route: str) -> int:
    """The next generation of a workspace's searchable text, in the caller's transaction."""
    db.execute(
        "INSERT INTO search_generations VALUES(?, 1) ON CONFLICT(route) DO UPDATE SET generation = generation + 1",
        (route,),
    )
    generation = _generation(db, route)
    assert generation is not None
    return generation


def _entries(db: sqlite3.Connection, route: str) -> Iterator[Entry]:
    """What a workspace's index holds: each item's current revision under its row number."""
    for row in db.execute(
        "SELECT s.rid, i.base_id, r.title, r.content FROM search_rows s "
        "JOIN items i ON i.route = s.route AND i.item_id = s.item_id "
        "JOIN revisions r ON r.revision_id = i.current_revision WHERE s.route=? ORDER BY s.rid",
        (route,),
    ):
        yield Entry(row["rid"], row["base_id"], row["title"], row["content"])


def _identity(row: sqlite3.Row | None) -> Identity | None:
    return None if row is None else Identity(row["token"], row["account"], row["hub"], row["session_id"], row["route"])


def _revision(row: sqlite3.Row) -> Revision:
    return Revision(row["revision_id"], row["item_id"], row["base_id"], row["title"], row["summary"], row["content"])
