"""Writers of one RunResult: JSON, Markdown, HTML and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import cache
from itertools import groupby
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from conformance.report.results import RunResult

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


def _areas(run: RunResult) -> list[tuple[str, list[object]]]:
    ordered = sorted(run.requirements, key=lambda r: r.area)
    return [(area, list(rows)) for area, rows in groupby(ordered, key=lambda r: r.area)]


def write_markdown(run: RunResult, path: Path) -> None:
    path.write_text(_env().get_template("report.md.j2").render(run=run, areas=_areas(run)), "utf-8")


def write_html(run: RunResult, path: Path) -> None:
    path.write_text(_env().get_template("report.html.j2").render(run=run, areas=_areas(run)), "utf-8")


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
