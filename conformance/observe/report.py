"""Observation as the suite's results model, written by its writers, with the scope "observed
traffic": each rule held (how many times), violated (the exchange, scrubbed, and its curl line)
or not observed, and counts of the exchanges and sessions the traffic had.

Held is never verified: a held rule is *not verified* in results.json, with "held N times" as its
reason; only the active suite verifies. The verdict follows the suite's exit codes: a violated
MUST (or any rule under ``--fail-on should``) is non-conformant (1); a judge that broke is an
error (7, the suite could not judge); traffic with nothing of the contract, or with exchanges
dropped unjudged, is incomplete (6); otherwise conformant within the scope (0)."""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.common.secrets import SECRETS
from conformance.observe.coverage import JUDGED
from conformance.observe.markdown import render
from conformance.observe.tally import Tally
from conformance.report.results import (
    RESULTS_SCHEMA,
    STATUSES,
    VERDICT_EXIT,
    RequirementResult,
    RunResult,
    TestResult,
    count_tests,
    counts_by_level,
)
from conformance.report.writers import FILES, write_all
from knowledge_schemas import load_catalogue
from knowledge_schemas.catalogue import Catalogue, catalogue_version

SCOPE = "observed traffic"
SURFACES = ("server", "client", "host")
NODE = "observed-traffic::{}"


@dataclass(frozen=True)
class Source:
    """What was observed: ``proxy`` in front of ``where`` (the upstream), or a recording at ``where``."""

    kind: str
    where: str
    started: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    duration: float = 0.0


def _reason(rid: str, tally: Tally) -> str:
    if rid in JUDGED and tally.held[rid]:
        return (
            f"held: seen {tally.held[rid]} time(s) in the observed traffic without a violation "
            "(passive observation: not verified)"
        )
    if rid in JUDGED:
        return f"not observed: the traffic had no {JUDGED[rid]}"
    return "not judged by observe: passive observation cannot show it (an active run can)"


def _tests(tally: Tally, catalogue: Catalogue) -> list[TestResult]:
    out = []
    for rid in JUDGED:
        if rid not in catalogue:
            continue
        node = NODE.format(rid)
        found = tally.findings.get(rid, [])
        if found:
            out += [
                TestResult.for_rule(node, rid, "failed", f.message, exchanges=[f.exchange] if f.exchange else [])
                for f in found
            ]
        elif tally.held[rid]:
            out.append(TestResult.for_rule(node, rid, "passed", f"held {tally.held[rid]} time(s)", exercised=[]))
        else:
            out.append(TestResult.for_rule(node, rid, "skipped", _reason(rid, tally)))
    return out


def _requirements(tally: Tally, catalogue: Catalogue, tests: list[TestResult]) -> list[RequirementResult]:
    rows = []
    for req in catalogue:
        failed = [t for t in tests if t.violated == req.id]
        mine = [t.nodeid for t in tests if req.id in t.requirements][:1]
        status = "failed" if failed else "not_verified"
        reason = failed[0].message.splitlines()[0][:300] if failed else _reason(req.id, tally)
        rows.append(RequirementResult.of(req, status, reason, mine, failed))
    return rows


def _verdict(tally: Tally, rows: list[RequirementResult], fail_on: str) -> str:
    if tally.error_count:
        return "error"
    if any(r.status == "failed" and (r.level == "MUST" or fail_on == "should") for r in rows):
        return "non-conformant"
    if tally.judged == 0 or sum(tally.unjudged.values()) > sum(
        n for why, n in tally.unjudged.items() if why.startswith(("not a request", "the upstream gave"))
    ):
        return "incomplete"
    return "conformant"


def dropped(tally: Tally) -> dict[str, int]:
    """Exchanges no judge saw, by why (the others left alone are not the contract's)."""
    return {why: n for why, n in tally.unjudged.items() if not why.startswith(("not a request", "the upstream gave"))}


