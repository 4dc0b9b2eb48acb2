"""What observe remembers between exchanges, for the rules that judge sequences.

Each map is bounded (least recently used entries go first), and holds digests and numbers rather
than the values the wire carried: a reference is known by its digest, a hint's strings by theirs,
a page's text only as a short excerpt for the leak check (and small whole documents for the
whole-document checks)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from conformance.observe.credentials import Identity
from conformance.server.leaks import DocumentText

K = TypeVar("K")
V = TypeVar("V")

ENTRIES = 50_000
"""Entries each map keeps at most: references, cursors, runs, turns (a few hundred bytes each)."""
EXCERPT = 256
EXCERPTS = 256
WHOLES = 32
WHOLE_MAX = 32 * 1024


class Bounded(Generic[K, V]):
    """A dict that forgets its least recently used entries past ``size``."""

    def __init__(self, size: int = ENTRIES) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the credential's digest, what it stands for, and the route it addressed."""

    credential: str | None
    identity: Identity | None
    route: str

    @property
    def key(self) -> str:
        """The idempotency key's Agent Session part: the configured session, else the credential."""
        if self.identity is not None and self.identity.session:
            return f"session:{self.identity.session}"
        return f"credential:{self.credential}"


@dataclass(frozen=True)
class Run:
    run_id: str
    caller: Caller
    started: float  # when its turn was answered


@dataclass(frozen=True)
class Issued:
    """A reference a search (or an on_demand turn) issued: to whom, in which run, when."""

    caller: Caller
    run_id: str
    sent: float
    answered: float
    strings: frozenset[str] = frozenset()  # digests of its hint's strings (SRCH-006 against a whole read)
    origin: str = "search"  # what issued it: a search, or an on_demand turn's hints


@dataclass(frozen=True)
class ChainAt:
    """Where a chain stands after a page: what its next cursor continues."""

    chain: int
    ref: str  # the reference's digest
    from_start: bool  # observe saw the chain's first page
    consumed: int  # content bytes so far
    chars: int  # content characters so far
    pages: int
    revision: str
    total: int | None
    split_edge: bool  # a page so far began or ended with U+FFFD
    largest: int = 0  # the largest page so far, JSON bytes


@dataclass(frozen=True)
class Turn:
    payload: str  # digest of the request body's canonical JSON
    delivery: object
    run_id: str | None
    number: int


@dataclass(frozen=True)
class Capabilities:
    status: int
    body: bytes
    enabled: bool | None
    supported: bool
    at: float


@dataclass
class Traffic:
    runs: Bounded[str, Run] = field(default_factory=Bounded)
    latest_run: Bounded[tuple[str | None, str], str] = field(default_factory=Bounded)
    refs: Bounded[str, Issued] = field(default_factory=Bounded)
    cursors: Bounded[str, ChainAt] = field(default_factory=Bounded)
    revisions: Bounded[str, str] = field(default_factory=Bounded)  # a reference's revision, from its first page
    turns: Bounded[tuple[str, str, str], Turn] = field(default_factory=Bounded)
    capabilities: Bounded[str, Capabilities] = field(default_factory=Bounded)  # the latest answer per route
    asked: Bounded[tuple[str | None, str], Capabilities] = field(default_factory=Bounded)  # per credential and route
    working: Bounded[tuple[str, str], int] = field(default_factory=Bounded)  # (route, op) answered 200: exchange no.
    missing: Bounded[tuple[str, str], int] = field(default_factory=Bounded)  # (route, op) answered 404/405/501
    availability: Bounded[tuple[str, str], tuple[str, bool, float]] = field(default_factory=Bounded)
    reference_errors: Bounded[tuple[str | None, str], str] = field(default_factory=Bounded)  # caller -> ref digest
    mcp_refs: Bounded[str, float] = field(default_factory=Bounded)  # a ref an MCP search issued -> answered at
    excerpts: deque[str] = field(default_factory=lambda: deque(maxlen=EXCERPTS))
    wholes: deque[str] = field(default_factory=lambda: deque(maxlen=WHOLES))
    chains: int = 0
    _text: DocumentText | None = None
    _wholes: DocumentText | None = None

    def page_text(self, content: str, whole: bool) -> None:
        """Remember a little of what a page carried: an excerpt for the leak checks, and a small
        document whole when this page was all of it."""
        if len(content) >= 24:
            self.excerpts.append(content[:EXCERPT])
            self._text = None
        if whole and 24 <= len(content) <= WHOLE_MAX:
            self.wholes.append(content)
            self._wholes = None

    def document_text(self) -> DocumentText:
        """Windows of the excerpts seen: what an error or a hint must not carry."""
        if self._text is None:
            self._text = DocumentText(list(self.excerpts))
        return self._text

    def whole_documents(self) -> DocumentText:
        if self._wholes is None:
            self._wholes = DocumentText(list(self.wholes))
        return self._wholes

    def next_chain(self) -> int:
        self.chains += 1
        return self.chains


def strings_of(hint: object) -> Iterable[str]:
    """The strings a hint carries (its members' values), for comparing with a whole read."""
    if isinstance(hint, dict):
        for key, value in hint.items():
            if key != "ref" and isinstance(value, str) and len(value) >= 24:
                yield value
