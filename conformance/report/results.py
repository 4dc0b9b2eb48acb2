"""One results model for every writer: per test, per requirement, and the verdict."""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowledge_schemas import Catalogue, Requirement

VERDICT_EXIT = {"conformant": 0, "non-conformant": 1, "incomplete": 6}
RESULTS_SCHEMA = "knowledge-conformance.results.v1"
STATUSES = ("verified", "failed", "waived", "not_verified")


@dataclass
class TestResult:
    __test__ = False  # a record, not a pytest test class
    nodeid: str
    outcome: str  # passed | failed | skipped | error
    requirements: list[str]
    violated: str | None = None
    message: str = ""
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    duration: float = 0.0
    exercised: list[str] | None = None  # generated tests: the tagged IDs whose checks really ran
    sequence: list[str] | None = None  # generated stateful tests: the minimal failing sequence, replayable
    detail: str = ""  # the traceback behind a failure, for whoever debugs the suite itself


@dataclass
class Waiver:
    id: str
    justification: str
    expires: dt.date

    def active(self, today: dt.date) -> bool:
        return today <= self.expires


@dataclass
class RequirementResult:
    id: str
    title: str
    level: str
    surface: str
    area: str
    source: str
    quote: str
    status: str  # verified | failed | waived | not_verified
    reason: str
    tests: list[str] = field(default_factory=list)
    failures: list[TestResult] = field(default_factory=list)
    waiver: dict[str, str] | None = None


@dataclass(frozen=True)
class RunInfo:
    """What a run was: the facts every writer repeats, none of them secret."""

    suite_version: str
    catalogue_version: str
    target: str
    configuration: dict[str, Any]
    hypothesis: dict[str, Any]
    started: str
    duration_seconds: float
    requests: int
    fail_on: str


@dataclass
class RunResult:
    schema_version: str
    suite_version: str
    catalogue_version: str
    target: str
    configuration: dict[str, Any]
    hypothesis: dict[str, Any]
    started: str
    duration_seconds: float
    requests: int
    fail_on: str
    verdict: str
    summary: dict[str, int]
    summary_by_level: dict[str, dict[str, int]]
    warnings: list[str]
    requirements: list[RequirementResult]
    tests: list[TestResult]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_waivers(path: str | None) -> list[Waiver]:
    if not path:
        return []
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--waivers {path}: no such file")
    data = tomllib.loads(file.read_text("utf-8"))
    out = []
    for i, entry in enumerate(data.get("waiver", [])):
        missing = {"id", "justification", "expires"} - set(entry)
        if missing:
            raise ValueError(f"{path}: waiver {i + 1} lacks {sorted(missing)}")
        expires = entry["expires"]
        if not isinstance(expires, dt.date):
            raise ValueError(f"{path}: waiver {entry['id']} expires must be a TOML date (YYYY-MM-DD)")
        out.append(Waiver(str(entry["id"]), str(entry["justification"]), expires))
    return out


def _why_not(req: Requirement, skips: list[str]) -> str:
    if skips:
        return "; ".join(sorted(set(skips)))
    if req.via == "none":
        return "not observable on any wire: a statement about channels or intent outside this contract's messages"
    if req.surface in ("client", "host"):
        return "a client/host rule: not shown by a Core; the suite's reference client implements it and its unit tests check it"
    if req.surface in ("mcp", "tool"):
        return "an MCP/tool surface rule: this suite drives the Core HTTP surface only"
    return "no test of this suite verifies it"


def aggregate(catalogue: Catalogue, tests: list[TestResult], info: RunInfo, *, waivers: list[Waiver], today: dt.date) -> RunResult:
    by_req: dict[str, list[TestResult]] = {}
    for t in tests:
        # A check names the one requirement it saw broken; count it there even when the
        # test was written for another requirement, so no failure drops out of the matrix.
        named = [t.violated] if t.violated is not None and t.violated in catalogue else []
        for rid in dict.fromkeys([*t.requirements, *named]):
            by_req.setdefault(rid, []).append(t)
    active = {w.id: w for w in waivers if w.active(today)}
    warnings = [f"waiver for {w.id} expired on {w.expires.isoformat()} and no longer applies" for w in waivers if not w.active(today)]
    results: list[RequirementResult] = []
    for req in catalogue:
        mine = by_req.get(req.id, [])
        failed = [t for t in mine if t.outcome in ("failed", "error") and (t.violated in (None, req.id))]
        passed = [t for t in mine if t.outcome == "passed" and (t.exercised is None or req.id in t.exercised)]
        unreached = [t for t in mine if t.outcome == "passed" and t.exercised is not None and req.id not in t.exercised]
        skips = [t.message for t in mine if t.outcome == "skipped"]
        stopped = [t for t in mine if t.outcome in ("failed", "error") and t.violated not in (None, req.id)]
        if failed:
            status, reason = "failed", failed[0].message.splitlines()[0][:300] if failed[0].message else "test failed"
        elif passed:
            status, reason = "verified", f"{len(passed)} test(s) passed"
        elif unreached:
            status, reason = "not_verified", "the generated steps of its test never reached this rule; raise --stateful-examples"
        elif stopped:
            status, reason = "not_verified", f"its test stopped at a failure of {stopped[0].violated} before checking it"
        else:
            status, reason = "not_verified", _why_not(req, skips)
        waiver = None
        if status == "failed" and req.id in active:
            w = active[req.id]
            status, waiver = "waived", {"justification": w.justification, "expires": w.expires.isoformat()}
        results.append(RequirementResult(req.id, req.title, req.level, req.surface, req.area, req.source_label, req.quote,
                                         status, reason, [t.nodeid for t in mine], failed, waiver))
    core = [r for r in results if r.surface == "server" and r.level == "MUST"]
    observable = {q.id for q in catalogue if q.server_observable}
    must_failed = [r for r in core if r.status == "failed"]
    should_failed = [r for r in results if r.level == "SHOULD" and r.status == "failed"]
    warnings += [f"SHOULD {r.id} failed: {r.reason}" for r in should_failed]
    if must_failed or (info.fail_on == "should" and should_failed):
        verdict = "non-conformant"
    elif any(r.status == "not_verified" and r.id in observable for r in core):
        verdict = "incomplete"
    else:
        verdict = "conformant"
    summary = {s: sum(r.status == s for r in results) for s in STATUSES}
    by_level = {level: {s: sum(r.status == s and r.level == level for r in results) for s in STATUSES} for level in ("MUST", "SHOULD", "MAY")}
    summary["server_must_total"] = sum(1 for r in core if r.id in observable)
    summary["server_must_verified"] = sum(1 for r in core if r.id in observable and r.status == "verified")
    summary["tests"] = len(tests)
    summary["tests_failed"] = sum(t.outcome in ("failed", "error") for t in tests)
    return RunResult(RESULTS_SCHEMA, info.suite_version, info.catalogue_version, info.target, info.configuration, info.hypothesis,
                     info.started, round(info.duration_seconds, 3), info.requests, info.fail_on, verdict, summary, by_level,
                     warnings, results, tests)
