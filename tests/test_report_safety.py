"""Every report is safe to open, render and log whatever a target sent: hostile text in each
field a target fills (a failure message, an exchange's bodies, an MCP answer, a warning, a reason)
never becomes markup in report.html or report.md, a control byte or CI command in any file, nor
invalid XML; and a symlink planted in the reports folder is replaced, never followed."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from conformance.common.secrets import Scrubber, _windows, protected
from conformance.report.results import RunResult, TestResult
from conformance.report.writers import FILTER_SCRIPT, code, content_policy, fence, write_all
from tests.test_report_markdown import CATALOGUE, OBSERVABLE, _exchange, _run

MARK = "kcpwn"
SECRET_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=8, max_size=30)
PAYLOAD = (
    f'<img src=x onerror="document.body.dataset.{MARK}=1"></script><script>{MARK}()</script>'
    f"<svg onload={MARK}()> ``` closes a fence\n@{MARK}-team [{MARK}](https://evil.test/{MARK}) | {MARK} | table |\n"
    f"\r::error file=x.py::{MARK}\n  ::add-mask::{MARK}\n##vso[task.setvariable variable={MARK}]x ##[group]{MARK}\n"
    f"\x1b]52;c;{MARK}\x07 \x1b[2J \x1b]8;;https://evil.test\x1b\\link\x1b]8;;\x1b\\ \x00 \x08 \x85 \u202e{MARK} \ud800"
)


def _hostile_run() -> RunResult:
    rid = next(r for r in OBSERVABLE if r.startswith("READ"))
    exchange = _exchange("read", "primary", PAYLOAD, judged=True)
    exchange["response_body"] = PAYLOAD
    call = {
        "tool": "read_business_knowledge",
        "transport": "http",
        "endpoint": PAYLOAD,
        "arguments": PAYLOAD,
        "is_error": True,
        "protocol_error": None,
        "answer": PAYLOAD,
    }
    failed = TestResult.for_rule(
        "t::read", rid, "failed", f"ContractViolation: [{rid}] {PAYLOAD}", exchanges=[exchange]
    )
    mcp = next(r.id for r in CATALOGUE if r.id.startswith("MCP"))
    on_mcp = TestResult.for_rule("t::mcp", mcp, "failed", f"ContractViolation: [{mcp}] {PAYLOAD}", tool_calls=[call])
    loose = TestResult(
        nodeid="t::loose",
        outcome="error",
        requirements=[],
        violated=None,
        message=f"HarnessError: {PAYLOAD}",
        detail=PAYLOAD,
    )
    run = _run([failed, on_mcp, loose])
    reasons = [dataclasses.replace(r, reason=PAYLOAD) if r.status == "not_verified" else r for r in run.requirements]
    run = dataclasses.replace(run, requirements=reasons, warnings=[PAYLOAD], target=PAYLOAD)
    return run


def _written(tmp_path: Path) -> dict[str, str]:
    run = _hostile_run()
    paths = write_all(run, tmp_path)
    return {kind: path.read_text("utf-8") for kind, path in paths.items()}


class _Tags(HTMLParser):
    """The elements and attributes of a page, and its text outside code and pre elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.loose_text: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_code += tag in ("code", "pre")

    def handle_endtag(self, tag: str) -> None:
        self._in_code -= tag in ("code", "pre") and self._in_code > 0

    def handle_data(self, data: str) -> None:
        if not self._in_code:
            self.loose_text.append(data)


def _parsed(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


def test_report_html_makes_no_element_or_script_of_a_targets_text(tmp_path: Path) -> None:
    page = _written(tmp_path)["html"]
    tags = _parsed(page).tags
    assert [t for t, _ in tags if t in ("img", "svg", "iframe", "object", "embed")] == []
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert scripts == [FILTER_SCRIPT], "the page runs its own static script only"
    assert not [a for _, attrs in tags for a in attrs if a.startswith("on")], "no inline event handler"
    policy = [attrs.get("content") for t, attrs in tags if t == "meta" and attrs.get("http-equiv")]
    assert policy == [content_policy()] and "script-src 'sha256-" in content_policy()


def test_report_md_shows_a_targets_text_only_in_code(tmp_path: Path) -> None:
    rendered = MarkdownIt("commonmark").enable("table").render(_written(tmp_path)["markdown"])
    parsed = _parsed(rendered)
    outside = "".join(parsed.loose_text)
    assert MARK not in outside, "a target's text rendered as Markdown outside code"
    assert not [attrs for t, attrs in parsed.tags if t in ("a", "img", "script", "svg")]


def test_no_output_carries_a_control_byte_or_a_ci_command(tmp_path: Path) -> None:
    for kind, text in _written(tmp_path).items():
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202e]", text), kind
        for line in re.split("\r|\n", text):
            assert not line.strip().startswith("::"), (kind, line)
            assert not re.search(r"##(vso|teamcity)?\[", line, re.I), (kind, line)


