"""Writers of one RunResult: JSON, Markdown, HTML and JUnit XML.

Every report is opened, rendered or logged somewhere a target's text could act (a browser, a
pull-request comment, a CI log, a test reporter's XML parser), so each writer treats every value
as hostile: HTML autoescapes under a Content-Security-Policy that runs only the page's own static
script, Markdown shows a target's text only inside code spans and fences longer than any backtick
run in it, and every format shows control characters and CI command prefixes as visible escapes
(:func:`conformance.common.untrusted.defang`). Files are written beside their final name and
renamed over it, so a planted symlink is replaced, never followed."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import cache
from itertools import groupby
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from conformance.common.untrusted import cut, defang
from conformance.report.incomplete import first_reason
from conformance.report.results import RequirementResult, RunResult, TestResult

FILES = {"json": "results.json", "markdown": "report.md", "html": "report.html", "junit": "junit.xml"}


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to a new file in ``path``'s folder and rename it over ``path``: a symlink
    planted at ``path`` is replaced by the report, its target left alone, and a reader never
    sees half a report."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff\ufffe\uffff]|#(?=#(?:vso|teamcity)?\\[)",
    re.IGNORECASE,
)


def json_text(data: Any) -> str:
    """``data`` as JSON whose every character a terminal or a CI log could act on is a JSON escape
    (json.dumps escapes C0; C1, bidirectional controls and the ``#`` of a ``##vso[``-like command
    are escaped here): the same data, safe to print."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _strings(node: Any, change: Callable[[str], str]) -> Any:
    """A copy of a JSON-like value with ``change`` applied to every string, keys included."""
    if isinstance(node, str):
        return change(node)
    if isinstance(node, dict):
        return {change(str(k)): _strings(v, change) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_strings(v, change) for v in node]
    return node


def write_json(run: RunResult, path: Path, scrub: Callable[[str], str] | None = None) -> None:
    """results.json; ``scrub`` masks every string of the data before it is serialised, so a mask
    can never fall across JSON's own syntax."""
    data = run.to_dict()
    _replace(path, json_text(data if scrub is None else _strings(data, scrub)))


def _shown(value: Any) -> Any:
    """Every value a template prints, control characters and CI commands defanged."""
    return defang(value) if isinstance(value, str) and not isinstance(value, Markup) else value


MD_CUT = 600
"""A target's text in report.md is cut to this many characters (the whole is in results.json)."""


