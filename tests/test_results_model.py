"""The verdict rules of the results model, on synthetic test results."""

from __future__ import annotations

import datetime as dt
from typing import Any

from conformance.report.results import RunInfo, TestResult, Waiver, aggregate
from knowledge_schemas import load_catalogue
from tests.handbuilt import run_info

TODAY = dt.date(2026, 11, 30)
INFO = run_info()
SERVER_MUSTS = [r.id for r in load_catalogue() if r.server_observable and r.level == "MUST"]


def passing(*ids: str) -> TestResult:
    return TestResult(nodeid="t::pass", outcome="passed", requirements=list(ids), exercised=list(ids))


def run(tests: list[TestResult], waivers: list[Waiver] | None = None, fail_on: str = "must") -> dict[str, str]:
    info = RunInfo(**{**INFO.__dict__, "fail_on": fail_on})
    result = aggregate(load_catalogue(), tests, info, waivers=waivers or [], today=TODAY)
    return {"verdict": result.verdict, **{r.id: r.status for r in result.requirements}}


def test_every_must_passing_is_conformant_and_one_missing_is_incomplete() -> None:
    assert run([passing(*SERVER_MUSTS)])["verdict"] == "conformant"
    assert run([passing(*SERVER_MUSTS[1:])])["verdict"] == "incomplete"


def test_a_failed_must_is_non_conformant_and_skips_never_verify() -> None:
    out = run(
        [
            passing(*SERVER_MUSTS[1:]),
            TestResult(
                nodeid="t::f",
                outcome="failed",
                requirements=[SERVER_MUSTS[0]],
                violated=SERVER_MUSTS[0],
                message="boom",
            ),
        ]
    )
    assert out["verdict"] == "non-conformant" and out[SERVER_MUSTS[0]] == "failed"
    out = run(
        [
            passing(*SERVER_MUSTS[1:]),
            TestResult(
                nodeid="t::s",
                outcome="skipped",
                requirements=[SERVER_MUSTS[0]],
                violated=None,
                message="not verified: needs control",
            ),
        ]
    )
    assert out["verdict"] == "incomplete" and out[SERVER_MUSTS[0]] == "not_verified"


def test_a_violation_counts_against_the_requirement_it_names_even_if_untagged() -> None:
    out = run(
        [
            passing(*SERVER_MUSTS),
            TestResult(
                nodeid="t::f", outcome="failed", requirements=["SRCH-006"], violated="WIRE-002", message="schema"
            ),
        ]
    )
    assert out["WIRE-002"] == "failed" and out["SRCH-006"] == "verified" and out["verdict"] == "non-conformant"


def test_generated_tests_verify_only_what_they_reached() -> None:
    generated = TestResult(
        nodeid="t::gen", outcome="passed", requirements=["REF-001", "REF-002"], exercised=["REF-002"]
    )
    out = run([generated])
    assert out["REF-002"] == "verified" and out["REF-001"] == "not_verified"


def test_a_passed_test_without_a_ledger_verifies_nothing() -> None:
    """Fail closed: a test whose checks were not recorded (no ledger kept) cannot verify its marks."""
    out = run([TestResult(nodeid="t::bare", outcome="passed", requirements=["REF-001"])])
    assert out["REF-001"] == "not_verified"


def test_waivers_apply_until_they_expire_and_should_gating() -> None:
    failing = [
        passing(*SERVER_MUSTS[1:]),
        TestResult(
            nodeid="t::f", outcome="failed", requirements=[SERVER_MUSTS[0]], violated=SERVER_MUSTS[0], message="boom"
        ),
    ]
    live = Waiver(id=SERVER_MUSTS[0], justification="fix in flight", expires=TODAY)
    expired = Waiver(id=SERVER_MUSTS[0], justification="fix in flight", expires=TODAY - dt.timedelta(days=1))
    assert run(failing, [live])[SERVER_MUSTS[0]] == "waived" and run(failing, [live])["verdict"] == "conformant"
    assert run(failing, [expired])["verdict"] == "non-conformant"
    should = [
        passing(*SERVER_MUSTS),
        TestResult(
            nodeid="t::s",
            outcome="failed",
            requirements=["SRCH-011"],
            violated="SRCH-011",
            message="ok instead of partial",
        ),
    ]
    assert run(should)["verdict"] == "conformant"
    assert run(should, fail_on="should")["verdict"] == "non-conformant"


