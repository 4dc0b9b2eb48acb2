"""A load run's results in the suite's own pipeline: one results model (``aggregate``, the
same verdict rules) and the same writers (results.json, report.md, report.html, junit.xml).

The run's scope is the profile's requirements (``profile.PROFILE``): the catalogue handed to
``aggregate`` holds those only, so "incomplete" means a requirement of the profile that no
check of this run reached, never the rules a load run does not try. Per requirement there is
one result: failed with the number of violations and the first ones (with their exchange),
passed with the number of checks, or skipped when nothing reached it."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.clients.scope import UNSHOWABLE
from conformance.common.secrets import SECRETS, scrub
from conformance.load.tally import Tally
from conformance.report.results import RunInfo, RunResult, TestResult, aggregate
from conformance.report.writers import write_all
from knowledge_schemas import Catalogue, load_catalogue
from knowledge_schemas.catalogue import catalogue_version

NODE = "conformance/load/profile.py::ContractUser"


@dataclass
class LoadFigures:
    """What Locust measured, for the report's configuration and the console summary."""

    users: int
    spawn_rate: float
    run_time: float
    requests: int = 0
    failures: int = 0  # Locust's: 5xx answers and requests that got no answer
    operations: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # per operation: requests, failures, p50/p95 ms, req/s


def figures_of(stats: Any, users: int, spawn_rate: float, run_time: float) -> LoadFigures:
    """From a Locust ``RequestStats``."""
    out = LoadFigures(users, spawn_rate, run_time, int(stats.total.num_requests), int(stats.total.num_failures))
    for (name, method), entry in sorted(stats.entries.items()):
        out.operations[f"{method} {name}"] = {
            "requests": int(entry.num_requests),
            "failures": int(entry.num_failures),
            "p50_ms": entry.get_response_time_percentile(0.5),
            "p95_ms": entry.get_response_time_percentile(0.95),
            "rps": round(float(entry.total_rps), 1),
        }
    return out


def results_of(tally: Tally, scope: list[str]) -> list[TestResult]:
    results = []
    for rid in scope:
        nodeid = f"{NODE}::{rid}"
        broken, passed = tally.violations.get(rid, 0), tally.checks.get(rid, 0)
        if broken:
            first = tally.samples.get(rid, [])
            message = f"{broken} violation(s) in {broken + passed} checks under load; first: {first[0]['message'] if first else '?'}"
            exchanges = [s["exchange"] for s in first if s.get("exchange")]
            detail = scrub("\n".join(str(s["message"]) for s in first))
            results.append(
                TestResult.for_rule(nodeid, rid, "failed", scrub(message)[:2000], exchanges=exchanges, detail=detail)
            )
        elif passed:
            results.append(
                TestResult.for_rule(nodeid, rid, "passed", f"{passed} checks passed under load", exercised=[rid])
            )
        else:
            results.append(
                TestResult.for_rule(nodeid, rid, "skipped", "not verified: no check of this load run reached it")
            )
    for kind, count in sorted(tally.errors.items()):
        sample = next(iter(tally.error_samples), kind)
        results.append(
            TestResult(
                nodeid=f"{NODE}::harness-{kind}",
                outcome="error",
                requirements=[],
                message=scrub(f"{count} step(s) could not be judged ({kind}): {sample}")[:2000],
            )
        )
    return results


def build(
    tally: Tally,
    scope: list[str],
    figures: LoadFigures,
    *,
    target: str,
    run_id: str,
    started: float,
    configuration: dict[str, Any],
    interrupted: bool = False,
) -> RunResult:
    full = load_catalogue()
    catalogue = Catalogue(tuple(r for r in full if r.id in scope))
    config = {
        **configuration,
        "mode": "load",
        "load": {
            "users": figures.users,
            "spawn_rate": figures.spawn_rate,
            "run_time_seconds": figures.run_time,
            "requests": figures.requests,
            "failures": figures.failures,
            "operations": figures.operations,
            "violations": dict(sorted(tally.violations.items())),
            "checks": dict(sorted(tally.checks.items())),
            "skipped_steps": dict(sorted(tally.skipped.items())),
            "scope": list(scope),
        },
    }
    info = RunInfo(
        suite_version=__version__,
        catalogue_version=catalogue_version(),
        target=target,
        configuration=dict(SECRETS.data(config)),
        hypothesis={"derandomize": False, "seed": None},
        started=dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        duration_seconds=time.time() - started,
        requests=figures.requests,
        fail_on="must",
        run_id=run_id,
        interrupted=interrupted,
        surfaces=(
            {
                "surface": "http",
                "label": "Core HTTP",
                "checked": True,
                "detail": f"under load: {figures.users} users, Locust",
            },
        ),
    )
    run = aggregate(catalogue, results_of(tally, scope), info, waivers=[], today=dt.date.today(), reasons=UNSHOWABLE)
    return run


def write(run: RunResult, directory: Path) -> dict[str, Path]:
    return write_all(run, directory, scrub)


def summary(run: RunResult, tally: Tally, figures: LoadFigures) -> list[str]:
    """The console lines: the verdict, Locust's figures, violations per requirement."""
    s = run.summary
    lines = [
        f"VERDICT: {run.verdict.upper()}  (load profile: requirements verified {s['verified']}, failed {s['failed']}, "
        f"not verified {s['not_verified']} of {len(run.requirements)}; run {run.run_id})",
        f"  {figures.requests} requests, {figures.failures} failures (5xx or no answer), {figures.users} users, {figures.run_time:g} s",
    ]
    for name, op in figures.operations.items():
        lines.append(
            f"  {name:28} {op['requests']:7} requests  {op['failures']:4} failures  p50 {op['p50_ms']} ms  p95 {op['p95_ms']} ms"
        )
    for rid, count in sorted(tally.violations.items()):
        first = tally.samples.get(rid, [{}])[0].get("message", "")
        lines.append(
            scrub(
                f"  VIOLATED {rid}: {count} time(s) in {count + tally.checks.get(rid, 0)} checks; first: {first[:200]}"
            )
        )
    for kind, count in sorted(tally.errors.items()):
        lines.append(f"  harness errors ({kind}): {count}")
    return lines
