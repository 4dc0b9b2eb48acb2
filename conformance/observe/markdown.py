"""report.md of an observation: the verdict, then a verdict per rule (held, with how many times;
violated, with the exchange and its curl line; not observed, with the traffic that would show
it). Everything the traffic carried is shown only inside code spans and fences (the suite's
writers' ``code`` and ``fence``), so nothing it sent renders as Markdown or acts in a CI log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.common.secrets import SECRETS
from conformance.common.untrusted import defang
from conformance.observe.coverage import CLIENT_SIDE, JUDGED
from conformance.report.results import RunResult
from conformance.report.writers import _replace, code, fence, judged, short


def _verdict_rows(run: RunResult) -> list[tuple[str, str, str, str, str]]:
    held = run.configuration["observe"]["held"]
    violated = run.configuration["observe"]["violated"]
    rows = []
    for r in run.requirements:
        if r.id not in JUDGED:
            continue
        verdict = "violated" if r.status == "failed" else "held" if r.id in held else "not observed"
        seen = str(violated.get(r.id, "")) if verdict == "violated" else str(held.get(r.id, "")) or "-"
        rows.append((r.id, "client" if r.id in CLIENT_SIDE else "server", verdict, seen, short(r.title, 60)))
    order = {"violated": 0, "held": 1, "not observed": 2}
    return sorted(rows, key=lambda row: (order[row[2]], row[0]))


def _failure(r: Any) -> list[str]:
    lines = [f"### {r.id} ({r.level}) {defang(r.title)}", "", f"> {defang(r.quote)} ({r.source})", ""]
    t = r.failures[0]
    lines += [fence(t.message), ""]
    e = judged(t)
    if e:
        who = e.get("identity") or "none"
        lines += [
            f"Exchange: {code(e['method'] + ' ' + e['path'])} as identity {code(who)} → HTTP {e['status']}: "
            f"{code(e['response_body'], 200)}",
            "",
            fence(e["curl"], "sh", 4000),
            "",
        ]
    if len(r.failures) > 1:
        lines += [f"- and {len(r.failures) - 1} more kept in `results.json`", ""]
    return lines


def markdown(run: RunResult) -> str:
    obs = run.configuration["observe"]
    rows = _verdict_rows(run)
    count = {v: sum(1 for row in rows if row[2] == v) for v in ("violated", "held", "not observed")}
    scope = run.scope or {}
    lines = [
        "# Knowledge contract: observed traffic",
        "",
        f"**Verdict: {run.verdict.upper()} within scope observed traffic**: {count['violated']} rule(s) violated, "
        f"{count['held']} held, {count['not observed']} not observed, of the {len(rows)} rules observe judges; "
        f"{scope.get('must_verified', 0)} of {scope.get('must_total', 0)} MUSTs verified (observation never verifies)",
        "",
        f"- Observed: {code(run.target, 300)} ({obs['source']}); {obs['exchanges']} exchange(s), {obs['judged']} of "
        f"the contract judged, {sum(obs['dropped'].values())} dropped unjudged; {obs['sessions']} session(s) "
        "(distinct credentials)",
        f"- knowledge-conformance {run.suite_version}; catalogue {run.catalogue_version}; {run.duration_seconds} s",
        "- Held means no violation was seen in this traffic, never that a rule holds: what the traffic never "
        "exercised is listed as not observed, and the rules no observation can judge are listed last.",
    ]
    failures = [r for r in run.requirements if r.status == "failed"]
    if failures:
        lines += ["", f"## Violated ({len(failures)})", ""]
        for r in sorted(failures, key=lambda r: (r.level != "MUST", r.id)):
            lines += _failure(r)
    lines += ["", "## Verdict per rule", "", "| Rule | Side | Verdict | Seen | Title |", "|---|---|---|---|---|"]
    lines += [f"| {rid} | {side} | {verdict} | {seen} | {title} |" for rid, side, verdict, seen, title in rows]
    never = [r for r in run.requirements if r.id in obs["not_observed"]]
    if never:
        lines += ["", f"## Never exercised by this traffic ({len(never)})", ""]
        lines += [f"- {r.id} {short(r.title, 60)}: would show on {JUDGED[r.id]}" for r in never]
    if run.warnings:
        lines += ["", f"## Warnings ({len(run.warnings)})", ""]
        lines += [f"- {code(w, 300)}" for w in run.warnings[:10]]
    outside = scope.get("outside", [])
    if outside:
        lines += [
            "",
            f"<details><summary>Outside observation: {len(outside)} MUSTs no passive observation can judge "
            "(run the active suite)</summary>",
            "",
            " ".join(outside),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"


def render(run: RunResult, path: Path) -> None:
    _replace(path, SECRETS.text(markdown(run)))
