"""Ranking for the ``search_knowledge`` tool (seed 003): BM25, an offline embedding, hybrid
mixing and reciprocal rank fusion, as plain functions over documents (no store, no I/O), so
the project's tests can check the arithmetic by hand.

Documented choices (schemas/CHOICES.md, "search_knowledge"):

- Tokens: casefolded ``\\w+`` runs. A document is its title and its content.
- BM25 (Lucene defaults k1 = 1.2, b = 0.75, idf = ln(1 + (N - n + 0.5) / (n + 0.5))), with the
  statistics (N, n, average length) of the workspace's searchable documents, whoever asks.
- Semantic: cosine similarity of embeddings (``Embedder``); the default hashes casefolded
  character 3-grams of each word (with boundary marks) into 256 buckets: deterministic, offline.
  ``wordllama`` (optional extra) is a real model whose weights ship in its wheel: also offline.
- Hybrid: each score is divided by the largest of its kind among the candidates (max
  normalisation: the best is 1, a zero stays 0), then ``alpha * lexical + (1 - alpha) *
  semantic`` with alpha clamped to [0, 1]. Candidates: documents with a lexical or a semantic
  score above zero.
- RRF: ``sum over the lexical and semantic lists of 1 / (60 + rank)``, ranks from 1, a list
  holding the documents with a score above zero in that list's order.
- Ties: higher score first, then (RRF only) the better single rank, then the item ID.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

K1, B = 1.2, 0.75
RRF_K = 60
DIMENSIONS = 256
_WORD = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


@dataclass(frozen=True)
class Doc:
    """One searchable document: an item's published current revision."""

    item_id: str
    text: str


@dataclass
class Scored:
    item_id: str
    lexical: float = 0.0
    semantic: float = 0.0
    final: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)


class Embedder(Protocol):
    """Text to a fixed-length vector; semantic similarity is the cosine of two vectors."""

    def embed(self, text: str) -> list[float]: ...


class HashedNgrams:
    """The default offline embedding: casefolded character 3-grams of ``#word#`` hashed (BLAKE2b)
    into ``DIMENSIONS`` buckets. No model, no download, the same vector on every machine."""

    def embed(self, text: str) -> list[float]:
        vector = [0.0] * DIMENSIONS
        for word in tokens(text):
            marked = f"#{word}#"
            for i in range(max(1, len(marked) - 2)):
                digest = hashlib.blake2b(marked[i : i + 3].encode("utf-8"), digest_size=4).digest()
                vector[int.from_bytes(digest, "big") % DIMENSIONS] += 1.0
        return vector


class WordLlamaEmbedding:
    """A real sentence-embedding model for machines without network: WordLlama's ``l2_supercat``
    (static token embeddings distilled from a large language model, average-pooled, 256
    dimensions), whose weights and tokenizer ship inside the ``wordllama`` wheel on PyPI. Loaded
    with downloads disabled, so it never reaches for a model hub. Optional: the ``embeddings``
    extra (``pip install 'knowledge-conformance[embeddings]'``), chosen with ``--embedder wordllama``."""

    CONFIG, DIMENSIONS = "l2_supercat", 256

    def __init__(self) -> None:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            wordllama = importlib.import_module("wordllama")
        except ImportError as exc:
            raise ValueError(
                "the wordllama embedder needs the optional extra: pip install 'knowledge-conformance[embeddings]'"
            ) from exc
        finally:  # wordllama 0.4 calls logging.basicConfig(level=INFO) on import: the host's logging stays the host's
            for handler in [h for h in root.handlers if h not in handlers]:
                root.removeHandler(handler)
            root.setLevel(level)
        # The wheel keeps its tokenizer under tokenizers/, where wordllama 0.4 looks only as a cache
        # directory: the package's own folder is given as the cache, so nothing is downloaded.
        shipped = Path(str(wordllama.__file__)).parent
        self._model = wordllama.WordLlama.load(
            config=self.CONFIG, dim=self.DIMENSIONS, cache_dir=shipped, disable_download=True
        )

    def embed(self, text: str) -> list[float]:
        return [float(x) for x in self._model.embed(text)[0]]


