"""A pytest plugin for tests/test_schedule.py: each xdist worker writes the order its collection
ended in (and which tests are ``kc_long``) to ``$KC_SCHEDULE_PROBE``, and its parent's command
line beside it, then deselects every test,
so that the run only collects."""

from __future__ import annotations

import json
import os
from collections.abc import Generator

import pytest

from conformance.plugin.schedule import LONG


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    yield
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    order = [[item.nodeid, item.get_closest_marker(LONG) is not None] for item in items]
    with open(f"{os.environ['KC_SCHEDULE_PROBE']}.{worker}", "w", encoding="utf-8") as out:
        json.dump(order, out)
    with (
        open(f"/proc/{os.getppid()}/cmdline", "rb") as parent,
        open(f"{os.environ['KC_SCHEDULE_PROBE']}.parent.{worker}", "wb") as out,
    ):
        out.write(parent.read())  # a worker forked by the warm-worker server is that server's child
    config.hook.pytest_deselected(items=list(items))
    items[:] = []
