"""A stateful model of the contract, driven by Hypothesis (``conformance/server/stateful.py``).

The walk changes time, revisions, scopes and modes, starts runs for several
identities, follows references and cursors across them, and the model predicts
every response exactly. A failure shrinks to a minimal sequence of steps,
printed as a program.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common.config import TargetConfig
from conformance.common.rules import held, recording
from conformance.common.walk import WalkPart, run_walk, walk_parts, walk_settings
from conformance.plugin.options import option, walk_size
from conformance.server.stateful import CLAIMS, WALK_SEED, machine, tour
from conformance.server.wire import CoreWire
from conformance.server.world import provision

R = pytest.mark.requirement
SIZE, DEEP = (20, 25), (200, 60)  # (examples, steps) of the whole walk, by default and under --deep


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The scripted tour, and the walk's examples shared among its parts: a test each."""
    examples, _ = walk_size(metafunc.config, default=SIZE, deep=DEEP)
    metafunc.parametrize("part", walk_parts(examples), ids=str)


@R(*CLAIMS)
@pytest.mark.kc_long(rounds=120)
def test_stateful_model_agrees_with_the_target(
    kc_config: TargetConfig, core: CoreWire, control: Any, pytestconfig: pytest.Config, part: WalkPart
) -> None:
    """The scripted tour (it reaches every claimed rule, whatever the walk draws), or a share of
    the random walk. Only the IDs whose checks ran on a definite prediction count as verified."""
    if control is None:
        pytest.skip("not verified: the stateful model drives time and state through the test-control extension")
    _, steps = walk_size(pytestconfig, default=SIZE, deep=DEEP)
    walk = machine(
        lambda: provision(kc_config, core, control, large=False),
        kc_config,
        walk_seed=part.seed(option(pytestconfig, "--stateful-seed") or WALK_SEED),
    )
    with recording():  # the model's own account of what it checked on a definite prediction counts, below
        if part.tours:
            tour(walk)
        else:
            run_walk(walk, settings=walk_settings(part.examples, steps, shrink=not option(pytestconfig, "--no-shrink")))
    held(walk.reach.verified())