EMBEDDERS: dict[str, type[Embedder]] = {"hashed": HashedNgrams, "wordllama": WordLlamaEmbedding}


def embedder_for(name: str) -> Embedder:
    """The embedding chosen at start (``knowledge-sim serve --embedder``); a ValueError names the known
    ones, or says which extra an optional one needs."""
    if name not in EMBEDDERS:
        raise ValueError(f"unknown embedder {name!r}; known: {', '.join(sorted(EMBEDDERS))}")
    return EMBEDDERS[name]()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 0.0 if norm == 0 else sum(x * y for x, y in zip(a, b, strict=True)) / norm


def bm25(query: str, docs: Sequence[Doc]) -> dict[str, float]:
    """BM25 of every document for ``query``, statistics from ``docs`` (the whole workspace)."""
    bags = {d.item_id: Counter(tokens(d.text)) for d in docs}
    lengths = {i: sum(bag.values()) for i, bag in bags.items()}
    n_docs = len(docs)
    average = (sum(lengths.values()) / n_docs) if n_docs else 0.0
    scores = dict.fromkeys(bags, 0.0)
    for term in set(tokens(query)):
        having = sum(1 for bag in bags.values() if term in bag)
        if not having:
            continue
        idf = math.log(1 + (n_docs - having + 0.5) / (having + 0.5))
        for item_id, bag in bags.items():
            tf = bag.get(term, 0)
            if tf:
                norm = 1 - B + B * (lengths[item_id] / average if average else 0.0)
                scores[item_id] += idf * tf * (K1 + 1) / (tf + K1 * norm)
    return scores


def semantic(query: str, docs: Sequence[Doc], embedder: Embedder) -> dict[str, float]:
    q = embedder.embed(query)
    return {d.item_id: max(0.0, cosine(q, embedder.embed(d.text))) for d in docs}


def clamp_alpha(alpha: float) -> float:
    return min(1.0, max(0.0, alpha))


def _by_score(found: list[Scored]) -> list[Scored]:
    return sorted(found, key=lambda s: (-s.final, s.item_id))


def rank(
    mode: str, query: str, docs: Sequence[Doc], candidates: set[str], embedder: Embedder, alpha: float = 0.5
) -> list[Scored]:
    """``candidates`` (the caller's authorized, narrowed items) ranked in ``mode``; the statistics
    come from all of ``docs``. ``alpha`` is used as given: clamping is the caller's business."""
    lexical = bm25(query, docs)
    sem = semantic(query, [d for d in docs if d.item_id in candidates], embedder)
    rows = {i: Scored(i, lexical.get(i, 0.0), sem.get(i, 0.0)) for i in sorted(candidates)}
    if mode == "lexical":
        return _by_score([_final(s, s.lexical) for s in rows.values() if s.lexical > 0])
    if mode == "semantic":
        return _by_score([_final(s, s.semantic) for s in rows.values() if s.semantic > 0])
    if mode == "rrf":
        return fuse(rows)
    top_lex = max((s.lexical for s in rows.values()), default=0.0) or 1.0
    top_sem = max((s.semantic for s in rows.values()), default=0.0) or 1.0
    mixed = [
        _final(s, alpha * s.lexical / top_lex + (1 - alpha) * s.semantic / top_sem)
        for s in rows.values()
        if s.lexical > 0 or s.semantic > 0
    ]
    return _by_score(mixed)


def _final(s: Scored, value: float) -> Scored:
    s.final = value
    return s


def fuse(rows: dict[str, Scored], k: int = RRF_K) -> list[Scored]:
    """Reciprocal rank fusion of the lexical and semantic orders (documents scoring above zero)."""
    for kind in ("lexical", "semantic"):
        listed = sorted(
            (s for s in rows.values() if getattr(s, kind) > 0), key=lambda s: (-getattr(s, kind), s.item_id)
        )
        for position, s in enumerate(listed, start=1):
            s.ranks[kind] = position
    fused = [s for s in rows.values() if s.ranks]
    for s in fused:
        s.final = sum(1.0 / (k + r) for r in s.ranks.values())
    return sorted(fused, key=lambda s: (-s.final, min(s.ranks.values()), s.item_id))
