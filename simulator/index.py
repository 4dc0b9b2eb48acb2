"""The search index: one tantivy index per workspace, beside the SQLite store, so a search costs
in proportion to the top-k it answers, not to the rows that match.

SQLite stays the truth; an index is a derived copy of a workspace's current revisions, numbered by
the store's row numbers (``rid``, item ID order). Each workspace's index has a *generation*: the
store bumps it in the same SQLite transaction that changes the workspace's searchable text, and
the index is committed (and its searcher kept under that generation) before that transaction
commits. A search reads the generation inside its snapshot and asks the searcher of exactly that
generation, so one request still sees one state of the store, whatever is published meanwhile.

Kept on disk beside a store file (``FILE.index/``, one folder per workspace, each with a
``generation`` file written after the index commits and before the store does): at start, a
workspace whose folder names the store's generation is opened as it is; any other (a process
killed between the two commits, an older layout, a missing folder) is rebuilt from the store.
An in-memory store keeps its indexes in memory.

Ranking: BM25 (tantivy's, Lucene's formula: k1 = 1.2, b = 0.75, idf = ln(1 + (N - n + 0.5) /
(n + 0.5))) summed over title (weight 2) and content (weight 1), ties broken by row number, that
is by item ID, whatever the segment layout. Tokens: tantivy's default tokenizer (alphanumeric
runs, lower-cased, at most 40 bytes); a query word of ``\\w`` characters is split the same way.
Until tantivy merges segments, a replaced document still counts in the document frequencies
(as in Lucene): a corpus loaded whole ranks the same on every machine, a corpus with publishes
since may shift ties of near-equal scores.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy

KEPT_SEARCHERS = (
    64  # generations a workspace keeps searchable: a request's snapshot older than that many publishes is rare
)
_TERM_BYTES = 40  # tantivy's RemoveLongFilter: longer tokens are never indexed
_SPLIT = re.compile(r"[^\W_]+", re.UNICODE)  # tantivy's SimpleTokenizer: alphanumeric runs ("_" splits)
TITLE_WEIGHT = 2.0


def terms(query: str, limit: int = 32) -> list[str]:
    """The index terms of a query's first ``limit`` words, in order, without repeats."""
    found: dict[str, None] = {}
    for word in re.findall(r"\w+", query)[:limit]:
        for part in _SPLIT.findall(word):
            term = part.lower()
            if len(term.encode("utf-8")) < _TERM_BYTES:
                found.setdefault(term)
    return list(found)


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("rid", stored=True, indexed=True, fast=True)
    builder.add_text_field("base_id", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("title", index_option="freq")
    builder.add_text_field("content", index_option="freq")
    return builder.build()


@dataclass(frozen=True)
class Entry:
    """One indexed document: an item's current revision."""

    rid: int
    base_id: str
    title: str
    content: str


class _Workspace:
    def __init__(self, index: tantivy.Index, folder: Path | None) -> None:
        self.index, self.folder = index, folder
        self.searchers: OrderedDict[int, tantivy.Searcher] = OrderedDict()
        index.config_reader(reload_policy="manual")

    def keep(self, generation: int) -> None:
        self.index.reload()
        self.searchers[generation] = self.index.searcher()
        while len(self.searchers) > KEPT_SEARCHERS:
            self.searchers.popitem(last=False)


class Indexes:
    """Every workspace's index. ``folder``: where they persist (None: in memory). Writes come
    from the store, under its write lock; searches from any thread."""

    def __init__(self, folder: str | None) -> None:
        self.folder = Path(folder) if folder else None
        self.schema = _schema()
        self._lock = threading.Lock()
        self._spaces: dict[str, _Workspace] = {}
        if self.folder is not None:
            self.folder.mkdir(exist_ok=True)  # beside the store file: its folder must exist already

    def _path(self, route: str) -> Path | None:
        return None if self.folder is None else self.folder / hashlib.sha256(route.encode()).hexdigest()[:24]

    # ------------------------------------------------------------ start-up
    def _find(self, route: str, generation: int) -> _Workspace | None:
        """The kept build of ``route`` whose ``generation`` file names ``generation``, opened."""
        path = self._path(route)
        if path is None or not path.is_dir():
            return None
        for build in sorted(path.iterdir()):
            try:
                if int((build / "generation").read_text()) == generation and tantivy.Index.exists(str(build)):
                    space = _Workspace(tantivy.Index.open(str(build)), build)
                    space.keep(generation)
                    return space
            except (OSError, ValueError):
                continue
        return None

    def open(self, route: str, generation: int) -> bool:
        """Open the kept index of ``route`` if it is the one of ``generation``; False: rebuild it."""
        space = self._find(route, generation)
        if space is None:
            return False
        with self._lock:
            self._spaces[route] = space
        return True

    def forget_others(self, routes: Iterable[str]) -> None:
        """Remove kept indexes of workspaces the store no longer has."""
        if self.folder is None:
            return
        wanted = {p.name for p in map(self._path, routes) if p is not None}
        for child in self.folder.iterdir():
            if child.name not in wanted:
                shutil.rmtree(child, ignore_errors=True)

    # ------------------------------------------------------------ writes
    def build(self, route: str, generation: int, entries: Iterable[Entry]) -> None:
        """A workspace's whole index, in a build folder of its own: searches of earlier generations
        go on meanwhile, and the earlier builds are removed once this one is in place."""
        root = self._path(route)
        path = None if root is None else root / f"b{generation:012d}"
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        # Sorted by row number: inside a segment, tantivy's own tie order (lower document first) is
        # then the row order, so a one-segment index needs no second look at the ties (see search).
        index = tantivy.Index(self.schema, path=None if path is None else str(path), reuse=False, sort_by_field="rid")
        space = _Workspace(index, path)
        writer = space.index.writer(heap_size=200_000_000, num_threads=2 if path is not None else 1)
        for entry in entries:
            writer.add_document(self._document(entry))
        writer.commit()
        writer.wait_merging_threads()
        del writer
        with self._lock:
            earlier = self._spaces.get(route)
        if earlier is not None:
            space.searchers.update(earlier.searchers)  # a snapshot of before the build still searches
        self._committed(route, space, generation)
        if root is not None:
            for old in root.iterdir():
                if old != path:
                    shutil.rmtree(old, ignore_errors=True)  # open searchers keep their (unlinked) files

    def update(self, route: str, generation: int, removed: Sequence[int], added: Sequence[Entry]) -> None:
        """Replace documents of a workspace (by row number) and commit under ``generation``."""
        with self._lock:
            space = self._spaces.get(route)
        if space is None:
            self.build(route, generation, added)
            return
        if space.folder is not None:
            (space.folder / "generation").unlink(missing_ok=True)  # a kill from here on means a rebuild
        writer = space.index.writer(heap_size=15_000_000, num_threads=1)
        for rid in removed:
            writer.delete_documents_by_query(tantivy.Query.term_query(self.schema, "rid", rid))
        for entry in added:
            writer.add_document(self._document(entry))
        writer.commit()
        writer.wait_merging_threads()
        del writer  # releases the index's writer lock (another process on the same store may write next)
        self._committed(route, space, generation)

    def _committed(self, route: str, space: _Workspace, generation: int) -> None:
        if space.folder is not None:
            scratch = space.folder / "generation.new"
            scratch.write_text(str(generation))
            os.replace(scratch, space.folder / "generation")
        space.keep(generation)
        with self._lock:
            self._spaces[route] = space

    def drop(self, route: str) -> None:
        with self._lock:
            self._spaces.pop(route, None)
        path = self._path(route)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def drop_all(self) -> None:
        with self._lock:
            routes = list(self._spaces)
        for route in routes:
            self.drop(route)

    def _document(self, entry: Entry) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_unsigned("rid", entry.rid)
        doc.add_text("base_id", entry.base_id)
        doc.add_text("title", entry.title)
        doc.add_text("content", entry.content)
        return doc

    # ------------------------------------------------------------ search
    def searcher(self, route: str, generation: int) -> tantivy.Searcher | None:
        """The searcher of exactly ``generation``; another process's newer commit is picked up
        from disk (several processes on one store). None: that generation is no longer kept."""
        with self._lock:
            space = self._spaces.get(route)
            found = None if space is None else space.searchers.get(generation)
        if found is not None or space is None or space.folder is None:
            return found
        if not (space.folder / "generation").is_file():  # another process built the workspace anew
            rebuilt = self._find(route, generation)
            if rebuilt is None:
                return None
            with self._lock:
                self._spaces[route] = rebuilt
            return rebuilt.searchers[generation]
        marker = space.folder / "generation"
        try:
            before = int(marker.read_text())
            space.index.reload()
            searcher = space.index.searcher()
            if int(marker.read_text()) != before:
                return None
        except (OSError, ValueError):
            return None
        with self._lock:
            space.searchers[before] = searcher
        return searcher if before == generation else None

    def postings(self, route: str, generation: int, words: Sequence[str]) -> int:
        """Documents holding each of ``words``, in title and in content, summed: what a ranking's
        cost grows with (tantivy's own counts; deleted documents not yet merged away count too).
        A generation no longer kept counts as long."""
        searcher = self.searcher(route, generation)
        if searcher is None:
            return sys.maxsize
        return sum(searcher.doc_freq("title", word) + searcher.doc_freq("content", word) for word in words)

    def search(self, route: str, generation: int, query: str, bases: Sequence[str] | None, limit: int) -> list[int]:
        """Row numbers of the best ``limit`` documents, best first, ties by row number; [] when the
        workspace has no index."""
        words = terms(query)
        if not words or limit <= 0:
            return []
        searcher = self.searcher(route, generation)
        if searcher is None:
            with self._lock:  # not kept: the newest searcher (a snapshot older than KEPT_SEARCHERS publishes)
                space = self._spaces.get(route)
                if space is None or not space.searchers:
                    return []
                searcher = next(reversed(space.searchers.values()))
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for word in words:
            title = tantivy.Query.term_query(self.schema, "title", word, index_option="freq")
            should.append((tantivy.Occur.Should, tantivy.Query.boost_query(title, TITLE_WEIGHT)))
            should.append(
                (tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "content", word, index_option="freq"))
            )
        query_ = tantivy.Query.boolean_query(should)
        if bases is not None:
            scope = tantivy.Query.const_score_query(tantivy.Query.term_set_query(self.schema, "base_id", bases), 0.0)
            query_ = tantivy.Query.boolean_query([(tantivy.Occur.Must, query_), (tantivy.Occur.Must, scope)])
        # Ties at the cut are broken by row number. In one segment (a corpus loaded whole) tantivy's
        # order already is that; across segments (after publishes) ask for more until the last score
        # asked for is below the last one kept.
        if searcher.num_segments == 1:
            hits = searcher.search(query_, limit=limit, count=False).hits
        else:
            want = limit + 8
            while True:
                hits = searcher.search(query_, limit=want, count=False).hits
                if len(hits) < want or hits[limit - 1][0] != hits[-1][0]:
                    break
                want *= 4
        rids = searcher.fast_field_values("rid", [address for _, address in hits])
        ranked = sorted(zip((score for score, _ in hits), rids, strict=True), key=lambda pair: (-pair[0], pair[1]))
        return [int(rid) for _, rid in ranked[:limit] if rid is not None]
