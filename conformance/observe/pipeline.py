"""A judge on a thread of the proxy's own process, fed through a bounded queue: for a proxy
embedded in a program (and the project's tests), where a second process is not wanted. The
command runs its judge in a process of its own (``judge_process``): a thread shares the
interpreter lock with forwarding.

Forwarding only ever calls :meth:`Pipeline.submit`, which cannot block: a full queue, or a judge
that stopped, drops the exchange and counts why (the report says what was dropped); whatever the
judge does, forwarding goes on (fail open)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from conformance.observe.judge import Judge
from conformance.observe.seen import Seen

QUEUE_SIZE = 256
"""Exchanges waiting for the judge at most: with bodies kept up to their caps, some 40 MB at worst."""


class Pipeline:
    def __init__(self, judge: Judge, size: int = QUEUE_SIZE, record: Callable[[Seen], None] | None = None) -> None:
        self.judge = judge
        self.record = record  # after judging, e.g. a HAR recorder (the judge's thread, never forwarding's)
        self._queue: queue.Queue[Seen | None] = queue.Queue(maxsize=size)
        self._thread = threading.Thread(target=self._work, name="knowledge-observe-judge", daemon=True)
        self._alive = False

    def start(self) -> Pipeline:
        self._alive = True
        self._thread.start()
        return self

    def submit(self, seen: Seen) -> None:
        """Queue ``seen`` for judging, or drop it (counted): never blocks, never raises."""
        try:
            if not self._alive:
                self.judge.tally.dropped("the judge had stopped")
                return
            self._queue.put_nowait(seen)
        except queue.Full:
            self.judge.tally.dropped("the judge's queue was full")
        except Exception:  # fail open: whatever goes wrong here, forwarding goes on
            self.judge.tally.dropped("the hand-over to the judge failed")

    def _work(self) -> None:
        try:
            while True:
                seen = self._queue.get()
                if seen is None:
                    return
                self.judge.judge(seen)
                if self.record is not None:
                    try:
                        self.record(seen.decoded())
                    except Exception as exc:  # a recording that fails is reported; judging goes on
                        self.judge.tally.broke(f"recording exchange #{seen.number} failed: {type(exc).__name__}")
        except BaseException as exc:  # the judge itself never raises; this is the last line of defence
            self.judge.tally.broke(f"the judge stopped: {type(exc).__name__}")
        finally:
            self._alive = False

    def close(self, timeout: float = 30.0) -> None:
        """Let the judge finish what is queued (up to ``timeout`` seconds), then stop it."""
        if not self._thread.is_alive():
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        self._alive = False
        while True:  # what the judge did not reach in time is counted, never silently lost
            try:
                if self._queue.get_nowait() is not None:
                    self.judge.tally.dropped("the judge did not reach it before the end")
            except queue.Empty:
                return
