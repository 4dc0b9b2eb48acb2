"""Under ``--concurrency`` the suite's longest tests start first, at the heads of the workers' shares.

Why: pytest-xdist's work stealing (the suite's ``--concurrency``) first deals each worker a
contiguous share of the collection, and later moves only tests that have not started. A long test
late in a share (a stateful walk; a read of every document through every page size, some forty
round trips in a row) starts late, and the run waits for it: against a Core 50 ms away each is
7 to 17 s of a run. Tests marked ``kc_long`` are therefore dealt to the heads of the shares,
longest first, each to the share whose head holds the fewest round trips so far (the mark's
``rounds``, a rough count of its round trips in a row; a greedy longest-processing-time deal, so
two of the longest do not queue on one worker while another holds only short ones). Only the order
changes: every worker still runs what it is given, so the verdict and reports are those of any
other order. Every worker reorders its own collection the same way (xdist requires identical
collections), from the worker count alone."""

from __future__ import annotations

from typing import TypeVar

import pytest

LONG = "kc_long"
"""The marker of a test made of many round trips in a row (a walk, a whole read chain);
``rounds=N`` says about how many (:data:`ROUNDS` when it does not)."""

ROUNDS = 40
"""The round trips in a row of a ``kc_long`` test whose mark gives none."""

T = TypeVar("T")


def shares(count: int, workers: int) -> list[int]:
    """The share sizes work stealing deals first: each worker in turn gets what is left divided by the workers left."""
    sizes: list[int] = []
    left = count
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    return sizes


def longest_first(items: list[T], rounds: list[int], workers: int) -> list[T]:
    """``items`` reordered so that those with ``rounds`` above 0 head the ``workers`` shares:
    the longest first, each to the head with the fewest rounds so far (the first such head on a
    tie; equal rounds keep their order); the others fill the shares in theirs."""
    if workers < 2 or not any(rounds):
        return list(items)
    heads: list[list[T]] = [[] for _ in range(workers)]
    loads = [0] * workers
    long = sorted((n for n, r in enumerate(rounds) if r > 0), key=lambda n: -rounds[n])
    for n in long:
        lightest = loads.index(min(loads))
        heads[lightest].append(items[n])
        loads[lightest] += rounds[n]
    rest = iter([item for item, r in zip(items, rounds, strict=True) if r <= 0])
    ordered: list[T] = []
    for head, size in zip(heads, shares(len(items), workers), strict=True):
        ordered += head + [
            item for _, item in zip(range(size - len(head)), rest, strict=False)
        ]  # range first: no item lost
    return ordered + list(rest)


def rounds_of(item: pytest.Item) -> int:
    """The round trips in a row its ``kc_long`` mark gives (0: not marked)."""
    mark = item.get_closest_marker(LONG)
    return 0 if mark is None else max(1, int(mark.kwargs.get("rounds", ROUNDS)))


def spread(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker of a run of several, the collection in :func:`longest_first` order."""
    workerinput = getattr(config, "workerinput", None)
    if not isinstance(workerinput, dict) or workerinput.get("kc_dist") != "worksteal":
        return  # serial, or another distribution that deals tests otherwise: the order is left as it is
    workers = int(workerinput.get("workercount", 1))
    items[:] = longest_first(items, [rounds_of(item) for item in items], workers)
