"""Scheduling of the project's own test command (``pytest -n 3 --dist loadfile``): the longest test
files start first, so that the workers end together.

Why: pytest-xdist hands out whole files, by default the files with the most tests first. The
longest files have few tests each (whole-suite runs in subprocesses), so they came last, and one
worker ran the last of them alone while the other had finished: 40 s of a 598 s run here. The
order only schedules; a file missing from the list runs after those in it, in collection order
(xdist's own reordering by test count is switched off)."""

from __future__ import annotations

import pytest

LONGEST_FIRST = (
    "test_quirk_detection.py",
    "test_seed_allowed_cores.py",
    "test_client_harness.py",
    "test_mcp_ts.py",
    "test_live_runs.py",
    "test_real_conditions.py",
    "test_suite_runs.py",
    "test_load_profile.py",
    "test_preflight.py",
    "test_wheel.py",
    "test_wire_overrides.py",
    "test_bounded_http.py",
    "test_hostile_targets.py",
    "test_node_core.py",
    "test_verdict_invariants.py",
    "test_no_control_gate.py",
    "test_independent_implementations.py",
    "test_hostile_mcp.py",
)
"""The files that took 25 s or more of a worker's time in one run of the test command, longest first."""


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order below (xdist would sort by test count)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, as collected
