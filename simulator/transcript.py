"""What reached the Core surface, for the control extension's ``GET /transcript``.

Each request is numbered from the last reset, so that a reader can ask only for what it has not
seen yet (``?since=N``, the ``transcript.since`` feature): a client run reads the transcript
before and after each of its checks, and re-reading the whole of it made those reads a quarter of
the run's time by its end (some 400 reads of 600 requests each)."""

from __future__ import annotations

import itertools
import secrets
from collections import deque
from collections.abc import Callable
from typing import Any

KEPT = 10_000
"""Requests kept: the oldest go first."""


class Transcript:
    """The last :data:`KEPT` requests, oldest first; ``recorded`` counts every one since the last
    reset, and ``epoch`` names that reset (a reader that saw another epoch reads from the start)."""

    def __init__(self, epochs: Callable[[], str] = lambda: secrets.token_hex(8)) -> None:
        """``epochs`` names each reset: it must never repeat, across restarts too (the seeded
        simulator's random source would, so it is not that)."""
        self._entries: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self._epochs = epochs
        self.recorded = 0
        self.epoch = epochs()

    def append(self, entry: dict[str, Any]) -> None:
        self._entries.append(entry)
        self.recorded += 1

    def clear(self) -> None:
        self._entries.clear()
        self.recorded = 0
        self.epoch = self._epochs()

    def since(self, first: int = 0) -> list[dict[str, Any]]:
        """The requests numbered ``first`` and later that are still kept."""
        oldest = self.recorded - len(self._entries)
        return list(itertools.islice(self._entries, max(0, first - oldest), None))
