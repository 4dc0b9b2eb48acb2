"""The search_knowledge stateful model (conformance/search_knowledge/stateful.py) against the simulator over
its streamable-HTTP MCP path: the tour reaches every rule and claim, the tags say what each rule
checks, a clean walk passes on any seed, the tour alone catches the SK quirks a state walk can
show, and ranking quirks pass it (it depends on no order or score)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis.stateful import run_state_machine_as_test

from conformance.common.config import load_config
from conformance.common.control import Control
from conformance.common.open import open_target
from conformance.common.outcomes import ContractViolation
from conformance.common.settings import RunSettings
from conformance.common.walk import Reach, walk_settings
from conformance.search_knowledge.stateful import (
    CLAIMS,
    TAGS,
    WALK_SEED,
    SkModelWorld,
    machine,
    model_world,
    tour,
)


@contextmanager
def _world(*quirks: str, strict: bool = False) -> Iterator[SkModelWorld]:
    cfg = load_config(None, target="sim")
    if strict:
        cfg.wire["codes"]["strict"] = True
    target = open_target(cfg, RunSettings(sim_quirks=quirks))
    try:
        control = Control(target.http, str(target.control_url), str(target.control_token))
        with model_world(cfg, target, control, None) as world:
            assert world is not None
            yield world
    finally:
        target.close()


def _run(
    *quirks: str, walk: bool = False, walk_seed: int = WALK_SEED, strict: bool = False
) -> tuple[Reach, ContractViolation | None]:
    with _world(*quirks, strict=strict) as world:
        states = machine(lambda: world, walk_seed)
        reach = states.reach
        try:
            tour(states)
            if walk:
                run_state_machine_as_test(states, settings=walk_settings(3, 8, shrink=False))
        except ContractViolation as exc:
            return reach, exc
    return reach, None


def test_the_tour_reaches_every_rule_and_claim_and_each_rule_checks_only_its_tags() -> None:
    reach, caught = _run()
    assert caught is None
    assert reach.rules == set(TAGS), "every rule (and the example's end) is reached by the tour"
    assert reach.verified() == set(CLAIMS)
    for rule, ids in reach.checked.items():
        assert ids <= set(TAGS[rule]), f"{rule} checks {sorted(ids - set(TAGS[rule]))} it is not tagged with"
    assert set(CLAIMS) >= {"SK-003", "SK-004", "SK-012", "SK-020", "SK-023", "SK-026"}


def test_an_unreached_rule_claims_nothing_it_is_tagged_with() -> None:
    reach = Reach(TAGS, set(TAGS) - {"publish"}, {"query": {"SK-003", "SK-010"}, "read": {"SK-004", "SK-012"}})
    assert reach.verified() == {"SK-010", "SK-012"}, "SK-003 and SK-004 hang on publish, which did not run"


@pytest.mark.parametrize("walk_seed", [WALK_SEED, 3], ids=["default-seed", "seed-3"])
def test_a_clean_walk_passes_after_the_tour(walk_seed: int) -> None:
    reach, caught = _run(walk=True, walk_seed=walk_seed)
    assert caught is None and reach.verified() == set(CLAIMS)


def test_strict_codes_pass_the_clean_simulator() -> None:
    """Strict: code points only, content_limit echoing limit_chars, every lexical match up to max_results."""
    reach, caught = _run(walk=True, strict=True)
    assert caught is None and reach.verified() == set(CLAIMS)


@pytest.mark.parametrize(
    ("quirk", "rule"),
    [
        ("sk_query_historical", "SK-003"),
        ("sk_window_in_bytes", "SK-026"),
        ("sk_existence_leak", "SK-023"),
        ("sk_mode_refused", "SK-015"),
        ("sk_audit_written", "SK-007"),
        ("sk_owner_argument_honoured", "SK-010"),
    ],
)
def test_the_tour_alone_catches_the_state_quirks(quirk: str, rule: str) -> None:
    _, caught = _run(quirk)
    assert caught is not None and caught.requirement == rule, caught


@pytest.mark.parametrize("quirk", ["sk_alpha_inverted", "sk_alpha_unclamped"])
def test_ranking_quirks_pass_the_model_which_predicts_no_order_or_score(quirk: str) -> None:
    """The profile's direction and clamping checks catch these; the model must not (it judges sets, not orders)."""
    _, caught = _run(quirk, walk=True)
    assert caught is None
