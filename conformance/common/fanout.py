"""Independent requests of one test sent side by side.

Why: a Core far away costs a round trip per request, and a test that reads several documents
one after the other waits for each in turn (a check reading five documents through three page
sizes is some 200 round trips: 20 s at 50 ms each way). Sent a few at a time, it waits for the
longest chain, not the sum. The results, the rules recorded and the first failure are those of
the serial loop: results come back in the items' order, and the failure raised is the first in
that order (later items may also have been sent; their requests are recorded like any other).

What is bounded is requests, not work items: the outermost :func:`each` of a test opens
:data:`AT_ONCE` slots, every fan-out inside it shares them, and each request holds one while it
is in flight (:func:`in_flight`, taken by the suite's HTTP transport). A fan-out nested in another
therefore never multiplies the bound, and an item waiting for its own inner items holds no slot.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

AT_ONCE = 4
"""Requests of one test in flight at most: a few, so a run of N workers sends at most 4 N."""

THREADS = 16
"""Items of one fan-out under way at most (each mostly waits for a slot or an answer)."""

_SLOTS: contextvars.ContextVar[threading.BoundedSemaphore | None] = contextvars.ContextVar(
    "kc_fanout_slots", default=None
)


def each(work: Callable[[T], R], items: Sequence[T], *, at_once: int = AT_ONCE) -> list[R]:
    """``[work(item) for item in items]``, side by side, with at most ``at_once`` requests in
    flight among them and every fan-out they start (the outermost fan-out's bound holds)."""
    if len(items) < 2 or at_once < 2:
        return [work(item) for item in items]
    slots = _SLOTS.get() or threading.BoundedSemaphore(at_once)

    def run(item: T) -> R:
        _SLOTS.set(slots)  # in this item's own copy of the caller's context
        return work(item)

    with ThreadPoolExecutor(max_workers=min(THREADS, len(items)), thread_name_prefix="kc-fanout") as pool:
        # Each call runs in a copy of the caller's context: a request deadline set there holds.
        futures: list[Future[R]] = [pool.submit(contextvars.copy_context().run, run, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()


_HOLDING: contextvars.ContextVar[bool] = contextvars.ContextVar("kc_fanout_holding", default=False)


@contextlib.contextmanager
def in_flight() -> Iterator[None]:
    """Held by one request while it is in flight: a slot of the fan-out it was sent from (none
    outside a fan-out, where a test sends one request at a time anyway). Taken once however many
    layers of a client ask for it, or two such layers in four threads would wait for each other."""
    slots = _SLOTS.get()
    if slots is None or _HOLDING.get():
        yield
        return
    with slots:
        holding = _HOLDING.set(True)
        try:
            yield
        finally:
            _HOLDING.reset(holding)
