"""One results model for every writer: per test, per requirement, and the verdict."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from conformance.common.exits import VERDICT_EXIT as VERDICT_EXIT  # re-exported: the exit code of each verdict
from conformance.common.scope import Scope
from conformance.report.incomplete import explain, passing_scope
from knowledge_schemas import Catalogue, Requirement

RESULTS_SCHEMA = "knowledge-conformance.results.v1"
STATUSES = ("verified", "failed", "waived", "not_verified")


@dataclass(kw_only=True)
class TestResult:
    """One test's result, as every writer shows it."""

    __test__ = False  # a record, not a pytest test class
    nodeid: str
    outcome: str  # passed | failed (the target broke a check) | skipped | error (the harness could not judge)
    requirements: list[str]
    violated: str | None = None
    message: str = ""
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    duration: float = 0.0
    exercised: list[str] | None = (
        None  # the rules whose checks passed in the test (its ledger); None: not kept, none verified
    )
    sequence: list[str] | None = None  # generated stateful tests: the minimal failing sequence, replayable
    detail: str = ""  # the traceback behind a failure, for whoever debugs the suite itself
    tool_calls: list[dict[str, Any]] = field(
        default_factory=list
    )  # a failure's last MCP tool calls (conformance.mcp.evidence)
    timings: list[dict[str, Any]] = field(
        default_factory=list
    )  # expiry probes' age intervals (conformance.server.expiry)

    @classmethod
    def for_rule(cls, nodeid: str, rid: str, outcome: str, message: str, **more: Any) -> TestResult:
        """A rule that is its own test (observe's and load's rules): a failure names it violated."""
        violated = rid if outcome == "failed" else None
        return cls(nodeid=nodeid, outcome=outcome, requirements=[rid], violated=violated, message=message, **more)


@dataclass(kw_only=True)
class Waiver:
    """One ``[[waiver]]`` entry: a known deviation kept from failing the gate until ``expires``.

    A waived requirement that is verified in a run makes the entry stale, and a stale entry fails
    the gate (a fixed bug must not stay waived, ready to come back unseen), unless the entry says
    ``allow_passing = true`` (a deviation the target shows only some of the time)."""

    id: str
    justification: str
    expires: dt.date
    allow_passing: bool = False
    source: str = "the waivers file"  # the file it came from, for the line that says what to remove

    def active(self, today: dt.date) -> bool:
        return today <= self.expires

    def stale_line(self) -> str:
        """The one line a stale entry fails the gate with: which entry to remove, and where."""
        return (
            f"stale waiver: {self.id} was verified in this run; remove its [[waiver]] entry from {self.source} "
            "(or add allow_passing = true to it)"
        )


@dataclass(kw_only=True)
class RequirementResult:
    """One requirement's row: what the catalogue says of it, and what the run found."""

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
    waiver: dict[str, Any] | None = None  # justification, expires; stale: true when it waives a verified rule

    @classmethod
    def of(
        cls,
        req: Requirement,
        status: str,
        reason: str,
        tests: list[str],
        failures: list[TestResult],
        waiver: dict[str, Any] | None = None,
    ) -> RequirementResult:
        """A catalogue requirement's row: what the catalogue says of it, and what the run found."""
        return cls(
            id=req.id,
            title=req.title,
            level=req.level,
            surface=req.surface,
            area=req.area,
            source=req.source_label,
            quote=req.quote,
            status=status,
            reason=reason,
            tests=tests,
            failures=failures,
            waiver=waiver,
        )


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What a run was, as results.json states it: the facts every writer repeats, none of them secret.
    Both what a run is set up as (``RunInfo``) and what it found (``RunResult``) carry them."""

    run_id: str = "local"
    suite_version: str
    catalogue_version: str
    target: str
    configuration: dict[str, Any]
    hypothesis: dict[str, Any]
    started: str
    duration_seconds: float
    requests: int
    fail_on: str

    def facts(self) -> dict[str, Any]:
        """These facts alone, by name, to hand on to the run's result."""
        return {f.name: getattr(self, f.name) for f in fields(RunFacts)}


@dataclass(frozen=True, kw_only=True)
class RunInfo(RunFacts):
    """A run as it was set up: its facts, and what the verdict is given on."""

    interrupted: bool = False
    surfaces: tuple[
        dict[str, Any], ...
    ] = ()  # what the run was set up to check (conformance.mcp.endpoints.planned_surfaces)
    gate: tuple[str, ...] | None = (
        None  # a client run: the MUSTs whose not being verified makes it incomplete (default: the Core's)
    )
    scope: Scope | None = None  # a declared scope (--scope): the verdict is given within it


