"""A stateful model of the ``search_knowledge`` tool (seed 003), driven by Hypothesis
(``conformance/search_knowledge/stateful.py``): publish, archive, unpublish, scope and runtime changes,
interleaved with query searches, exact revision reads and window paging, every answer
predicted. A failure shrinks to a minimal sequence of steps, printed as a program."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.common.rules import held, recording
from conformance.common.walk import WalkPart, run_walk, walk_parts, walk_settings
from conformance.mcp.endpoints import skipped
from conformance.plugin.options import option, walk_size
from conformance.search_knowledge.answers import call, not_offered
from conformance.search_knowledge.stateful import CLAIMS, WALK_SEED, machine, model_world, tour

R = pytest.mark.requirement
SIZE, DEEP = (3, 8), (100, 40)  # (examples, steps) of the walk, by default and under --deep


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The scripted tour and the random walk: a test each, so workers share them."""
    examples, _ = walk_size(metafunc.config, default=SIZE, deep=DEEP)
    metafunc.parametrize("part", walk_parts(examples, parts=1), ids=str)


@R(*CLAIMS)
def test_search_knowledge_model_agrees_with_the_target(
    kc_config: TargetConfig, kc_target: Target, control: Any, pytestconfig: pytest.Config, part: WalkPart
) -> None:
    """The scripted tour through every rule, or the random walk. Only IDs whose checks ran, and
    whose every rule was reached, count as verified."""
    chosen = option(pytestconfig, "--mcp-target")
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    if control is None:
        pytest.skip("not verified: the search_knowledge model drives its states through the test-control extension")
    _, steps = walk_size(pytestconfig, default=SIZE, deep=DEEP)
    with model_world(kc_config, kc_target, control, chosen) as world:
        if world is None:
            pytest.skip("not verified: no Agent Session MCP server acting as the identities the model mints")
        probe = call(world.sessions["alice"], {"query": "knowledge"}, judge=False)  # offered at all: the walk judges
        if not_offered(probe):
            pytest.skip(f"not verified: the MCP server does not offer search_knowledge ({probe.raw[:120]})")
        walk = machine(lambda: world, walk_seed=part.seed(option(pytestconfig, "--stateful-seed") or WALK_SEED))
        with recording():  # the model's own account counts: a rule is verified once every step of it was reached
            if part.tours:
                tour(walk)
            else:
                run_walk(
                    walk, settings=walk_settings(part.examples, steps, shrink=not option(pytestconfig, "--no-shrink"))
                )
        held(walk.reach.verified())
