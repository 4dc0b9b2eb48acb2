"""Independent requests of one test sent side by side.

Why: a Core far away costs a round trip per request, and a test that reads several documents
one after the other waits for each in turn (a check reading five documents through three page
sizes is some 200 round trips: 20 s at 50 ms each way). Sent a few at a time, it waits for the
longest chain, not the sum. The results, the rules recorded and the first failure are those of
the serial loop: results come back in the items' order, and the failure raised is the first in
that order (later items may also have been sent; their requests are recorded like any other).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

AT_ONCE = 4
"""Requests of one test in flight at most: a few, so a run of N workers sends at most 4 N."""


def each(work: Callable[[T], R], items: Sequence[T], *, at_once: int = AT_ONCE) -> list[R]:
    """``[work(item) for item in items]``, up to ``at_once`` of them running at a time."""
    if len(items) < 2 or at_once < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(at_once, len(items)), thread_name_prefix="kc-fanout") as pool:
        # Each call runs in a copy of the caller's context: a request deadline set there holds.
        futures: list[Future[R]] = [pool.submit(contextvars.copy_context().run, work, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()