def test_junit_xml_is_well_formed_and_results_json_keeps_the_data(tmp_path: Path) -> None:
    texts = _written(tmp_path)
    suite = ET.fromstring(texts["junit"].encode("utf-8"))
    assert suite.tag == "testsuite"
    data = json.loads(texts["json"])
    assert data["warnings"] == [PAYLOAD], "results.json escapes characters, never changes the data"


def test_a_planted_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me", "utf-8")
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("report.html", "report.md", "results.json", "junit.xml"):
        (reports / name).symlink_to(victim)
    run = _hostile_run()
    write_all(run, reports, lambda text: text.replace("x", "y"))
    assert victim.read_text("utf-8") == "keep me"
    assert not any(p.is_symlink() for p in reports.iterdir())
    assert not [p for p in reports.iterdir() if p.name.endswith(".tmp")], "no temporary file left"


def test_a_code_span_or_fence_outlasts_every_backtick_run_inside() -> None:
    assert code("a ``` b") == "````a ``` b````"
    assert code("`x`") == "`` `x` ``"
    assert fence("x\n````\ny", "sh").startswith("`````sh\n") and fence("x").startswith("```\n")
    assert code("x" * 500, 10).startswith("`" + "x" * 10 + "… [490 more")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=40), min_size=1, max_size=6), st.lists(SECRET_TEXT, min_size=1, max_size=3))
def test_machine_read_reports_parse_whatever_the_text_and_the_secrets(
    tmp_path: Path, texts: list[str], secrets: list[str]
) -> None:
    """Masks never fall across JSON or XML syntax: results.json and junit.xml parse after the
    secrets pass, whatever a target's text holds and wherever a secret stands in it."""
    scrubber = Scrubber()
    for secret in secrets:
        scrubber.add(secret)
    spliced = [f"{t}{secrets[i % len(secrets)]}{t[::-1]}" for i, t in enumerate(texts)]
    run = dataclasses.replace(_run([]), warnings=spliced + texts, target="".join(spliced)[:200])
    paths = write_all(run, tmp_path / "r", scrubber.text)
    data = json.loads(paths["json"].read_text("utf-8"))
    ET.fromstring(paths["junit"].read_bytes())
    own = protected()
    for warning in data["warnings"]:
        for secret in secrets:  # a secret that lies within one of the suite's own words is kept (secrets.protected)
            assert secret not in warning or all(w.lower() in own for w in _windows(secret))


def test_a_minted_token_spanning_the_reports_words_rewrites_no_report(tmp_path: Path) -> None:
    """A control extension's tokens are the target's choice: one spanning the reports' own words
    (a verdict line, a junit attribute) masks the target's text only, never the files' own text,
    which the secrets the run was given still mask."""
    from conformance.common.secrets import MASK, RunSecrets

    secrets = RunSecrets()
    configured = "cfg-token-" + "7a" * 12
    secrets.add(configured)
    spanning = ["VERDICT: NON-", '" failures="', 'verdict" value="non-', "tests failed 1", "**Verdict: NON-"]
    for minted in spanning:
        secrets.add(minted, minted=True)
    rid = next(r for r in OBSERVABLE if r.startswith("READ"))
    run = _run([TestResult.for_rule("t::read", rid, "failed", f"ContractViolation: [{rid}] echoed {configured}")])
    plain = write_all(run, tmp_path / "plain")
    masked = write_all(run, tmp_path / "masked", secrets.configured.text)
    for kind, path in plain.items():
        expected = path.read_text("utf-8").replace(configured, MASK)
        assert masked[kind].read_text("utf-8") == expected, kind
    assert secrets.text("the Core echoed VERDICT: NON-CONFORMANT") == f"the Core echoed {MASK}CONFORMANT"
