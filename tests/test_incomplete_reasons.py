"""An incomplete run names each MUST it could not verify, why, and what would verify it, and the
declared scope it would pass: in results.json, report.md and report.html."""

from __future__ import annotations

from pathlib import Path

from conformance.common.scope import parse_scope
from conformance.report.incomplete import passing_scope, remedy
from conformance.report.results import TestResult
from conformance.report.writers import write_all
from tests.test_report_markdown import CATALOGUE, OBSERVABLE, _run


def test_an_incomplete_run_lists_each_gating_must_with_what_would_verify_it(tmp_path: Path) -> None:
    clocked = next(r for r in CATALOGUE if r.needs == ("clock",) and r.level == "MUST" and r.server_observable)
    verified = [rid for rid in OBSERVABLE if rid != clocked.id]
    skipped = TestResult(
        nodeid="t::expiry",
        outcome="skipped",
        requirements=[clocked.id],
        message="not verified: needs the control clock",
    )
    run = _run([TestResult(nodeid="t::pass", outcome="passed", requirements=verified, exercised=verified), skipped])
    assert run.verdict == "incomplete" and run.incomplete is not None
    missing = {m["id"]: m for m in run.incomplete["missing"]}
    assert list(missing) == [clocked.id]
    assert "--realtime" in missing[clocked.id]["to_verify"] and "[control]" in missing[clocked.id]["to_verify"]
    paths = write_all(run, tmp_path)
    md, page = paths["markdown"].read_text("utf-8"), paths["html"].read_text("utf-8")
    assert "## Why incomplete: 1 MUST(s)" in md and clocked.id in md.split("## Why incomplete")[1][:400]
    assert 'id="incomplete"' in page


def test_a_conformant_run_has_no_incomplete_member(tmp_path: Path) -> None:
    run = _run([TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE)])
    assert run.verdict == "conformant" and run.incomplete is None and "incomplete" not in run.to_dict()


def test_the_scope_a_run_would_pass_is_the_widest_whose_musts_it_verified() -> None:
    no_control = set(parse_scope("server@no-control").members(CATALOGUE))
    with_realtime = set(parse_scope("server@no-control+realtime").members(CATALOGUE))
    assert passing_scope(with_realtime, CATALOGUE) == "server@no-control+realtime"
    assert passing_scope(no_control, CATALOGUE) == "server@no-control"
    assert passing_scope(no_control - {sorted(no_control)[0]}, CATALOGUE) is None


def test_a_requirement_with_no_catalogued_need_takes_the_need_its_reason_names() -> None:
    free = next(r for r in CATALOGUE if not r.needs and r.level == "MUST" and r.server_observable)
    assert "kit_route" in remedy(free, "not verified: needs the suite's own corpus (document 'big')")
    assert remedy(free, "not verified: no check reached it").startswith("nothing more")