@dataclass(frozen=True, kw_only=True)
class RunResult(RunFacts):
    """A run's facts, what it found per requirement and per test, and its verdict: results.json."""

    schema_version: str = RESULTS_SCHEMA
    verdict: str
    summary: dict[str, int]
    summary_by_level: dict[str, dict[str, int]]
    warnings: list[str]
    requirements: list[RequirementResult]
    tests: list[TestResult]
    surfaces: list[dict[str, Any]] = field(default_factory=list)
    scope: dict[str, Any] | None = None  # the declared scope (results.schema.json ``scope``); None: none declared
    incomplete: dict[str, Any] | None = None  # why an incomplete run is: conformance.report.incomplete; None otherwise

    @property
    def declared_scope(self) -> dict[str, Any] | None:
        """The scope the verdict is given within, when one was declared."""
        return self.scope if self.scope is not None and self.scope.get("declared") else None

    @property
    def is_client_run(self) -> bool:
        return any(s["surface"] in CLIENT_SURFACES for s in self.surfaces)

    @property
    def must_label(self) -> str:
        """Whose MUSTs the verdict counts: the Core's, or the client's and host's."""
        return "Client/host MUSTs" if self.is_client_run else "Server MUSTs"

    @property
    def other_musts_line(self) -> str:
        """The MCP and search_knowledge MUST counts of a Core run whose checks ran ("" if none did):
        the verdict is not conformant when one of them failed, whatever the server count says."""
        parts = []
        for surface, label in (("mcp", "MCP"), ("tool", "search_knowledge")):
            verified, failed = (
                self.summary.get(f"{surface}_must_verified", 0),
                self.summary.get(f"{surface}_must_failed", 0),
            )
            if verified or failed:
                shown = f"{label} MUSTs verified {verified}/{self.summary[f'{surface}_must_total']}"
                parts.append(shown + (f" ({failed} failed)" if failed else ""))
        return "".join(f"; {p}" for p in parts)

    @property
    def surfaces_line(self) -> str:
        """The surfaces in one phrase, for the verdict line and every report's header."""
        return surfaces_line(self.surfaces)

    @property
    def must_explained(self) -> str:
        """What the verdict's MUST count counts, against the whole catalogue's counts by level."""
        if self.is_client_run:
            return "the client and host MUSTs of the surfaces the harness declares that a harness can show"
        return (
            "the Core HTTP (`server`) MUSTs a request to a Core shows: the verdict is incomplete while one of these "
            "is not verified, and not conformant when any check failed (MCP and search_knowledge ones included)"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out = {"schema_version": out.pop("schema_version"), **out}  # results.json's order: the schema first
        for optional in ("scope", "incomplete"):  # optional members: absent, never null
            if out[optional] is None:
                del out[optional]
        return out


WAIVER_KEYS = frozenset({"id", "justification", "expires", "allow_passing"})
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _expiry(value: object) -> dt.date | None:
    """A TOML date, the day of a TOML date-time, or a quoted ISO date (``"2027-03-01"``): the
    spelling people write first must not be refused while the bare one works."""
    if isinstance(value, dt.datetime):  # TOML date-times are dates too; the day is what counts
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and ISO_DATE.fullmatch(value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:  # 2027-02-30
            return None
    return None


def load_waivers(path: str | None, catalogue: Catalogue | None = None) -> list[Waiver]:
    """Read and check a waivers file before any test runs: a typo must not surface after an hour of testing."""
    if not path:
        return []
    from conformance.common.config import read_toml  # its ConfigError is a ValueError: size, depth, NaN

    data = read_toml(path, "--waivers")
    entries = data.get("waiver", [])
    if not isinstance(entries, list) or set(data) - {"waiver"}:
        raise ValueError(f"--waivers {path}: expected only [[waiver]] entries")
    out: list[Waiver] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(
                f"--waivers {path}: waiver {i + 1} is not a table; write each as a [[waiver]] entry with id, justification, expires"
            )
        missing = {"id", "justification", "expires"} - set(entry)
        if missing:
            raise ValueError(f"{path}: waiver {i + 1} lacks {sorted(missing)}")
        unknown = set(entry) - WAIVER_KEYS
        if unknown:
            raise ValueError(f"{path}: waiver {i + 1} has unknown key(s) {sorted(unknown)}")
        for key in ("id", "justification"):
            if not isinstance(entry[key], str):
                raise ValueError(f"{path}: waiver {i + 1} {key} must be a string")
        rid = str(entry["id"])
        if catalogue is not None and rid not in catalogue:
            raise ValueError(f"{path}: waiver {i + 1} names {rid!r}, which is not a requirement of the catalogue")
        if rid in seen:  # which of the two would count?
            raise ValueError(f"{path}: waiver {i + 1} names {rid} again (waiver {seen[rid]} already does)")
        seen[rid] = i + 1
        expires = _expiry(entry["expires"])
        if expires is None:
            raise ValueError(
                f'{path}: waiver {rid} expires must be a TOML date or a quoted ISO date (2027-03-01 or "2027-03-01")'
            )
        if not str(entry["justification"]).strip():
            raise ValueError(f"{path}: waiver {rid} needs a justification")
        allow = entry.get("allow_passing", False)
        if not isinstance(allow, bool):  # "false" must never read as true
            raise ValueError(f"{path}: waiver {rid} allow_passing must be a TOML boolean (true or false)")
        out.append(
            Waiver(
                id=rid,
                justification=str(entry["justification"]),
                expires=expires,
                allow_passing=allow,
                source=str(path),
            )
        )
    return out


MCP_SURFACES = ("mcp", "mcp-stdio", "mcp-http")
CLIENT_SURFACES = ("client", "host")


def surfaces_line(surfaces: list[dict[str, Any]]) -> str:
    """``HTTP + MCP stdio + MCP streamable HTTP``, or what was not checked and why."""
    checked = [s["label"] for s in surfaces if s["checked"]]
    missed = [f"{s['label']} not checked ({s['detail']})" for s in surfaces if not s["checked"]]
    return "; ".join([" + ".join(checked) or "none", *missed]) if surfaces else "Core HTTP"


def _mcp_unchecked(surfaces: list[dict[str, Any]]) -> str | None:
    """Why no MCP check ran, when none did."""
    mcp = [s for s in surfaces if s["surface"] in MCP_SURFACES]
    if not mcp or any(s["checked"] for s in mcp):
        return None
    return str(mcp[0]["detail"])


def _why_not(req: Requirement, skips: list[str], surfaces: list[dict[str, Any]], reasons: Mapping[str, str]) -> str:
    if skips:
        return "; ".join(sorted(set(skips)))
    if req.via == "none":
        return "not observable on any wire: a statement about channels or intent outside this contract's messages"
    if req.id in reasons:
        return reasons[req.id]
    client_run = any(s["surface"] in CLIENT_SURFACES for s in surfaces)
    if client_run and req.surface not in CLIENT_SURFACES:
        return f"a rule of the {req.surface} surface: `knowledge-conformance run` checks it against a Core, not a client harness"
    if req.surface in CLIENT_SURFACES and not client_run:
        return (
            f"{req.surface} surface: a Core cannot show it; `knowledge-conformance client --harness CMD` checks it "
            "against a client's harness"
        )
    unchecked = _mcp_unchecked(surfaces)
    if req.surface == "mcp" and unchecked:
        return unchecked
    return "no test of this suite verifies it"


def _ran_mcp(catalogue: Catalogue, tests: list[TestResult]) -> bool:
    """Whether any test of an MCP-surface requirement ran to a judgement (passed or failed)."""
    mcp = {r.id for r in catalogue if r.surface == "mcp"}
    return any(t.outcome in ("passed", "failed") and mcp & set(t.requirements) for t in tests)


def _other_server_surfaces(catalogue: Catalogue) -> dict[str, set[str]]:
    """The MCP and search_knowledge MUSTs a check can show (not the ones no exchange shows)."""
    return {
        surface: {q.id for q in catalogue if q.surface == surface and q.level == "MUST" and q.via != "none"}
        for surface in ("mcp", "tool")
    }


def _first_line(message: str, fallback: str) -> str:
    return message.splitlines()[0][:300] if message.strip() else fallback


def aggregate(
    catalogue: Catalogue,
    tests: list[TestResult],
    info: RunInfo,
    *,
    waivers: list[Waiver],
    today: dt.date,
    reasons: Mapping[str, str] | None = None,
) -> RunResult:
    """Per requirement a status, and one verdict for the run.

    ``reasons``: why a requirement no test reached is not verified, where the caller knows
    better than the catalogue (e.g. the client rules no harness can show).

    Invariants (each has a project test): a requirement is verified only by a passed
    test that claims it and reached it; a failure counts against the one requirement
    its check named, never against every tag of its test; any failed test makes the
    run non-conformant unless its named requirement is a SHOULD/MAY under
    ``--fail-on must`` or is waived; a waiver of a rule the run verified (stale, without
    ``allow_passing``) makes it non-conformant too; any harness error makes the verdict ``error``.
    """
    reasons = reasons or {}
    tests = sorted(tests, key=lambda t: (t.nodeid, t.outcome))
    by_req: dict[str, list[TestResult]] = {}
    for t in tests:
        named = [t.violated] if t.violated is not None and t.violated in catalogue else []
        for rid in dict.fromkeys([*t.requirements, *named]):
            by_req.setdefault(rid, []).append(t)
    surfaces = [dict(s) for s in info.surfaces]
    if not _ran_mcp(catalogue, tests):  # set up, but no MCP check ran: say so, never "checked"
        for s in surfaces:
            if s["surface"] in MCP_SURFACES and s["checked"]:
                s["checked"], s["detail"] = False, f"{s['detail']}: no MCP check ran (see the MCP area)"
    active = {w.id: w for w in waivers if w.active(today)}
    warnings = [
        f"waiver for {w.id} expired on {w.expires.isoformat()} and no longer applies"
        for w in waivers
        if not w.active(today)
    ]
    results: list[RequirementResult] = []
    stale: list[str] = []  # waivers of rules verified in this run: each fails the gate
    for req in catalogue:
        mine = by_req.get(req.id, [])
        # the failure shown first is one with the exchange that shows it (a curl line), where there is one
        failed = sorted(
            (t for t in mine if t.outcome == "failed" and t.violated == req.id),
            key=lambda t: not any(e.get("judged") for e in t.exchanges),
        )
        # Fail closed: a passed test verifies only the rules its ledger shows checked (none kept: none verified).
        passed = [t for t in mine if t.outcome == "passed" and req.id in (t.exercised or ())]
        unreached = [t for t in mine if t.outcome == "passed" and req.id not in (t.exercised or ())]
        skips = [t.message for t in mine if t.outcome == "skipped"]
        errors = [t for t in mine if t.outcome == "error"]
        unnamed = [t for t in mine if t.outcome == "failed" and (t.violated is None or t.violated not in catalogue)]
        stopped = [t for t in mine if t.outcome == "failed" and t.violated in catalogue and t.violated != req.id]
        if failed:
            status, reason = "failed", _first_line(failed[0].message, "test failed")
        elif passed:
            status, reason = "verified", f"{len(passed)} test(s) passed"
        elif errors:
            status, reason = (
                "not_verified",
                f"harness error before a verdict: {_first_line(errors[0].message, 'error')}",
            )
        elif unnamed:
            status, reason = (
                "not_verified",
                f"its test failed without naming a requirement: {_first_line(unnamed[0].message, 'failed')}",
            )
        elif stopped:
            status, reason = (
                "not_verified",
                f"its test stopped at a failure of {stopped[0].violated} before checking it",
            )
        elif unreached:  # its tests passed, but no check of it ran in them: why the one that would did not, if said
            status, reason = (
                "not_verified",
                "; ".join(sorted(set(skips)))
                or "no check of it ran in the tests that claim it (a generated test: raise --stateful-examples)",
            )
        else:
            status, reason = "not_verified", _why_not(req, skips, surfaces, reasons)
        waiver: dict[str, Any] | None = None
        if req.id in active:
            w = active[req.id]
            if status == "failed":
                status, waiver = "waived", {"justification": w.justification, "expires": w.expires.isoformat()}
            elif status == "verified":  # fixed: the entry is stale, unless it allows a pass
                waiver = {"justification": w.justification, "expires": w.expires.isoformat()}
                if w.allow_passing:
                    waiver["allow_passing"] = True
                else:
                    waiver["stale"] = True
                    stale.append(w.stale_line())
        results.append(RequirementResult.of(req, status, reason, [t.nodeid for t in mine], failed, waiver))
    status_of = {r.id: r for r in results}
    if info.scope is not None:
        gate = info.scope.members(catalogue)
        core = [r for r in results if r.id in gate]
        observable = set(gate)
    elif info.gate is None:
        core = [r for r in results if r.surface == "server" and r.level == "MUST"]
        observable = {q.id for q in catalogue if q.server_observable}
    else:
        core = [r for r in results if r.id in info.gate and r.level == "MUST"]
        observable = set(info.gate)
    gating: list[str] = list(stale)  # what stops the run from being conformant: stale waivers, failed tests
    warnings[:0] = stale  # first: the one line a reader acts on
    for t in tests:
        if t.outcome != "failed":
            continue
        broken = status_of.get(t.violated or "")
        if broken is None:
            gating.append(
                f"{t.nodeid} failed without naming a catalogued requirement: {_first_line(t.message, 'failed')}"
            )
        elif broken.status == "waived":
            continue
        elif broken.level == "MUST" or info.fail_on == "should":
            gating.append(f"{t.nodeid} failed {broken.id}")
    should_failed = [r for r in results if r.level in ("SHOULD", "MAY") and r.status == "failed"]
    warnings += [f"{r.level} {r.id} failed: {r.reason}" for r in should_failed]
    warnings += [g for g in gating if "without naming" in g]
    errored = [t for t in tests if t.outcome == "error"]
    warnings += [f"harness error in {t.nodeid}: {_first_line(t.message, 'error')}" for t in errored]
    if info.interrupted:
        verdict = "interrupted"
    elif errored:
        verdict = "error"
    elif gating:
        verdict = "non-conformant"
    elif any(r.status == "not_verified" and r.id in observable for r in core):
        verdict = "incomplete"
    else:
        verdict = "conformant"
    summary: dict[str, int] = {s: sum(r.status == s for r in results) for s in STATUSES}
    by_level = counts_by_level(results)
    if info.scope is not None:  # the summary keeps counting the Core's MUSTs; the scope member counts the scope's
        core = [r for r in results if r.surface == "server" and r.level == "MUST"]
        observable = {q.id for q in catalogue if q.server_observable}
    summary["server_must_total"] = sum(1 for r in core if r.id in observable)
    summary["server_must_verified"] = sum(1 for r in core if r.id in observable and r.status == "verified")
    if info.gate is not None and info.scope is None:  # a client run: the same counts, named for what they count
        summary["client_must_total"] = summary["server_must_total"]
        summary["client_must_verified"] = summary["server_must_verified"]
    elif info.gate is None:  # a Core run: a failed MCP or search_knowledge rule fails it too, so show their counts
        for surface, ids in _other_server_surfaces(catalogue).items():
            rows = [r for r in results if r.id in ids]
            summary[f"{surface}_must_total"] = len(rows)
            summary[f"{surface}_must_verified"] = sum(r.status == "verified" for r in rows)
            summary[f"{surface}_must_failed"] = sum(r.status == "failed" for r in rows)
    summary.update(count_tests(tests))
    return RunResult(
        **{**info.facts(), "duration_seconds": round(info.duration_seconds, 3)},
        verdict=verdict,
        summary=summary,
        summary_by_level=by_level,
        warnings=warnings,
        requirements=results,
        tests=tests,
        surfaces=surfaces,
        scope=None if info.scope is None else _scope_member(info.scope, catalogue, status_of),
        incomplete=_incomplete(verdict, [r for r in core if r.id in observable], results, catalogue, info),
    )


def counts_by_level(rows: list[RequirementResult]) -> dict[str, dict[str, int]]:
    """How many requirements of each level ended in each status (results.json ``summary_by_level``)."""
    return {
        level: {s: sum(r.status == s and r.level == level for r in rows) for s in STATUSES}
        for level in ("MUST", "SHOULD", "MAY")
    }


def count_tests(tests: list[TestResult]) -> dict[str, int]:
    """The summary's test counts: every outcome a run's tests (or observe's and load's rules) ended in."""
    return {
        "tests": len(tests),
        "tests_failed": sum(t.outcome == "failed" for t in tests),
        "tests_errored": sum(t.outcome == "error" for t in tests),
        "tests_skipped": sum(t.outcome == "skipped" for t in tests),
    }


def _incomplete(
    verdict: str, gate: list[RequirementResult], results: list[RequirementResult], catalogue: Catalogue, info: RunInfo
) -> dict[str, Any] | None:
    """results.json's ``incomplete``: each gating MUST not verified, why, what would verify it, and
    (a Core run with no declared scope) the scope this run would pass."""
    if verdict != "incomplete":
        return None
    verified = {r.id for r in results if r.status == "verified"}
    core_run = info.scope is None and info.gate is None
    return {"missing": explain(gate, catalogue), "scope": passing_scope(verified, catalogue) if core_run else None}


def _scope_member(scope: Scope, catalogue: Catalogue, status_of: Mapping[str, RequirementResult]) -> dict[str, Any]:
    """results.json's ``scope``: what the verdict covers, and the MUSTs it leaves out (listed, never counted)."""
    inside = scope.members(catalogue)
    return {
        "declared": True,
        "label": scope.label,
        "surfaces": list(scope.surfaces),
        "access": list(scope.access),
        "must_total": len(inside),
        "must_verified": sum(1 for rid in inside if status_of[rid].status == "verified"),
        "outside": list(scope.outside(catalogue)),
    }
