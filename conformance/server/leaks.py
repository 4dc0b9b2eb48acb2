"""Does a response carry document text? Checked against everything the run seeded.

Comparing an error with the first characters of one document misses a Core that
leaks the middle of another. Every document and every revision the run wrote is
cut into overlapping windows of ``WINDOW`` characters; a string in a response that
contains any of them carries document text. Titles are not secret (hints show them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from conformance.common import contract as C

WINDOW = 24  # long enough that prose of an error message never matches by chance


class DocumentText:
    """Windows of every text the run knows to be document content."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._windows: set[str] = set()
        self._pending: list[str] = []  # cut and merged into _windows when first asked: many worlds never are
        self._lock = threading.Lock()  # a test's fanned-out requests may ask from several threads
        self._texts: list[str] = []  # whole, to tell "some document text" from "a full document"
        self._seen: set[int] = set()
        self.add(texts)

    def add(self, texts: Iterable[str]) -> None:
        for text in texts:
            if id(text) in self._seen or len(text) < WINDOW:
                continue
            self._seen.add(id(text))
            self._texts.append(text)
            with self._lock:
                self._pending.append(text)

    def _merged(self) -> set[str]:
        with self._lock:
            while self._pending:
                self._windows |= _windows(self._pending.pop())
        return self._windows

    def __len__(self) -> int:
        return len(self._merged())

    def leaked(self, body: Any) -> str | None:
        """The first window of document text found in any string of ``body``, or None."""
        windows = self._merged()
        for string in C.strings_in(body):
            for i in range(0, len(string) - WINDOW + 1):
                window = string[i : i + WINDOW]
                if window in windows:
                    return window
        return None

    def whole(self, body: Any) -> str | None:
        """The first known text found whole (stripped) in any string of ``body``, or None: a
        hint may quote a document (its summary often does), never carry all of it (SRCH-006)."""
        strings = C.strings_in(body)
        for text in self._texts:
            core = text.strip()
            if len(core) >= WINDOW and any(core in string for string in strings):
                return core
        return None


@lru_cache(maxsize=64)  # a run's corpus and revisions; a large corpus's windows take some 60 MB
def _windows(text: str) -> frozenset[str]:
    """The windows of one text, cut once a process: every world of a run seeds the same corpus,
    and a set takes a frozenset's already hashed strings far faster than new slices."""
    return frozenset(text[i : i + WINDOW] for i in range(0, len(text) - WINDOW + 1))
