"""A stateful model of the contract, driven by Hypothesis (``conformance/server/stateful.py``).

The walk changes time, revisions, scopes and modes, starts runs for several
identities, follows references and cursors across them, and the model predicts
every response exactly. A failure shrinks to a minimal sequence of steps,
printed as a program.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from conformance.common.config import TargetConfig
from conformance.common.rules import held, recording
from conformance.common.walk import walk_settings
from conformance.plugin.options import option, walk_size
from conformance.server.stateful import CLAIMS, WALK_SEED, machine, tour
from conformance.server.wire import CoreWire
from conformance.server.world import provision

R = pytest.mark.requirement


@R(*CLAIMS)
def test_stateful_model_agrees_with_the_target(
    kc_config: TargetConfig, core: CoreWire, control: Any, pytestconfig: pytest.Config
) -> None:
    """A scripted tour through the rules first (it reaches every claimed rule, whatever the walk draws),
    then the random walk. Only the IDs whose checks ran on a definite prediction count as verified."""
    if control is None:
        pytest.skip("not verified: the stateful model drives time and state through the test-control extension")
    examples, steps = walk_size(pytestconfig, default=(20, 25), deep=(200, 60))
    walk = machine(
        lambda: provision(kc_config, core, control, large=False),
        kc_config,
        walk_seed=option(pytestconfig, "--stateful-seed") or WALK_SEED,
    )
    with recording():  # the model's own account of what it checked on a definite prediction counts, below
        tour(walk)
        run_state_machine_as_test(
            walk, settings=walk_settings(examples, steps, shrink=not option(pytestconfig, "--no-shrink"))
        )
    held(walk.reach.verified())
