"""The stateful test's driver, its model and the transcript checker, against the in-process simulator.

The default walk must reach every rule the stateful test claims and catch a Core
whose reads refresh a reference's expiry; a recorded transcript, fed to the model
alone, must name the exact step where the target deviated, pass a clean one, and
agree with the state machine that recorded it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conformance.common.config import load_config
from conformance.common.outcomes import ContractViolation
from conformance.common.walk import WALK_PARTS, run_walk, walk_parts, walk_settings
from conformance.server.stateful import CLAIMS, Held, machine, tour
from conformance.server.transcript import Checker, Deviation, replay
from tests.transcripts import CLEAN, QUIRKY, record_refresh_scenario, simulator


def _load(path: Any) -> dict[str, Any]:
    return dict(json.loads(path.read_text("utf-8")))


def _walk(*quirks: str) -> tuple[set[str], Checker, ContractViolation | None, Any]:
    """The stateful test's default walk (20 examples of 25 steps, not shrunk) against the simulator."""
    checkers: list[Checker] = []
    with simulator(*quirks) as (cfg, world):
        walk = machine(lambda: world, cfg, checkers)
        try:
            run_walk(walk, settings=walk_settings(20, 25, shrink=False))  # as the suite's test walks
        except ContractViolation as exc:
            return walk.reach.verified(), checkers[0], exc, cfg
    return walk.reach.verified(), checkers[0], None, cfg


# ------------------------------------------------------------- recordings
def test_the_replay_names_the_step_where_a_recorded_core_deviated() -> None:
    """Recorded against read_refreshes_expiry: the reference was read at 200 s, so the Core still
    serves it at 301 s. The read at exactly 300 s may go either way; the one at 301 s may not."""
    transcript = _load(QUIRKY)
    found = replay(transcript, load_config(None, target="sim"))
    steps = transcript["steps"]
    assert found is not None and (found.step, found.requirement) == (len(steps) - 1, "REF-001"), found
    assert steps[found.step]["event"]["op"] == "read" and steps[found.step]["status"] == 200
    assert sum(s["event"].get("seconds", 0) for s in steps[: found.step]) == 301
    assert "301 s old" in found.message


def test_a_strict_replay_names_the_read_at_exactly_300_seconds() -> None:
    """Strict codes hold the Core to this project's edge (expired from 300 s): one step earlier,
    and blamed on the edge's own rule (REF-016), not on "expire after 300 seconds" (REF-001)."""
    cfg = load_config(None, target="sim")
    cfg.wire["codes"]["strict"] = True
    found = replay(_load(QUIRKY), cfg)
    assert found is not None and found.requirement == "REF-016" and "300 s old" in found.message
    assert found.step == len(_load(QUIRKY)["steps"]) - 3


def test_the_replay_passes_a_clean_recording_of_the_same_steps() -> None:
    clean, quirky = _load(CLEAN), _load(QUIRKY)
    assert [s["event"]["op"] for s in clean["steps"]] == [s["event"]["op"] for s in quirky["steps"]]
    assert replay(clean, load_config(None, target="sim")) is None


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ("served_expired", "REF-001"),
        ("truncated_true_at_end", "READ-009"),
        ("content_shifted", "READ-015"),
        ("foreign_read_served", "REF-004"),
    ],
)
def test_the_replay_names_any_changed_response(change: str, rule: str) -> None:
    """Each response of the clean recording changed the way a wrong Core would: flagged at that step."""
    transcript = _load(CLEAN)
    steps = transcript["steps"]
    pages = [i for i, s in enumerate(steps) if s.get("status") == 200 and s["event"]["op"] == "read"]
    page = json.loads(steps[pages[-1]]["body"])
    if change == "served_expired":
        target = len(steps) - 1
        steps[target] = {**steps[target], "status": 200, "body": steps[pages[-1]]["body"]}
    elif change == "foreign_read_served":
        target = next(i for i, s in enumerate(steps) if s["event"].get("who") == "other_session")
        steps[target] = {**steps[target], "status": 200, "body": steps[pages[-1]]["body"]}
    else:
        target = pages[-1]
        page = (
            {**page, "truncated": True}
            if change == "truncated_true_at_end"
            else {**page, "content": page["content"][1:]}
        )
        steps[target] = {**steps[target], "body": json.dumps(page, ensure_ascii=False)}
    found = replay(transcript, load_config(None, target="sim"))
    assert found is not None and (found.step, found.requirement) == (target, rule), found


def test_a_fresh_recording_is_judged_as_the_stored_one() -> None:
    """The recordings beside the tests are what tests/transcripts.py records today."""
    cfg = load_config(None, target="sim")
    for quirks, stored in (((), CLEAN), (("read_refreshes_expiry",), QUIRKY)):
        fresh = record_refresh_scenario(*quirks)
        assert [(s["event"]["op"], s.get("status")) for s in fresh["steps"]] == [
            (s["event"]["op"], s.get("status")) for s in _load(stored)["steps"]
        ]
        assert replay(fresh, cfg) == replay(_load(stored), cfg)


