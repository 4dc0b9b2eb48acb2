"""report.md as a pull-request comment, on hand-built results: verdict, failures first, the judged
request as curl naming its identity, counts explained, the matrix with titles folded, the scope."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conformance.common.secrets import SECRETS
from conformance.common.transport import IDENTITIES, Exchange, Recorder, judged, judged_exchange
from conformance.report.results import RunResult, TestResult, aggregate
from conformance.report.writers import TITLE_CUT, short, write_all
from knowledge_schemas import load_catalogue, load_registry
from tests.handbuilt import run_info

TODAY = dt.date(2026, 11, 30)
INFO = run_info(target="bundled simulator (in-process)", run_id="handbuilt")
CATALOGUE = load_catalogue()
OBSERVABLE = [r.id for r in CATALOGUE if r.server_observable]
MUSTS = sum(1 for r in CATALOGUE if r.server_observable and r.level == "MUST")
BASE = "http://core.test"
AUTH = {"header": "Authorization", "scheme": "Bearer"}


def _exchange(operation: str, identity: str | None, body: str, *, judged: bool) -> dict[str, Any]:
    path = {
        "search": "/agent-api/v1/workspaces/acme/knowledge/search",
        "read": "/agent-api/v1/workspaces/acme/knowledge/read",
    }
    e = Exchange("POST", path[operation], body, 200, '{"status":"ok"}', identity=identity, operation=operation)
    return e.evidence(BASE, AUTH, judged=judged)


def _run(tests: list[TestResult], scope: dict[str, Any] | None = None) -> RunResult:
    run = aggregate(CATALOGUE, tests, INFO, waivers=[], today=TODAY)
    return dataclasses.replace(run, scope=scope)


def _write(run: RunResult, tmp_path: Path) -> dict[str, str]:
    paths = write_all(run, tmp_path)
    data = json.loads(paths["json"].read_text("utf-8"))
    assert load_registry().errors("results", data) == []
    return {kind: path.read_text("utf-8") for kind, path in paths.items()}


def _failing() -> list[TestResult]:
    """Every server rule passes but SRCH-003 (a MUST) and SRCH-011 (a SHOULD); the SRCH-003 test's
    last requests are reads, while its check judged the search before them."""
    search = _exchange("search", "other_route", '{"query":"judged-search"}', judged=True)
    reads = [_exchange("read", "primary", f'{{"ref":"later-read-{i}"}}', judged=False) for i in range(3)]
    return [
        TestResult(
            nodeid="t::pass",
            outcome="passed",
            requirements=[r for r in OBSERVABLE if r not in ("SRCH-003", "SRCH-011")],
            exercised=[r for r in OBSERVABLE if r not in ("SRCH-003", "SRCH-011")],
        ),
        TestResult(
            nodeid="t::should",
            outcome="failed",
            requirements=["SRCH-011"],
            violated="SRCH-011",
            message="ContractViolation: [SRCH-011] ok instead of partial",
        ),
        TestResult(
            nodeid="t::hints",
            outcome="failed",
            requirements=["SRCH-006"],
            violated="SRCH-003",
            message="ContractViolation: [SRCH-003] search returned 4 hints, at most 3 allowed",
            exchanges=[search, *reads],
        ),
    ]


def test_a_clean_report_is_short_with_its_counts_explained_and_the_matrix_folded(tmp_path: Path) -> None:
    md = _write(
        _run([TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE)]), tmp_path
    )["markdown"]
    assert len(md.encode("utf-8")) < 8 * 1024
    head, _, matrix = md.partition("<details><summary>Requirement matrix")
    assert f"**Verdict: CONFORMANT**: {MUSTS} of {MUSTS} server MUSTs verified" in head
    assert "## Failures" not in md
    # Every count says what it counts where it appears.
    verdict_count = next(line for line in head.splitlines() if line.startswith("- Server MUSTs verified:"))
    assert "the verdict is incomplete while one of these is not verified" in verdict_count
    assert f"all {len(CATALOGUE)} requirements of every surface" in head
    assert "test cases, several per requirement" in head
    # The matrix: folded, every requirement with its title (cut at a word).
    assert matrix.rstrip().endswith("</details>")
    for req in CATALOGUE:
        assert f"{req.id} {short(req.title, TITLE_CUT)}" in matrix, req.id
    assert "Not verified, by reason" in matrix and "client surface: a Core cannot show it" in matrix


def test_failures_come_first_with_their_title_and_the_judged_request_naming_its_identity(tmp_path: Path) -> None:
    reports = _write(_run(_failing()), tmp_path)
    md = reports["markdown"]
    assert md.startswith("# Knowledge contract conformance report\n\n**Verdict: NON-CONFORMANT**")
    must, should = md.index("### SRCH-003 (MUST) At most three hints"), md.index("### SRCH-011 (SHOULD)")
    assert md.index("## Failures") < must < should < md.index("## Counts") < md.index("<details>")
    failure = md[must:should]
    assert "`POST /agent-api/v1/workspaces/acme/knowledge/search` as identity `other_route`" in failure
    assert "# identity: other_route\ncurl -sS -X POST" in failure
    assert '-H "Authorization: Bearer $CORE_TOKEN_OTHER_ROUTE"' in failure and "judged-search" in failure
    assert "later-read" not in failure  # the test's last request is not the one its check judged
    html = reports["html"]
    assert "Failing request: POST /agent-api/v1/workspaces/acme/knowledge/search as identity other_route" in html
    matrix = md[md.index("<details><summary>Requirement matrix") :]
    assert "**Failed (2)**" in matrix and matrix.index("**Failed (2)**") < matrix.index("**Verified, by area")


def test_a_declared_scope_gives_the_verdict_line_and_lists_what_is_outside_it(tmp_path: Path) -> None:
    outside = ["SK-001", "HOST-001", "MCP-002"]
    scope = {
        "declared": True,
        "label": "server@no-control",
        "surfaces": ["server"],
        "access": ["no-control"],
        "must_total": 41,
        "must_verified": 41,
        "outside": outside,
    }
    reports = _write(
        _run([TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE)], scope),
        tmp_path,
    )
    md = reports["markdown"]
    assert (
        "**Verdict: CONFORMANT within scope server@no-control: 41 of 41 MUSTs of the scope verified; "
        "3 outside it, listed below**"
    ) in md
    folded = md[md.index("<details><summary>Outside scope server@no-control: 3 requirements") :]
    folded = folded[: folded.index("</details>")]
    for rid in outside:
        assert f"- {rid} {CATALOGUE[rid].title}" in folded
    matrix = md[md.index("<details><summary>Requirement matrix") :]
    assert "SK-001 " not in matrix and "CAP-001 " in matrix  # the matrix holds the scope's rows
    assert json.loads(reports["json"])["scope"] == scope
    assert (
        '<p id="scope">Scope server@no-control' in reports["html"]
        and "within scope server@no-control" in reports["html"]
    )
    props = {p.get("name"): p.get("value") for p in ET.fromstring(reports["junit"]).iter("property")}
    assert props["scope"] == "server@no-control" and props["scope_outside"] == "SK-001 HOST-001 MCP-002"


def test_without_a_declared_scope_the_reports_are_as_before(tmp_path: Path) -> None:
    tests = [TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE)]
    plain = _write(_run(tests), tmp_path / "plain")
    undeclared = {
        "declared": False,
        "label": "",
        "surfaces": [],
        "access": [],
        "must_total": 0,
        "must_verified": 0,
        "outside": [],
    }
    other = _write(_run(tests, undeclared), tmp_path / "undeclared")
    assert "scope" not in json.loads(plain["json"])  # optional: absent, never null
    assert json.loads(other["json"])["scope"] == undeclared
    for kind in ("markdown", "html", "junit"):
        assert plain[kind] == other[kind], kind
    assert "within scope" not in plain["markdown"] and "Outside scope" not in plain["markdown"]


def test_the_judged_exchange_is_the_response_a_check_read_last_of_the_rules_operation() -> None:
    recorder = Recorder(paths={"search": "/w/{route}/search", "read": "/w/{route}/read"})
    IDENTITIES.name("tok-primary-123456", "primary")

    class Response:  # what Recorder.record reads of an httpx.Response
        def __init__(self, path: str, token: str | None) -> None:
            import httpx

            headers = {"Authorization": f"Bearer {token}"} if token else {}
            self.request = httpx.Request("POST", f"http://core.test{path}", headers=headers, content=b"{}")
            self.status_code, self.content = 200, b"{}"
            self.extensions: dict[str, Any] = {}

    first, second, read = (
        Response("/w/acme/search", "tok-primary-123456"),
        Response("/w/acme/search", None),
        Response("/w/acme/read", "made-up-token"),
    )
    for response in (first, second, read):
        recorder.record(response)  # type: ignore[arg-type]  # a stand-in with the members record reads
    search1, search2, last = recorder.current
    assert (search1.identity, search2.identity, last.identity) == ("primary", None, "unregistered")
    assert [e.operation for e in recorder.current] == ["search", "search", "read"]
    assert judged_exchange(recorder.current, "search") is search2  # no check read any: the operation's last
    judged(first)
    assert judged_exchange(recorder.current, "search") is search1  # the one a check read
    assert judged_exchange(recorder.current, "read") is last and judged_exchange(recorder.current, "mcp") is None
    assert "# identity: none (sent without a credential)\ncurl" in search2.exchange.curl(
        BASE
    ) and "Authorization" not in search2.exchange.curl(BASE)
    assert '"Authorization: Bearer $CORE_TOKEN_PRIMARY"' in search1.exchange.curl(
        BASE
    ) and "tok-primary" not in search1.exchange.curl(BASE)
    evidence = recorder.evidence(BASE, AUTH, "search", keep=1)
    assert [e["judged"] for e in evidence] == [True] and evidence[0]["request_body"] == "{}"


def test_a_failed_mcp_rule_is_counted_beside_the_full_server_count(tmp_path: Path) -> None:
    """Every server MUST verified and one MCP MUST failed: NON-CONFORMANT, and the verdict's line
    says why (an MCP count with its failure), never only "61/61"."""
    mcp = [r.id for r in CATALOGUE if r.surface == "mcp" and r.level == "MUST" and r.via != "none"]
    tests = [
        TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE),
        TestResult(
            nodeid="t::mcp",
            outcome="failed",
            requirements=[mcp[0]],
            violated=mcp[0],
            message=f"ContractViolation: [{mcp[0]}] broken",
        ),
    ]
    run = _run(tests)
    assert run.verdict == "non-conformant"
    assert run.summary["server_must_verified"] == run.summary["server_must_total"] == MUSTS
    assert run.summary["mcp_must_failed"] == 1 and run.summary["mcp_must_total"] == len(mcp)
    assert run.other_musts_line == f"; MCP MUSTs verified 0/{len(mcp)} (1 failed)"
    md = _write(run, tmp_path)["markdown"]
    assert f"- Beside them: MCP MUSTs verified 0/{len(mcp)} (1 failed)" in md


def test_a_failure_judged_on_an_mcp_answer_shows_its_last_tool_call(tmp_path: Path) -> None:
    """No HTTP request reproduces an MCP failure: report.md names the test's last tool call
    (transport, endpoint, tool, arguments, answer) and report.html all of them."""
    from conformance.mcp import evidence

    mcp = next(r.id for r in CATALOGUE if r.surface == "mcp" and r.level == "MUST" and r.via != "none")
    evidence.clear()
    SECRETS.add("kc-tool-call-secret-4711")  # a token the model was handed, and one in a URL: never kept
    evidence.record(
        "http",
        "http://core.test/mcp?token=kc-tool-call-secret-4711",
        "read_business_knowledge",
        {"ref": f"ref-{evidence.KEEP + 1}", "token": "kc-tool-call-secret-4711"},
        {"is_error": True, "protocol_error": None, "text": '{"dispatch": "not_dispatched"}'},
    )
    assert "kc-tool-call-secret-4711" not in json.dumps(evidence.calls())
    evidence.clear()
    for n in range(evidence.KEEP + 2):  # the ledger keeps only the last few
        evidence.record(
            "stdio",
            "mcp-server --route acme",
            "read_business_knowledge",
            {"ref": f"ref-{n}", "max_bytes": 4096},
            {"is_error": True, "protocol_error": None, "text": '{"dispatch": "not_dispatched"}'},
        )
    calls = evidence.calls()
    evidence.clear()
    assert len(calls) == evidence.KEEP and json.loads(calls[-1]["arguments"])["ref"] == f"ref-{evidence.KEEP + 1}"
    failed = TestResult.for_rule("t::mcp", mcp, "failed", f"ContractViolation: [{mcp}] broken", tool_calls=calls)
    reports = _write(
        _run([TestResult(nodeid="t::pass", outcome="passed", requirements=OBSERVABLE, exercised=OBSERVABLE), failed]),
        tmp_path,
    )
    md = reports["markdown"]
    assert "The test's last MCP tool call: `read_business_knowledge` over stdio (`mcp-server --route acme`)" in md
    assert '"ref": "ref-5"' in md and '→ tool error: `{"dispatch": "not_dispatched"}`' in md
    assert f"(the {evidence.KEEP - 1} before it are in `results.json`)" in md
    assert reports["html"].count("read_business_knowledge over stdio") == evidence.KEEP


@pytest.mark.parametrize("verdict", ["interrupted", "incomplete", "error"])
def test_junit_shows_a_verdict_no_failed_test_shows_as_an_error(verdict: str, tmp_path: Path) -> None:
    """An interrupted, incomplete or unjudged run whose tests all passed: junit.xml counts one
    more case, in error, naming the verdict, so a CI's test view is not green where the exit is not 0."""
    rid = next(r for r in OBSERVABLE if r.startswith("READ"))
    run = dataclasses.replace(_run([TestResult.for_rule("t::read", rid, "passed", "")]), verdict=verdict)
    suite = ET.fromstring(_write(run, tmp_path)["junit"])
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("2", "1", "0")
    error = suite.find("testcase[@name='verdict']/error")
    assert error is not None and error.get("message", "").startswith(f"verdict {verdict}: ")


def test_junit_adds_no_case_to_a_conformant_or_non_conformant_run(tmp_path: Path) -> None:
    rid = next(r for r in OBSERVABLE if r.startswith("READ"))
    for verdict in ("conformant", "non-conformant"):
        run = dataclasses.replace(_run([TestResult.for_rule("t::read", rid, "passed", "")]), verdict=verdict)
        suite = ET.fromstring(_write(run, tmp_path / verdict)["junit"])
        assert suite.get("tests") == "1" and suite.find("testcase[@name='verdict']") is None
