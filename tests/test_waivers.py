"""Waivers and compare baselines that cannot go stale: a waived rule the run verified fails the gate
(exit 1) with one line naming the entry to remove, unless the entry says ``allow_passing = true``;
an unknown ID is exit 4; ``expires`` takes a TOML date or a quoted ISO date. The same for a
``compare`` baseline that still holds a fixed rule as failed."""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.report.results import TestResult, Waiver, aggregate, load_waivers
from knowledge_schemas import load_catalogue, load_registry
from knowledge_schemas._files import SCHEMA_DIR
from tests.handbuilt import run_info

CATALOGUE = load_catalogue()
TODAY = dt.date(2026, 11, 30)
INFO = run_info(target="handbuilt")
CLI = [sys.executable, "-m", "conformance.cli"]
EXAMPLE = SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json"


def _waivers(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "waivers.toml"
    file.write_text(text, "utf-8")
    return file


def _entry(rid: str = "SRCH-003", expires: str = "2999-01-01", extra: str = "") -> str:
    return f'[[waiver]]\nid = "{rid}"\njustification = "fix in flight"\nexpires = {expires}\n{extra}'


# ----------------------------------------------------------------- the file
@pytest.mark.parametrize(
    ("expires", "day"),
    [
        ("2027-03-01", dt.date(2027, 3, 1)),
        ('"2027-03-01"', dt.date(2027, 3, 1)),
        ('" 2027-03-01 "', dt.date(2027, 3, 1)),
        ("2027-03-01T10:00:00Z", dt.date(2027, 3, 1)),
    ],
    ids=["toml-date", "quoted-iso-date", "quoted-with-spaces", "toml-datetime"],
)
def test_expires_takes_a_toml_date_or_a_quoted_iso_date(tmp_path: Path, expires: str, day: dt.date) -> None:
    (waiver,) = load_waivers(str(_waivers(tmp_path, _entry(expires=expires))), CATALOGUE)
    assert waiver.expires == day and waiver.allow_passing is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_entry(expires='"soon"'), "must be a TOML date or a quoted ISO date"),
        (_entry(expires='"2027-02-30"'), "must be a TOML date or a quoted ISO date"),
        (_entry(expires='"20270301"'), "must be a TOML date or a quoted ISO date"),
        (_entry(expires='"2027-03-01T10:00:00"'), "must be a TOML date or a quoted ISO date"),
        (_entry(extra='allow_passing = "true"\n'), "allow_passing must be a TOML boolean"),
        (_entry() + _entry(), "waiver 2 names SRCH-003 again (waiver 1 already does)"),
        (_entry(extra="allow = true\n"), "unknown key(s) ['allow']"),
    ],
)
def test_a_malformed_entry_is_refused_naming_what_to_fix(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        load_waivers(str(_waivers(tmp_path, text)), CATALOGUE)
    assert expected in str(info.value)


def test_allow_passing_is_read(tmp_path: Path) -> None:
    (waiver,) = load_waivers(str(_waivers(tmp_path, _entry(extra="allow_passing = true\n"))), CATALOGUE)
    assert waiver.allow_passing is True and waiver.source == str(tmp_path / "waivers.toml")


def test_an_unknown_requirement_is_a_usage_error_before_any_test(tmp_path: Path) -> None:
    file = _waivers(tmp_path, _entry(rid="SRCH-999"))
    proc = subprocess.run(
        [*CLI, "run", "--waivers", str(file), "--report-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 4, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "'SRCH-999', which is not a requirement of the catalogue" in proc.stdout + proc.stderr
    assert not (tmp_path / "r" / "results.json").exists()


# ----------------------------------------------------------------- the verdict
def _verified(rid: str) -> TestResult:
    return TestResult(nodeid=f"t.py::test_{rid}", outcome="passed", requirements=[rid], exercised=[rid])


def _failed(rid: str) -> TestResult:
    return TestResult(nodeid=f"t.py::test_{rid}", outcome="failed", requirements=[rid], violated=rid, message="broken")


def _every_server_must_verified() -> list[TestResult]:
    return [_verified(r.id) for r in CATALOGUE if r.server_observable]


def test_a_waiver_of_a_verified_rule_is_stale_and_fails_the_gate() -> None:
    waiver = Waiver(id="SRCH-003", justification="fix in flight", expires=dt.date(2999, 1, 1), source="ci/waivers.toml")
    run = aggregate(CATALOGUE, _every_server_must_verified(), INFO, waivers=[waiver], today=TODAY)
    assert run.verdict == "non-conformant"
    assert run.warnings[0] == (
        "stale waiver: SRCH-003 was verified in this run; remove its [[waiver]] entry from ci/waivers.toml "
        "(or add allow_passing = true to it)"
    )
    (row,) = [r for r in run.requirements if r.id == "SRCH-003"]
    assert row.status == "verified" and row.waiver is not None and row.waiver["stale"] is True
    assert load_registry().errors("results", run.to_dict()) == []


def test_allow_passing_keeps_a_verified_rule_from_failing_the_gate() -> None:
    waiver = Waiver(id="SRCH-003", justification="flaky upstream", expires=dt.date(2999, 1, 1), allow_passing=True)
    run = aggregate(CATALOGUE, _every_server_must_verified(), INFO, waivers=[waiver], today=TODAY)
    assert run.verdict == "conformant" and not any("stale" in w for w in run.warnings)
    (row,) = [r for r in run.requirements if r.id == "SRCH-003"]
    assert row.waiver is not None and row.waiver.get("allow_passing") is True and "stale" not in row.waiver
    assert load_registry().errors("results", run.to_dict()) == []


def test_a_waiver_still_waives_a_failure_and_an_expired_one_only_warns() -> None:
    tests = [t for t in _every_server_must_verified() if t.requirements != ["SRCH-003"]]
    live = Waiver(id="SRCH-003", justification="fix in flight", expires=dt.date(2999, 1, 1))
    run = aggregate(CATALOGUE, [*tests, _failed("SRCH-003")], INFO, waivers=[live], today=TODAY)
    assert run.verdict == "conformant" and {r.id: r.status for r in run.requirements}["SRCH-003"] == "waived"
    expired = Waiver(id="CAP-001", justification="was fixed", expires=dt.date(2020, 1, 1))
    run = aggregate(CATALOGUE, _every_server_must_verified(), INFO, waivers=[expired], today=TODAY)
    assert run.verdict == "conformant"
    assert run.warnings == ["waiver for CAP-001 expired on 2020-01-01 and no longer applies"]


def test_a_waiver_of_a_rule_not_verified_is_not_stale() -> None:
    """Nothing showed the rule fixed (deselected, skipped): the entry may still be needed."""
    tests = [t for t in _every_server_must_verified() if t.requirements != ["SRCH-003"]]
    run = aggregate(
        CATALOGUE,
        tests,
        INFO,
        waivers=[Waiver(id="SRCH-003", justification="x", expires=dt.date(2999, 1, 1))],
        today=TODAY,
    )
    assert run.verdict == "incomplete" and not any("stale" in w for w in run.warnings)


def _run(tmp_path: Path, waivers: Path, *extra: str) -> tuple[int, str, dict[str, Any]]:
    proc = subprocess.run(
        [
            *CLI,
            "run",
            "--requirement",
            "SRCH-003",
            "--waivers",
            str(waivers),
            "--report-dir",
            str(tmp_path / "r"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    results = json.loads((tmp_path / "r" / "results.json").read_text("utf-8"))
    return proc.returncode, proc.stdout + proc.stderr, results


def test_a_run_against_the_simulator_fails_on_a_stale_waiver_naming_it(tmp_path: Path) -> None:
    """The bundled simulator passes SRCH-003: its waiver is stale, the run exits 1 with one line."""
    file = _waivers(tmp_path, _entry(expires='"2999-01-01"'))
    code, out, results = _run(tmp_path, file)
    assert code == 1, out[-2000:]
    lines = [line for line in out.splitlines() if "stale waiver" in line]
    assert lines == [
        f"  warning: stale waiver: SRCH-003 was verified in this run; remove its [[waiver]] entry from {file} (or add allow_passing = true to it)"
    ], out[-2000:]
    assert results["verdict"] == "non-conformant"
    assert "stale waiver: SRCH-003" in (tmp_path / "r" / "report.md").read_text("utf-8")


def test_a_run_keeps_an_allow_passing_waiver_of_a_verified_rule(tmp_path: Path) -> None:
    file = _waivers(tmp_path, _entry(extra="allow_passing = true\n"))
    code, out, results = _run(tmp_path, file)
    assert results["verdict"] == "incomplete" and code == 6, out[
        -2000:
    ]  # the other MUSTs were deselected: incomplete, not failed
    assert "stale waiver" not in out


# ----------------------------------------------------------------- compare
def _results(tmp_path: Path, name: str, statuses: dict[str, str]) -> str:
    data = json.loads(EXAMPLE.read_text("utf-8"))
    template = data["requirements"][0]
    rows = []
    for rid, status in statuses.items():
        row = copy.deepcopy(template) | {"id": rid, "status": status}
        if status != "failed":
            row["failures"] = []
        if status == "waived":
            row["waiver"] = {"justification": "x", "expires": "2999-01-01"}
        rows.append(row)
    data["requirements"] = rows
    assert load_registry().errors("results", data) == []
    path = tmp_path / name
    path.write_text(json.dumps(data), "utf-8")
    return str(path)


@pytest.mark.parametrize("was", ["failed", "waived"])
def test_compare_fails_on_a_stale_baseline_with_one_line(
    tmp_path: Path, was: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _results(tmp_path, "baseline.json", {"TURN-007": was, "CAP-001": "verified"})
    new = _results(tmp_path, "new.json", {"TURN-007": "verified", "CAP-001": "verified"})
    assert main(["compare", old, new]) == 0  # shown, gating nothing
    capsys.readouterr()
    assert main(["compare", old, new, "--fail-on-new-failures"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"knowledge-conformance: stale baseline: TURN-007 failed in {old} and is verified now; "
        f"store {new} as the baseline (or pass --allow-fixed)\n"
    )
    assert main(["compare", old, new, "--fail-on-new-failures", "--allow-fixed"]) == 0


def test_compare_still_gates_a_regression_with_allow_fixed(tmp_path: Path) -> None:
    old = _results(tmp_path, "baseline.json", {"TURN-007": "failed", "CAP-001": "verified"})
    new = _results(tmp_path, "new.json", {"TURN-007": "verified", "CAP-001": "failed"})
    assert main(["compare", old, new, "--fail-on-new-failures", "--allow-fixed"]) == 1
    same = _results(tmp_path, "same.json", {"TURN-007": "failed", "CAP-001": "verified"})
    assert main(["compare", old, same, "--fail-on-new-failures"]) == 0