# ---------------------------------------------- the machine and the model
@pytest.mark.parametrize("quirks", [(), ("read_refreshes_expiry",)], ids=["clean", "read_refreshes_expiry"])
def test_the_state_machine_and_the_replay_of_its_transcript_agree(quirks: tuple[str, ...]) -> None:
    """Rules called by hand: a reference read at 60 s, then at 301 s (the expiry edge rule)."""
    checkers: list[Checker] = []
    with simulator(*quirks) as (cfg, world):
        walk = machine(lambda: world, cfg, checkers)
        state = walk()
        state.setup()
        held = state.first_reference()
        assert isinstance(held, Held)
        state.read(held, None, 60.0)
        caught: ContractViolation | None = None
        try:
            state.read_at_the_expiry_edge(0, "after")
        except ContractViolation as exc:
            caught = exc
    transcript = json.loads(json.dumps(checkers[0].transcript()))
    found = replay(transcript, cfg)
    if not quirks:
        assert caught is None and found is None and "REF-001" in walk.reach.verified()
        return
    assert caught is not None and caught.requirement == "REF-001"
    assert found == Deviation(len(transcript["steps"]) - 1, "REF-001", str(caught))


@pytest.fixture(scope="module")
def clean_walk() -> tuple[set[str], Checker, ContractViolation | None, Any]:
    return _walk()


def test_the_default_walk_reaches_every_rule_it_claims(
    clean_walk: tuple[set[str], Checker, ContractViolation | None, Any],
) -> None:
    exercised, _, failed, _ = clean_walk
    assert failed is None
    assert sorted(set(CLAIMS) - exercised) == []


def test_the_replay_of_a_clean_walk_passes(clean_walk: tuple[set[str], Checker, ContractViolation | None, Any]) -> None:
    """The walk's last example, however long the walk drew it (Hypothesis also draws constants
    from the project's modules a process has imported, so other test files change the draw), and
    the scripted tour, whose transcript is always long."""
    _, checker, _, cfg = clean_walk
    transcript = json.loads(json.dumps(checker.transcript()))
    assert transcript["steps"] and replay(transcript, cfg) is None
    checkers: list[Checker] = []
    with simulator() as (cfg, world):
        tour(machine(lambda: world, cfg, checkers))
    toured = json.loads(json.dumps(checkers[0].transcript()))
    assert len(toured["steps"]) > 20 and replay(toured, cfg) is None


def test_the_default_walk_catches_reads_that_refresh_the_expiry_and_the_replay_agrees() -> None:
    _, checker, failed, cfg = _walk("read_refreshes_expiry")
    assert failed is not None and failed.requirement == "REF-001", failed
    transcript = json.loads(json.dumps(checker.transcript()))
    assert replay(transcript, cfg) == Deviation(len(transcript["steps"]) - 1, "REF-001", str(failed))
    cut = copy.deepcopy(transcript)
    cut["steps"].pop()
    assert replay(cut, cfg) is None, "only the last step deviates"


# ------------------------------------------------------------- the tour
def _tour(*quirks: str) -> tuple[set[str], ContractViolation | None]:
    with simulator(*quirks) as (cfg, world):
        walk = machine(lambda: world, cfg)
        try:
            tour(walk)
        except ContractViolation as exc:
            return walk.reach.verified(), exc
    return walk.reach.verified(), None


def test_the_tour_reaches_every_claimed_rule() -> None:
    """Reach does not hang on the walk's seed: measured before the tour, seeds 1, 2, 4 and 5 each
    left one claimed rule unreached (REF-015, REF-001, REF-002, REF-007) at the default depth."""
    exercised, caught = _tour()
    assert caught is None and set(CLAIMS) - exercised == set()


@pytest.mark.parametrize(
    ("quirk", "rule"),
    [("read_refreshes_expiry", "REF-001"), ("cursor_outlives_revision", "REF-008"), ("read_while_disabled", "CAP-006")],
)
def test_the_tour_alone_catches_the_stateful_quirks(quirk: str, rule: str) -> None:
    _, caught = _tour(quirk)
    assert caught is not None and caught.requirement == rule, caught


def test_a_walk_is_cut_into_parts_that_share_its_examples() -> None:
    """The tour is a test of its own; every example is walked once, by parts none of which is
    empty, each with a seed of its own (the first the walk's, so ``--stateful-seed`` still names it)."""
    for examples in (0, 1, 3, 4, 5, 20, 201):
        tour, *walks = walk_parts(examples)
        assert tour.tours and tour.examples == 0 and not any(w.tours for w in walks)
        assert sum(w.examples for w in walks) == examples
        assert len(walks) == min(WALK_PARTS, examples) and all(w.examples >= 1 for w in walks)
        assert len({w.seed(7) for w in walks}) == len(walks) and all(w.seed(7) == 7 for w in walks[:1])
        assert len({str(p) for p in [tour, *walks]}) == 1 + len(walks)
