"""Under --concurrency the longest tests head the workers' first shares (conformance.plugin.schedule),
and those shares are the ones pytest-xdist's work stealing really deals (held here against xdist)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from xdist.scheduler import WorkStealingScheduling  # type: ignore[import-untyped]

from conformance.plugin.schedule import longest_first, shares


class Node:
    """A worker as the scheduler sees it: what it was sent."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def dealt(collection: list[str], workers: int) -> list[list[str]]:
    """What xdist's work stealing sends each worker first, for ``collection``."""
    config: Any = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"])
    scheduler = WorkStealingScheduling(config)
    nodes: list[Any] = [Node(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize(("count", "workers"), [(276, 8), (172, 4), (10, 3), (7, 8), (2, 2)])
def test_the_shares_are_those_work_stealing_deals_first(count: int, workers: int) -> None:
    collection = [f"t{n}" for n in range(count)]
    assert [len(share) for share in dealt(collection, workers)] == shares(count, workers)


def test_each_long_test_heads_a_share_and_nothing_is_lost_or_doubled() -> None:
    collection = [f"t{n}" for n in range(40)]
    long = [n in (5, 6, 7, 30, 31) for n in range(40)]
    ordered = longest_first(collection, long, 4)
    assert sorted(ordered) == sorted(collection)
    heads = [share[:2] for share in dealt(ordered, 4)]
    assert heads == [["t5", "t31"], ["t6", "t11"], ["t7", "t20"], ["t30", "t29"]]


def test_a_serial_run_or_one_without_long_tests_keeps_its_order() -> None:
    collection = [f"t{n}" for n in range(10)]
    assert longest_first(collection, [n == 3 for n in range(10)], 1) == collection
    assert longest_first(collection, [False] * 10, 4) == collection
