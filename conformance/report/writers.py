"""Writers of one RunResult: JSON, Markdown, HTML and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import cache
from itertools import groupby
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from conformance.report.results import RequirementResult, RunResult, TestResult

FILES = {"json": "results.json", "markdown": "report.md", "html": "report.html", "junit": "junit.xml"}


def write_json(run: RunResult, path: Path) -> None:
    path.write_text(json.dumps(run.to_dict(), indent=2, ensure_ascii=False) + "\n", "utf-8")


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("conformance.report", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _areas(run: RunResult, rows: list[RequirementResult] | None = None) -> list[tuple[str, list[RequirementResult]]]:
    ordered = sorted(run.requirements if rows is None else rows, key=lambda r: r.area)
    return [(area, list(group)) for area, group in groupby(ordered, key=lambda r: r.area)]


def judged(test: TestResult) -> dict[str, Any] | None:
    """The exchange a failure shows: the request its failing check judged. Results written before
    exchanges were marked show the test's last; a failure judged on an MCP answer shows none."""
    if not test.exchanges:
        return None
    if not any("judged" in e for e in test.exchanges):
        return test.exchanges[-1]
    return next((e for e in test.exchanges if e.get("judged")), None)


def _failures(run: RunResult) -> list[RequirementResult]:
    """Failed requirements first (MUSTs before SHOULDs and MAYs), then waived ones."""
    rank = {"MUST": 0, "SHOULD": 1, "MAY": 2}
    shown = [r for r in run.requirements if r.status in ("failed", "waived")]
    return sorted(shown, key=lambda r: (r.status == "waived", rank.get(r.level, 3), r.id))


def _in_scope(run: RunResult) -> list[RequirementResult]:
    """The matrix's rows: every requirement, or those of the declared scope (the others are listed apart)."""
    scope = run.declared_scope
    outside = set(scope["outside"]) if scope else set()
    return [r for r in run.requirements if r.id not in outside]


def _by_reason(rows: list[RequirementResult]) -> list[tuple[str, list[RequirementResult]]]:
    """The rows not verified, grouped by their reason: the largest group first, each reason said once."""
    groups: dict[str, list[RequirementResult]] = {}
    for r in rows:
        if r.status == "not_verified":
            groups.setdefault(r.reason, []).append(r)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


def _markdown_context(run: RunResult) -> dict[str, Any]:
    rows = _in_scope(run)
    titles = {r.id: r.title for r in run.requirements}
    scope = run.declared_scope
    return {
        "run": run,
        "failures": _failures(run),
        "areas": _areas(run, rows),
        "rows": rows,
        "by_reason": _by_reason(rows),
        "scope": scope,
        "outside": [(rid, titles.get(rid, "")) for rid in scope["outside"]] if scope else [],
        "judged": judged,
        "short": short,
        "cut": TITLE_CUT,
    }


TITLE_CUT = 36
"""Titles in report.md's matrix are cut at a word to this many characters: 129 whole titles alone
would make a clean run's report too long for a pull-request comment (report.html has them whole)."""


def short(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters, cut at a word, for a table cell."""
    flat = " ".join(text.split()).replace("|", "/")
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


def write_markdown(run: RunResult, path: Path) -> None:
    path.write_text(_env().get_template("report.md.j2").render(**_markdown_context(run)), "utf-8")


def write_html(run: RunResult, path: Path) -> None:
    path.write_text(
        _env()
        .get_template("report.html.j2")
        .render(run=run, areas=_areas(run), failures=_failures(run), scope=run.declared_scope, judged=judged),
        "utf-8",
    )


def write_junit(run: RunResult, path: Path) -> None:
    suite = ET.Element(
        "testsuite",
        name="knowledge-conformance",
        tests=str(len(run.tests)),
        failures=str(sum(t.outcome == "failed" for t in run.tests)),
        errors=str(sum(t.outcome == "error" for t in run.tests)),
        skipped=str(sum(t.outcome == "skipped" for t in run.tests)),
        time=str(run.duration_seconds),
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="run_id", value=run.run_id)
    ET.SubElement(props, "property", name="verdict", value=run.verdict)
    ET.SubElement(props, "property", name="target", value=run.target)
    scope = run.declared_scope
    if scope is not None:  # the verdict is within this scope: say so, as the other reports do
        ET.SubElement(props, "property", name="scope", value=str(scope["label"]))
        for key in ("must_verified", "must_total"):
            ET.SubElement(props, "property", name=f"scope_{key}", value=str(scope[key]))
        ET.SubElement(props, "property", name="scope_outside", value=" ".join(scope["outside"]))
    for t in run.tests:
        module, _, name = t.nodeid.rpartition("::")
        case = ET.SubElement(
            suite,
            "testcase",
            classname=module.replace("/", ".").removesuffix(".py"),
            name=name,
            time=f"{t.duration:.3f}",
        )
        tprops = ET.SubElement(case, "properties")
        for rid in t.requirements:
            ET.SubElement(tprops, "property", name="requirement", value=rid)
        if t.outcome in ("failed", "error"):
            node = ET.SubElement(
                case, "failure" if t.outcome == "failed" else "error", message=(t.message.splitlines() or [""])[0][:500]
            )
            node.text = t.message
        elif t.outcome == "skipped":
            ET.SubElement(case, "skipped", message=t.message[:500])
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def write_all(run: RunResult, directory: Path, scrub: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write every report; ``scrub`` is the last pass over each file's text, so no writer
    (nor a template someone edits later) can put a known secret on disk."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {kind: directory / name for kind, name in FILES.items()}
    write_json(run, paths["json"])
    write_markdown(run, paths["markdown"])
    write_html(run, paths["html"])
    write_junit(run, paths["junit"])
    if scrub is not None:
        for path in paths.values():
            text = path.read_text("utf-8")
            clean = scrub(text)
            if clean != text:
                path.write_text(clean, "utf-8")
    return paths