def build(tally: Tally, source: Source, *, sessions: int, fail_on: str = "must") -> RunResult:
    catalogue = load_catalogue()
    tests = _tests(tally, catalogue)
    rows = _requirements(tally, catalogue, tests)
    verdict = _verdict(tally, rows, fail_on)
    gate = [r for r in rows if r.level == "MUST" and r.id in JUDGED]
    outside = [
        r.id
        for r in catalogue
        if r.level == "MUST" and r.surface in SURFACES and r.via != "none" and r.id not in JUDGED
    ]
    never = [rid for rid in JUDGED if rid in catalogue and not tally.held[rid] and rid not in tally.findings]
    lost = dropped(tally)
    warnings = [
        f"{SCOPE}: {tally.exchanges} exchange(s), {tally.judged} of the contract judged, {sum(lost.values())} "
        f"dropped unjudged, {sessions} session(s) (distinct credentials); held means no violation was seen in "
        "this traffic, never that a rule is verified"
    ]
    warnings += [f"{n} exchange(s) not judged: {why}" for why, n in lost.items()]
    warnings += [f"judging broke: {message}" for message in tally.errors]
    if never:
        warnings.append(f"never exercised by this traffic ({len(never)}): {' '.join(never)}")
    summary = {s: sum(r.status == s for r in rows) for s in STATUSES}
    summary.update(count_tests(tests))
    summary.update(
        server_must_total=len(gate),
        server_must_verified=0,
        observed_exchanges=tally.exchanges,
        observed_judged=tally.judged,
        observed_dropped=sum(lost.values()),
        observed_sessions=sessions,
        observed_judge_errors=tally.error_count,
        rules_held=sum(1 for rid in JUDGED if tally.held[rid] and rid not in tally.findings),
        rules_violated=len(tally.findings),
        rules_not_observed=len(never),
    )
    by_level = counts_by_level(rows)
    return RunResult(
        schema_version=RESULTS_SCHEMA,
        run_id=secrets.token_hex(4),
        suite_version=__version__,
        catalogue_version=catalogue_version(),
        target=f"{SCOPE} of {source.where}",
        configuration={
            "observe": {
                "source": source.kind,
                "where": source.where,
                "exchanges": tally.exchanges,
                "judged": tally.judged,
                "sessions": sessions,
                "dropped": lost,
                "held": {rid: tally.held[rid] for rid in JUDGED if tally.held[rid]},
                "violated": dict(tally.violated),
                "not_observed": never,
            }
        },
        hypothesis={"derandomize": False, "seed": None},
        started=source.started,
        duration_seconds=round(source.duration, 3),
        requests=tally.exchanges,
        fail_on=fail_on,
        verdict=verdict,
        summary=summary,
        summary_by_level=by_level,
        warnings=warnings,
        requirements=rows,
        tests=tests,
        surfaces=[
            {
                "surface": "http",
                "label": "observed traffic (Core HTTP, the Core's and the client's rules)",
                "checked": tally.judged > 0,
                "detail": f"{tally.judged} exchange(s) of the contract judged",
            }
        ],
        scope={
            "declared": True,
            "label": SCOPE,
            "surfaces": list(SURFACES),
            "access": ["passive"],
            "must_total": len(gate),
            "must_verified": 0,
            "outside": outside,
        },
        incomplete={"missing": [], "scope": None} if verdict == "incomplete" else None,
    )


def write(run: RunResult, directory: Path) -> dict[str, Path]:
    """Every report of the suite, report.md as observation reads (a verdict per rule)."""
    paths = write_all(run, directory, SECRETS.text)
    render(run, paths["markdown"])
    return paths


def exit_code(run: RunResult) -> int:
    return VERDICT_EXIT[run.verdict]


def rule_verdicts(run: RunResult | dict[str, Any]) -> dict[str, str]:
    """Per rule observe judges: ``held``, ``violated`` or ``not observed`` (for comparing two observations)."""
    data = run.to_dict() if isinstance(run, RunResult) else run
    held = data["configuration"]["observe"]["held"]
    out = {}
    for row in data["requirements"]:
        if row["id"] not in JUDGED:
            continue
        out[row["id"]] = "violated" if row["status"] == "failed" else "held" if row["id"] in held else "not observed"
    return out


__all__ = ["FILES", "Source", "build", "exit_code", "rule_verdicts", "write"]
