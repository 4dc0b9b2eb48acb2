"""Injected time: the simulator never reads the wall clock directly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Clock:
    """Seconds since the epoch, settable and advanceable through control.

    ``frozen`` clocks move only when told to (replayable runs); otherwise the
    clock follows ``source`` plus an offset, so a fake Core behaves in real time
    until a test moves it.
    """

    def __init__(self, start: float | None = None, *, frozen: bool = False, source: Callable[[], float] = time.time) -> None:
        self._source = source
        self._frozen = frozen
        self._lock = threading.Lock()
        base = source() if start is None else start
        self._offset = base - (0.0 if frozen else source())

    def now(self) -> float:
        with self._lock:
            return self._offset if self._frozen else self._source() + self._offset

    def set(self, when: float) -> float:
        with self._lock:
            self._offset = when if self._frozen else when - self._source()
        return self.now()

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._offset += seconds
        return self.now()