def code(text: object, limit: int = 200) -> str:
    """An inline code span holding ``text`` on one line: delimited by a backtick run longer than any
    in it, so nothing the target sent can close it and render as Markdown, a link or a mention."""
    flat = cut(" ".join(str(text).split()), limit)
    ticks = "`" * (max(map(len, re.findall("`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def fence(text: object, info: str = "", limit: int = MD_CUT) -> str:
    """A fenced code block holding ``text``: its fence is longer than any backtick run inside."""
    body = cut(str(text), limit)
    ticks = "`" * max(3, max(map(len, re.findall("`+", body)), default=0) + 1)
    return f"{ticks}{info}\n{body}\n{ticks}"


FILTER_SCRIPT = """for (const name of ["only-failures", "only-unverified"]) {
  document.getElementById(name).addEventListener("change", function (event) {
    document.body.classList.toggle(name, event.target.checked);
  });
}"""
"""The page's only script: static, so the Content-Security-Policy can name it by its hash and
refuse every other script, inline handler or injected element's event."""


def content_policy() -> str:
    digest = base64.b64encode(hashlib.sha256(FILTER_SCRIPT.encode()).digest()).decode()
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("conformance.report", "templates"),
        autoescape=select_autoescape(["html", "html.j2"]),
        finalize=_shown,
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
        "code": code,
        "fence": fence,
        "first_reason": first_reason,
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
    _replace(path, _env().get_template("report.md.j2").render(**_markdown_context(run)))


def write_html(run: RunResult, path: Path) -> None:
    page = (
        _env()
        .get_template("report.html.j2")
        .render(
            run=run,
            areas=_areas(run),
            failures=_failures(run),
            scope=run.declared_scope,
            judged=judged,
            cut=cut,
            policy=content_policy(),
            script=Markup(FILTER_SCRIPT),
        )
    )
    _replace(path, page)


UNJUDGED = {
    "interrupted": "the run was stopped before it ended",
    "incomplete": "a MUST the run gates on was not verified",
    "error": "the suite could not judge the target",
}
"""Verdicts that no failed test shows: junit.xml adds a case in error for each, or a CI's test
view showed an interrupted run as green."""


def write_junit(run: RunResult, path: Path, scrub: Callable[[str], str] | None = None) -> None:
    """junit.xml; ``scrub`` masks every value before it becomes XML (so no mask falls across markup)."""

    def _xml(text: object) -> str:
        shown = defang(str(text))
        return shown if scrub is None else scrub(shown)

    unjudged = run.verdict in UNJUDGED  # no test failed, yet the run is no pass: one more case says so
    suite = ET.Element(
        "testsuite",
        name="knowledge-conformance",
        tests=str(len(run.tests) + unjudged),
        failures=str(sum(t.outcome == "failed" for t in run.tests)),
        errors=str(sum(t.outcome == "error" for t in run.tests) + unjudged),
        skipped=str(sum(t.outcome == "skipped" for t in run.tests)),
        time=str(run.duration_seconds),
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="run_id", value=run.run_id)
    ET.SubElement(props, "property", name="verdict", value=run.verdict)
    ET.SubElement(props, "property", name="target", value=_xml(run.target))
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
            classname=_xml(module.replace("/", ".").removesuffix(".py")),
            name=_xml(name),
            time=f"{t.duration:.3f}",
        )
        tprops = ET.SubElement(case, "properties")
        for rid in t.requirements:
            ET.SubElement(tprops, "property", name="requirement", value=rid)
        if t.outcome in ("failed", "error"):
            node = ET.SubElement(
                case,
                "failure" if t.outcome == "failed" else "error",
                message=_xml((t.message.splitlines() or [""])[0][:500]),
            )
            node.text = _xml(t.message)
        elif t.outcome == "skipped":
            ET.SubElement(case, "skipped", message=_xml(t.message[:500]))
    if unjudged:
        case = ET.SubElement(suite, "testcase", classname="knowledge-conformance", name="verdict", time="0.000")
        why = UNJUDGED[run.verdict]
        ET.SubElement(case, "error", message=f"verdict {run.verdict}: {why}").text = _xml(
            f"The run's verdict is {run.verdict.upper()}: {why}. See report.md or results.json."
        )
    _replace(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n")


def write_all(run: RunResult, directory: Path, scrub: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write every report; ``scrub`` is the last pass over each file's text, so no writer
    (nor a template someone edits later) can put a known secret on disk."""
    directory.mkdir(parents=True, exist_ok=True)
    for kind in FILES.values():  # a planted symlink is never opened, not even to scrub it
        planted = directory / kind
        if planted.is_symlink():
            planted.unlink()
    paths = {kind: directory / name for kind, name in FILES.items()}
    write_json(run, paths["json"], scrub)
    write_markdown(run, paths["markdown"])
    write_html(run, paths["html"])
    write_junit(run, paths["junit"], scrub)
    if scrub is not None:
        for kind, path in paths.items():
            text = path.read_text("utf-8")
            clean = scrub(text)
            if clean != text and _still_parses(kind, clean):
                _replace(path, clean)
    return paths


def _still_parses(kind: str, text: str) -> bool:
    """Whether a text-level mask left a machine-read report readable. results.json's strings were
    masked one by one before it was written, so a mask the whole text still needs would only fall
    across its syntax; junit.xml must stay well-formed for the reporters that read it."""
    try:
        if kind == "json":
            json.loads(text)
        elif kind == "junit":
            ET.fromstring(text.encode("utf-8"))
    except (ValueError, ET.ParseError):
        return False
    return True
