"""A test's independent requests sent side by side keep the serial loop's results and its first
failure, in the items' order, whatever order they finish in."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conformance.common import fanout

ROOT = Path(__file__).resolve().parent.parent
WHERE: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def test_results_come_back_in_the_items_order_and_run_side_by_side() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def work(item: int) -> int:
        nonlocal running, most
        with fanout.in_flight():  # as the suite's transport holds a request
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.05 * (5 - item))  # the first item finishes last
            with lock:
                running -= 1
        return item * 10

    assert fanout.each(work, [0, 1, 2, 3, 4], at_once=3) == [0, 10, 20, 30, 40]
    assert most == 3


def test_the_first_failure_in_the_items_order_is_raised() -> None:
    def work(item: int) -> int:
        if item in (1, 3):
            time.sleep(0.1 if item == 1 else 0)  # item 3 fails first in time
            raise ValueError(f"item {item}")
        return item

    with pytest.raises(ValueError, match="item 1"):
        fanout.each(work, [0, 1, 2, 3])


def test_each_call_sees_the_caller_s_context() -> None:
    token = WHERE.set("caller")
    try:
        assert fanout.each(lambda _item: WHERE.get(), [1, 2, 3]) == ["caller"] * 3
    finally:
        WHERE.reset(token)


def test_nested_fan_outs_share_the_outermost_bound_of_requests_in_flight() -> None:
    """Items that fan out again do not multiply the bound: four items of three requests each,
    every request holding a slot, never have more than ``at_once`` requests in flight; waiting
    for inner items holds none (or this would deadlock)."""
    running, most = 0, 0
    lock = threading.Lock()

    def request(_n: int) -> int:
        nonlocal running, most
        with fanout.in_flight():
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.02)
            with lock:
                running -= 1
        return 1

    def item(_n: int) -> int:
        return sum(fanout.each(request, [0, 1, 2]))

    assert fanout.each(item, [0, 1, 2, 3], at_once=3) == [3, 3, 3, 3]
    assert most == 3


TWO_LAYERS = """
import time
from conformance.common import fanout

def request(_n):
    with fanout.in_flight():
        time.sleep(0.05)  # every thread holds its first slot before any asks again
        with fanout.in_flight():
            time.sleep(0.01)
    return 1

print(fanout.each(request, [0, 1, 2, 3], at_once=2))
"""


def test_a_slot_is_taken_once_by_a_request_that_asks_again() -> None:
    """Two layers of one client that each hold the request in flight (the preflight's request
    and the transport under it): with every slot taken by such requests, none waits for a second
    (in a process of its own: threads that wait for each other would never let it end)."""
    done = subprocess.run(
        [sys.executable, "-c", TWO_LAYERS], capture_output=True, text=True, timeout=30, cwd=ROOT, check=False
    )
    assert done.stdout.strip() == "[1, 1, 1, 1]", done.stderr[-2000:]