def _surfaces_run(surfaces: list[dict[str, object]], tests: list[TestResult]) -> object:
    from conformance.clients.scope import UNSHOWABLE

    info = RunInfo(**{**INFO.__dict__, "surfaces": tuple(surfaces)})
    return aggregate(load_catalogue(), tests, info, waivers=[], today=TODAY, reasons=UNSHOWABLE)


HTTP = {"surface": "http", "label": "Core HTTP", "checked": True, "detail": "the Core API"}
MCP_BOTH = [
    HTTP,
    {"surface": "mcp-stdio", "label": "MCP stdio", "checked": True, "detail": "bundled simulator"},
    {"surface": "mcp-http", "label": "MCP streamable HTTP", "checked": True, "detail": "bundled simulator"},
]


def test_the_surfaces_line_and_not_verified_reasons_say_what_was_checked() -> None:
    from conformance.report.results import RunResult

    skipped = [
        HTTP,
        {"surface": "mcp", "label": "MCP", "checked": False, "detail": "MCP checks skipped: --mcp-target none"},
    ]
    run_ = _surfaces_run(skipped, [passing(*SERVER_MUSTS)])
    assert isinstance(run_, RunResult) and run_.verdict == "conformant"
    assert run_.surfaces_line == "Core HTTP; MCP not checked (MCP checks skipped: --mcp-target none)"
    reasons = {r.id: r.reason for r in run_.requirements}
    assert reasons["MCP-001"] == "MCP checks skipped: --mcp-target none"
    assert reasons["MCP-007"].startswith("not shown by a harness: the harness protocol has no MCP tool listing")
    assert reasons["NEG-001"].startswith(
        "client surface: a Core cannot show it; `knowledge-conformance client --harness CMD`"
    )
    assert not any("drives the Core HTTP surface only" in why for why in reasons.values())
    run_ = _surfaces_run(MCP_BOTH, [passing(*SERVER_MUSTS, "MCP-001")])
    assert isinstance(run_, RunResult) and run_.surfaces_line == "Core HTTP + MCP stdio + MCP streamable HTTP"


def test_mcp_surfaces_where_no_mcp_check_ran_are_not_called_checked() -> None:
    from conformance.report.results import RunResult

    run_ = _surfaces_run(
        MCP_BOTH,
        [
            passing(*SERVER_MUSTS),
            TestResult(
                nodeid="t::m", outcome="skipped", requirements=["MCP-001"], violated=None, message="not verified: x"
            ),
        ],
    )
    assert isinstance(run_, RunResult)
    assert [s["checked"] for s in run_.surfaces] == [True, False, False]
    assert run_.surfaces_line.startswith("Core HTTP; MCP stdio not checked (bundled simulator: no MCP check ran")
    assert {r.id: r.reason for r in run_.requirements}["MCP-001"] == "not verified: x"


CLIENT = [
    {"surface": "client", "label": "client harness", "checked": True, "detail": "sdk 1.0 (harness h 1.0)"},
    {
        "surface": "host",
        "label": "host harness",
        "checked": False,
        "detail": "the harness does not declare this surface",
    },
]


def test_a_client_run_gates_on_the_client_musts_it_was_given() -> None:
    """A client run's verdict counts the MUSTs of its gate (the harness's surfaces), never the Core's."""
    from conformance.clients.scope import gate

    ids = tuple(gate(load_catalogue(), ["client"]))
    assert "NEG-001" in ids and "HOST-001" not in ids and "MCP-007" not in ids and "CAP-001" not in ids

    def client_run(tests: list[TestResult]) -> Any:
        info = RunInfo(**{**INFO.__dict__, "surfaces": tuple(CLIENT), "gate": ids})
        return aggregate(load_catalogue(), tests, info, waivers=[], today=TODAY)

    assert client_run([passing(*ids)]).verdict == "conformant"
    short = client_run([passing(*ids[1:])])
    assert short.verdict == "incomplete" and short.must_label == "Client/host MUSTs"
    reasons = {r.id: r.reason for r in short.requirements}
    assert reasons["CAP-001"].startswith("a rule of the server surface: `knowledge-conformance run` checks it")
    assert (
        client_run(
            [
                passing(*ids),
                TestResult(nodeid="t::c", outcome="failed", requirements=["NEG-002"], violated="NEG-002", message="x"),
            ]
        ).verdict
        == "non-conformant"
    )
