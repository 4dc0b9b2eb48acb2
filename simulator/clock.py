"""Injected time: the simulator never reads the wall clock directly."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

CURRENT_ROUTE: ContextVar[str | None] = ContextVar("current_route", default=None)
"""The workspace a request addresses; a clock moved for some workspaces moves only for them."""
_WORKSPACE_PATH = re.compile(r"/workspaces/([^/]+)")


class Clock:
    """Seconds since the epoch, settable and advanceable through control.

    ``frozen`` clocks move only when told to (replayable runs); otherwise the
    clock follows ``source`` plus an offset, so a fake Core behaves in real time
    until a test moves it. A frozen clock with a ``tick`` moves that many seconds
    each time it is read: still replayable, yet no two instants of a request are
    the same, so code that stamps one response with two readings of the clock shows.
    """

    def __init__(
        self,
        start: float | None = None,
        *,
        frozen: bool = False,
        source: Callable[[], float] = time.time,
        tick: float = 0.0,
    ) -> None:
        if tick < 0:
            raise ValueError("a clock tick cannot be negative")
        self._source = source
        self._frozen = frozen
        self._tick = tick if frozen else 0.0
        self._lock = threading.Lock()
        base = source() if start is None else start
        self._offset = base - (0.0 if frozen else source())
        self._route_offsets: dict[str, float] = {}

    def now(self) -> float:
        if not (self._frozen or self._route_offsets):
            # A running clock no workspace moved on its own, the usual served case: one read of the
            # offset is the reading the lock would give (nothing to tick), without taking the lock
            # at each of a request's readings.
            return self._source() + self._offset
        route = CURRENT_ROUTE.get()
        with self._lock:
            extra = self._route_offsets.get(route, 0.0) if route is not None else 0.0
            now = (self._offset if self._frozen else self._source() + self._offset) + extra
            self._offset += self._tick
            return now

    def set(self, when: float) -> float:
        with self._lock:
            self._offset = when if self._frozen else when - self._source()
            self._route_offsets.clear()
        return self.now()

    def advance(self, seconds: float, routes: list[str] | None = None) -> float:
        """Move time for everyone, or only for the named workspaces: two test runs sharing
        one Core each move their own workspaces' time and never expire the other's references."""
        with self._lock:
            if routes is None:
                self._offset += seconds
            else:
                for route in routes:
                    self._route_offsets[route] = self._route_offsets.get(route, 0.0) + seconds
        return self.now()


def workspace_of(path: str) -> str | None:
    """The workspace route a request path names, if any."""
    found = _WORKSPACE_PATH.search(path)
    return found.group(1) if found else None
