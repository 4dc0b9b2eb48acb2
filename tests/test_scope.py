"""A declared scope (--scope SURFACES@ACCESS): which MUSTs it counts, and the verdict within it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
from typing import Any

import pytest

from conformance.common.scope import ScopeError, parse_scope
from conformance.report.results import TestResult, aggregate
from knowledge_schemas import load_catalogue
from tests.suite_command import warm_suite
from tests.test_results_model import INFO, SERVER_MUSTS

CATALOGUE = load_catalogue()
TODAY = dt.date(2026, 12, 1)


def _run(scope: str, tests: list[TestResult]) -> tuple[str, dict[str, Any] | None]:
    info = dataclasses.replace(INFO, scope=parse_scope(scope))
    result = aggregate(CATALOGUE, tests, info, waivers=[], today=TODAY)
    return result.verdict, result.scope


def _passing(*ids: str) -> TestResult:
    return TestResult(nodeid="t::pass", outcome="passed", requirements=list(ids), exercised=list(ids))


def test_without_control_a_scope_counts_what_the_configuration_can_stand_in_for() -> None:
    """Kit documents, kept workspaces and configured identities stand in for control; faults, scope
    and revision changes and (without realtime) the clock do not."""
    bare = parse_scope("server@no-control")
    inside, outside = set(bare.members(CATALOGUE)), set(bare.outside(CATALOGUE))
    assert inside | outside == set(SERVER_MUSTS) and not inside & outside
    assert outside == {"TURN-012", "REF-001", "REF-002", "REF-007", "REF-008", "REF-016", "REF-017"}
    assert len(inside) >= 52
    realtime = set(parse_scope("server@no-control+realtime").outside(CATALOGUE))
    assert realtime == {"TURN-012", "REF-007", "REF-008", "REF-017"}
    assert set(parse_scope("server@control").members(CATALOGUE)) == set(SERVER_MUSTS)
    every = parse_scope("server,mcp,tool@control").members(CATALOGUE)
    assert {CATALOGUE[rid].surface for rid in every} == {"server", "mcp", "tool"}


def test_the_verdict_within_a_scope() -> None:
    inside = parse_scope("server@no-control").members(CATALOGUE)
    verdict, member = _run("server@no-control", [_passing(*inside)])
    assert verdict == "conformant" and member is not None
    assert member["must_total"] == member["must_verified"] == len(inside)
    assert set(member["outside"]) == {"TURN-012", "REF-001", "REF-002", "REF-007", "REF-008", "REF-016", "REF-017"}
    assert _run("server@no-control", [_passing(*inside[1:])])[0] == "incomplete"
    outside_failed = TestResult(
        nodeid="t::f", outcome="failed", requirements=["REF-007"], violated="REF-007", message="boom"
    )
    assert _run("server@no-control", [_passing(*inside), outside_failed])[0] == "non-conformant"
    assert _run("server@control", [_passing(*inside)])[0] == "incomplete"  # control's scope is every server MUST


@pytest.mark.parametrize(
    "text",
    ["server", "server@", "@control", "core@control", "server@admin", "server@control+realtime", "server@realtime"],
)
def test_a_scope_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(ScopeError):
        parse_scope(text)


def test_a_bad_scope_is_a_usage_error_before_any_test(tmp_path: object) -> None:
    done = subprocess.run(
        [*warm_suite(), "--scope", "core@admin", "--reports", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 4, done.stdout[-2000:]
    assert "--scope 'core@admin'" in done.stdout + done.stderr
