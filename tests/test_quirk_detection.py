"""Test the tester: for every simulator quirk, a whole-suite run must fail every
requirement the quirk violates and end with the expected exit code.

``KC_QUIRKS`` picks the quirks: ``fast`` (default: a subset with one quirk of each
area and kind of miniature, so the project's tests stay within CI's time), ``all``
(``tox -e quirks``) or a comma-separated list of names;
``KC_QUIRK_WORKERS`` runs that many suites at a time (default 2).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from simulator.quirks import QUIRKS, Quirk
from tests import detection
from tests.suite_command import warm_suite

FAST = (
    "capabilities_missing",
    "disabled_still_enabled",
    "turn_no_pinning",
    "search_fourth_hint",
    "split_characters",
    "ref_any_route",
    "auth_optional",
    "cache_control_missing",
    "read_refreshes_expiry",
    "expiry_from_first_use",
    "mcp_identity_argument_honoured",
    "mcp_differs_from_http",
    "sk_alpha_inverted",
    "sk_semantic_is_lexical",
)
CHOSEN = detection.selected(QUIRKS, FAST)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> dict[str, detection.Outcome]:
    workers = int(os.environ.get("KC_QUIRK_WORKERS", "2"))
    found = detection.run_all(CHOSEN, tmp_path_factory.mktemp("quirks"), workers)
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # the measured table, shown on every run
            reporter.write_line(
                "\nquirk detection (quirk, expected failing IDs, verdict, exit, seconds, other failed IDs)"
            )
            for line in detection.table(QUIRKS, found).splitlines():
                reporter.write_line("  " + line)
    return found


class SuiteMisses(AssertionError):
    """Only the known gaps recorded in the table (suite_misses) were missed."""


def _expected(quirk: Quirk) -> object:
    if not quirk.suite_misses:
        return quirk.name
    reason = "suite misses " + "; ".join(f"{rid}: {why}" for rid, why in quirk.suite_misses.items())
    return pytest.param(quirk.name, marks=pytest.mark.xfail(raises=SuiteMisses, strict=True, reason=reason))


@pytest.mark.parametrize("name", [_expected(q) for q in CHOSEN])
def test_every_quirk_is_detected(outcomes: dict[str, detection.Outcome], name: str) -> None:
    """Every expected ID failed and the exit matches. A known gap of the suite is an expected
    failure (xfail, strict): once the suite catches it, this fails until the entry goes."""
    quirk = QUIRKS[name]
    issues = detection.problems(quirk, outcomes[name])
    assert [i for i in issues if i not in detection.known_gaps(quirk)] == []
    if issues:
        raise SuiteMisses("; ".join(issues))


# ----------------------------------------------------------- the judging can fail
def _outcome(failed: set[str], exit_code: int) -> detection.Outcome:
    return detection.Outcome("q", frozenset(failed), exit_code, 1.0)


def test_judging_reports_a_missing_id_and_a_wrong_exit() -> None:
    quirk = Quirk("q", ("REF-003", "REF-009"), "made up", 1)
    assert detection.problems(quirk, _outcome({"REF-003"}, 1)) == ["the suite did not fail REF-009"]
    assert detection.problems(quirk, _outcome({"REF-003", "REF-009"}, 6)) == ["exit 6, expected 1"]
    assert detection.problems(quirk, _outcome({"REF-003", "REF-009", "WIRE-002"}, 1)) == []


def test_judging_expects_a_concurrency_quirk_to_pass_the_sequential_suite() -> None:
    quirk = Quirk("q", ("REF-009",), "made up", 1, caught_by="load")
    assert detection.problems(quirk, _outcome(set(), 0)) == []
    assert detection.problems(quirk, _outcome({"REF-009"}, 1)) == [
        "the sequential suite failed REF-009, which only concurrency should show",
        "exit 1, expected 0 (only a load run catches it)",
    ]


def test_judging_reports_a_run_without_results() -> None:
    quirk = Quirk("q", ("SRCH-003",), "made up", 1)
    result = detection.outcome_of(quirk, None, 4, 0.5, "usage error")
    assert detection.problems(quirk, result) == [
        "the suite did not fail SRCH-003",
        "exit 4, expected 1",
        "no results: usage error",
    ]


def test_a_table_entry_claiming_an_id_the_quirk_does_not_break_is_reported(
    outcomes: dict[str, detection.Outcome], tmp_path: Path
) -> None:
    """A real whole-suite run (the table's own, when the quirk is among those chosen): the quirk
    breaks a SHOULD only, the made-up entry also claims a MUST."""
    real = QUIRKS["cache_control_missing"]
    claimed = Quirk(real.name, (*real.violates, "SRCH-003"), real.description, 1)
    outcome = outcomes.get(real.name) or detection.run(claimed, tmp_path)
    assert detection.problems(claimed, outcome) == [
        "the suite did not fail SRCH-003",
        "exit 0, expected 1",
    ]


def test_runs_are_whole_suite_runs_and_strict_only_quirks_run_strict(tmp_path: Path) -> None:
    plain = detection.command(QUIRKS["search_fourth_hint"], tmp_path / "a")
    assert "--requirement" not in plain and "--target-config" not in plain and "--no-shrink" in plain
    strict = detection.command(Quirk("q", ("READ-006",), "made up", 1, strict_only=True), tmp_path / "b")
    config = Path(strict[strict.index("--target-config") + 1])
    assert config.read_text("utf-8") == detection.STRICT_CONFIG
    assert "--sim-clock-tick" not in plain + strict
    still = detection.command(QUIRKS["expiry_after_edge"], tmp_path / "c")
    assert still[still.index("--sim-clock-tick") + 1] == "0", "an exact-instant quirk runs on a clock that stands still"


@pytest.mark.parametrize("name", [q.name for q in QUIRKS.values() if q.strict_only and q in CHOSEN])
def test_a_seed_allowed_quirk_passes_a_default_run(tmp_path: Path, name: str) -> None:
    """A strict_only quirk deviates only from this project's choices: without strict, the whole
    suite must call that Core conformant (as strict as the seed, no stricter)."""
    quirk = QUIRKS[name]
    plain = dataclasses.replace(quirk, strict_only=False)  # the same Core on the same clock, judged without strict
    outcome = detection.run(plain, tmp_path)
    assert outcome.exit == 0 and outcome.failed == frozenset(), (outcome.failed, outcome.exit, outcome.note)


def test_every_seed_allowed_quirk_at_once_passes_a_default_run(tmp_path: Path) -> None:
    """Every strict_only quirk of the table in one simulator (the Core, MCP and search_knowledge
    miniatures mixed): a default run calls it conformant. One run in every CI, whatever KC_QUIRKS
    picks, so no seed-allowed choice can make a default run stricter than the seed unnoticed."""
    names = sorted(q.name for q in QUIRKS.values() if q.strict_only)
    expected = {"budget_ends_one_page_late", "error_without_next_action", "sk_other_choices", "sk_scores_rounded"}
    assert expected | {"mcp_own_page_size"} <= set(names)
    reports = tmp_path / "allowed"
    ticks = {QUIRKS[n].clock_tick for n in names} - {None}
    assert len(ticks) <= 1, f"the seed-allowed quirks need clocks of different ticks: {ticks}"
    still = [f"--sim-clock-tick={tick!r}" for tick in ticks]  # the exact instants they need, the others do not mind
    cmd = [
        *warm_suite(),
        *(a for n in names for a in ("--sim-quirk", n)),
        *still,
        "--no-shrink",
        "--reports",
        str(reports),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    results = json.loads((reports / "results.json").read_text("utf-8"))
    failed = {r["id"]: r["reason"] for r in results["requirements"] if r["status"] == "failed"}
    assert failed == {} and done.returncode == 0, (failed, done.returncode, done.stdout[-3000:])
