"""Under ``--concurrency`` the suite's longest tests start first, at the heads of the workers' shares.

Why: pytest-xdist's work stealing (the suite's ``--concurrency``) first deals each worker a
contiguous share of the collection, and later moves only tests that have not started. A long test
late in a share (a stateful walk; a read of every document through every page size, some forty
round trips in a row) starts late, and the run waits for it: against a Core 50 ms away each is
7 to 17 s of a run. Tests marked ``kc_long`` are therefore dealt round-robin to the heads of the
shares, in their collection order (a share heads with several when there are more of them than
workers). Only the order changes: every worker still runs what it is given, so the verdict and
reports are those of any other order. Every worker reorders its own collection
the same way (xdist requires identical collections), from the worker count alone."""

from __future__ import annotations

from typing import TypeVar

import pytest

LONG = "kc_long"
"""The marker of a test made of many round trips in a row (a walk, a whole read chain)."""

T = TypeVar("T")


def shares(count: int, workers: int) -> list[int]:
    """The share sizes work stealing deals first: each worker in turn gets what is left divided by the workers left."""
    sizes: list[int] = []
    left = count
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    return sizes


def longest_first(items: list[T], long: list[bool], workers: int) -> list[T]:
    """``items`` reordered so that those flagged in ``long`` head the ``workers`` shares,
    round-robin in their order; the others fill the shares in theirs."""
    if workers < 2 or not any(long):
        return list(items)
    heads: list[list[T]] = [[] for _ in range(workers)]
    for n, item in enumerate(item for item, flag in zip(items, long, strict=True) if flag):
        heads[n % workers].append(item)
    rest = iter([item for item, flag in zip(items, long, strict=True) if not flag])
    ordered: list[T] = []
    for head, size in zip(heads, shares(len(items), workers), strict=True):
        ordered += head + [
            item for _, item in zip(range(size - len(head)), rest, strict=False)
        ]  # range first: no item lost
    return ordered + list(rest)


def spread(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker of a run of several, the collection in :func:`longest_first` order."""
    workerinput = getattr(config, "workerinput", None)
    if not isinstance(workerinput, dict) or workerinput.get("kc_dist") != "worksteal":
        return  # serial, or another distribution that deals tests otherwise: the order is left as it is
    workers = int(workerinput.get("workercount", 1))
    items[:] = longest_first(items, [item.get_closest_marker(LONG) is not None for item in items], workers)
