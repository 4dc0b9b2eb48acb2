"""Under --concurrency the longest tests head the workers' first shares (conformance.plugin.schedule),
and those shares are the ones pytest-xdist's work stealing really deals (held here against xdist)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from xdist.scheduler import WorkStealingScheduling  # type: ignore[import-untyped]

from conformance.plugin.schedule import longest_first, shares
from tests.suite_command import SUITE

ROOT = Path(__file__).resolve().parent.parent


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
    long = [40 if n in (5, 6, 7, 30, 31) else 0 for n in range(40)]
    ordered = longest_first(collection, long, 4)
    assert sorted(ordered) == sorted(collection)
    heads = [share[:2] for share in dealt(ordered, 4)]
    assert heads == [["t5", "t31"], ["t6", "t11"], ["t7", "t20"], ["t30", "t29"]]


def test_the_longest_tests_are_dealt_first_each_to_the_lightest_head() -> None:
    """Longest processing time first: the two longest never share a head while another holds
    only a short one, and equal rounds keep their collection order."""
    collection = [f"t{n}" for n in range(20)]
    rounds = [0] * 20
    rounds[2], rounds[4], rounds[9], rounds[11], rounds[15] = 10, 75, 45, 45, 16
    heads = [
        share[: share.index(next(t for t in share if not rounds[int(t[1:])]))]
        for share in dealt(longest_first(collection, rounds, 3), 3)
    ]
    assert heads == [["t4"], ["t9", "t15"], ["t11", "t2"]]


def test_a_serial_run_or_one_without_long_tests_keeps_its_order() -> None:
    collection = [f"t{n}" for n in range(10)]
    assert longest_first(collection, [5 if n == 3 else 0 for n in range(10)], 1) == collection
    assert longest_first(collection, [0] * 10, 4) == collection


def test_a_concurrent_suite_run_starts_every_share_with_a_long_test(tmp_path: Path) -> None:
    """The wiring: the controller tells the workers how tests are dealt, every worker orders its
    collection the same way, and each of the shares work stealing deals first heads with a test
    marked kc_long (the bundled simulator, 4 workers; every test deselected once ordered)."""
    probe = tmp_path / "order"
    done = subprocess.run(
        [*SUITE, "--concurrency", "4", "-p", "tests.schedule_probe", "--report-dir", str(tmp_path / "reports")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "KC_SCHEDULE_PROBE": str(probe), "PYTHONPATH": str(ROOT)},
    )
    orders = [json.loads(path.read_text("utf-8")) for path in sorted(tmp_path.glob("order.gw*"))]
    assert len(orders) == 4 and all(order == orders[0] for order in orders), done.stdout[-2000:]
    order = orders[0]
    starts = [sum(shares(len(order), 4)[:n]) for n in range(4)]
    assert [order[start][1] for start in starts] == [True] * 4, [order[start][0] for start in starts]
    assert sum(long for _, long in order) >= 4  # the marks are there: the Core model's parts alone are five
    parents = [path.read_bytes() for path in sorted(tmp_path.glob("order.parent.gw*"))]
    assert len(parents) == 4 and all(b"warm.py" in parent for parent in parents), parents  # warm workers
