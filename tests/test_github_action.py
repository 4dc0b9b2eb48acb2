"""The repository's GitHub Action (action.yml), its steps run here as a runner would run them: the
run step's shell line and environment taken from action.yml with the inputs filled in, the GitHub
environment files (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT) pointed at temporary files, against the
bundled simulator: a passing run, a failing one (a quirk), and the same failure under a baseline.
The install step is replaced by this project's own environment (installing it again would take
minutes); what it installs is checked on its own."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text("utf-8"))
STEPS = {step["id"]: step for step in ACTION["runs"]["steps"]}
REPORT_MD_LIMIT = 10 * 1024
"""What the docs promise of a clean run's report.md (docs/ci.md)."""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("github_action", ROOT / "tools" / "github_action.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()


def _filled(value: str, inputs: dict[str, str], tmp: Path) -> str:
    """A step's value with the expressions the runner fills in."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr.startswith("inputs."):
            name = expr.removeprefix("inputs.")
            return inputs.get(name, str(ACTION["inputs"][name].get("default", "")))
        if expr == "runner.temp":
            return str(tmp)
        raise AssertionError(f"an expression this test does not fill in: {expr}")

    return re.sub(r"\$\{\{(.*?)\}\}", one, value)


class Ran:
    def __init__(self, code: int, stdout: str, summary: str, outputs: dict[str, str], workspace: Path) -> None:
        self.code, self.stdout, self.summary, self.outputs, self.workspace = code, stdout, summary, outputs, workspace

    @property
    def annotations(self) -> list[str]:
        """The workflow commands the runner would act on: lines outside the stop-commands block."""
        acted, stopped = [], None
        for line in self.stdout.splitlines():
            if stopped is not None:
                if line == f"::{stopped}::":
                    stopped = None
                continue
            if line.startswith("::stop-commands::"):
                stopped = line.removeprefix("::stop-commands::")
            elif line.startswith("::"):
                acted.append(line)
        assert stopped is None, "workflow commands were left switched off"
        return acted


def _outputs(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT's multi-line form, as the runner reads it."""
    found, lines = {}, iter(text.splitlines())
    for line in lines:
        name, _, delimiter = line.partition("<<")
        value = []
        for inner in lines:
            if inner == delimiter:
                break
            value.append(inner)
        found[name] = "\n".join(value)
    return found


def run_step(workspace: Path, **inputs: str) -> Ran:
    """The action's run step, as the runner runs it, in ``workspace``."""
    step = STEPS["run"]
    workspace.mkdir(parents=True, exist_ok=True)
    summary, output = workspace.parent / f"{workspace.name}.summary", workspace.parent / f"{workspace.name}.output"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KC_", "GITHUB_"))}
    env |= {name: _filled(str(value), inputs, workspace.parent) for name, value in step["env"].items()}
    env |= {
        "KC_VENV": str(Path(sys.executable).parent.parent),  # the install step's venv: this project's own
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
    }
    proc = subprocess.run(
        [step["shell"], "-c", step["run"]], cwd=workspace, env=env, capture_output=True, text=True, timeout=600
    )
    return Ran(
        proc.returncode,
        proc.stdout,
        summary.read_text("utf-8") if summary.exists() else "",
        _outputs(output.read_text("utf-8")) if output.exists() else {},
        workspace,
    )


def _check_outputs_reach_the_action(ran: Ran) -> None:
    """Every output action.yml declares is one the run step wrote."""
    for name, spec in ACTION["outputs"].items():
        found = re.fullmatch(r"\$\{\{ steps\.run\.outputs\.([\w-]+) \}\}", spec["value"])
        assert found is not None and found.group(1) in ran.outputs, name


# ----------------------------------------------------------------- the action's shape
def test_the_action_has_the_inputs_outputs_and_steps_it_documents() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert {"target", "target-config", "scope", "fail-on", "waivers", "baseline", "report-dir", "version"} <= set(
        ACTION["inputs"]
    )
    assert {"verdict", "exit-code"} <= set(ACTION["outputs"])
    upload = STEPS["upload"]
    assert (
        upload["uses"].startswith("actions/upload-artifact@") and upload["with"]["path"] == "${{ inputs.report-dir }}"
    )
    assert "always()" in upload["if"]
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), f"step {step['id']}: an input pasted into a shell line"


def test_install_takes_the_actions_own_source_a_version_or_a_requirement(tmp_path: Path) -> None:
    assert SCRIPT.install_spec("", tmp_path) == str(tmp_path)
    assert SCRIPT.install_spec("0.1.0") == "knowledge-conformance==0.1.0"
    assert SCRIPT.install_spec("knowledge-conformance>=0.1") == "knowledge-conformance>=0.1"
    assert 'tools/github_action.py" install' in STEPS["install"]["run"]


# ----------------------------------------------------------------- runs
FAILING_ARGS = "--sim-quirk search_fourth_hint --requirement SRCH-003"
"""A run with one known failure, and only it: four hints also break the search response schema
(WIRE-002) whenever a generated search matches four documents, which depends on the cases generated."""


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return run_step(tmp_path_factory.mktemp("action") / "failing", target="sim", args=FAILING_ARGS)


def test_a_passing_run(tmp_path: Path) -> None:
    ran = run_step(tmp_path / "ws", target="sim", scope="server,mcp,tool@control")
    assert ran.code == 0, ran.stdout[-3000:]
    assert ran.outputs == {
        "verdict": "conformant",
        "exit-code": "0",
        "suite-exit-code": "0",
        "report-dir": "knowledge-conformance-reports",
    }
    _check_outputs_reach_the_action(ran)
    reports = tmp_path / "ws" / "knowledge-conformance-reports"
    report = (reports / "report.md").read_text("utf-8")
    assert (
        ran.summary.rstrip("\n") == report.rstrip("\n")
        and "**Verdict: CONFORMANT within scope server,mcp,tool@control" in report
    )
    assert len(report.encode("utf-8")) < REPORT_MD_LIMIT, "the docs say a clean run's report.md is under 10 KB"
    assert {p.name for p in reports.iterdir()} >= {"results.json", "report.md", "report.html", "junit.xml"}
    (notice,) = ran.annotations
    assert notice.startswith("::notice title=knowledge-conformance::verdict CONFORMANT, exit 0:")


def test_a_failing_run(failing: Ran) -> None:
    assert failing.code == 1, failing.stdout[-3000:]
    assert failing.outputs["verdict"] == "non-conformant" and failing.outputs["exit-code"] == "1"
    _check_outputs_reach_the_action(failing)
    assert failing.summary.startswith("# Knowledge contract conformance report")
    assert "### SRCH-003 (MUST)" in failing.summary and "curl" in failing.summary
    head, *rest = failing.annotations
    assert head.startswith("::error title=knowledge-conformance::verdict NON-CONFORMANT, exit 1:")
    assert rest == ["::error title=SRCH-003 (MUST)::SRCH-003 failed: At most three hints (the job summary shows how)"]


def test_a_known_failure_passes_the_baseline_gate(failing: Ran, tmp_path: Path) -> None:
    baseline = failing.workspace / "knowledge-conformance-reports" / "results.json"
    ran = run_step(
        tmp_path / "ws",
        target="sim",
        args=FAILING_ARGS,
        baseline=str(baseline),
        **{"report-dir": "out"},
    )
    assert ran.code == 0, ran.stdout[-3000:]
    assert ran.outputs["verdict"] == "non-conformant" and ran.outputs["suite-exit-code"] == "1"
    assert ran.outputs["exit-code"] == "0" and ran.outputs["report-dir"] == "out"
    assert "## Compared with the baseline" in ran.summary and "New failures (0)" in ran.summary
    assert ran.annotations[0].startswith(
        "::notice title=knowledge-conformance::verdict NON-CONFORMANT, exit 1; against the baseline, exit 0:"
    )
    assert ran.annotations[1:] == [
        "::warning title=SRCH-003 (MUST)::SRCH-003 failed, as in the baseline: At most three hints"
    ]


def test_an_empty_target_never_tests_the_simulator_instead(tmp_path: Path) -> None:
    ran = run_step(tmp_path / "ws")
    assert ran.code == 4 and ran.outputs["verdict"] == "usage-error" and ran.outputs["exit-code"] == "4"
    assert "the target input is empty" in ran.stdout and "No report was written" in ran.summary
    assert not (tmp_path / "ws" / "knowledge-conformance-reports").exists()


# ----------------------------------------------------------------- hostile text
HOSTILE = "::error::pwned\n::set-output name=verdict::conformant\x1b]52;c;Zm9v\x07 %0A"


def test_annotations_carry_none_of_a_targets_text() -> None:
    results: dict[str, Any] = json.loads(
        (ROOT / "schemas" / "examples" / "results" / "valid-non-conformant.json").read_text("utf-8")
    )
    row = results["requirements"][0]
    row["title"] = row["reason"] = row["quote"] = HOSTILE
    row["failures"][0]["message"] = HOSTILE
    results["warnings"] = [HOSTILE, f"stale waiver: {HOSTILE}"]
    results["requirements"].append(dict(row, id="::set-output"))
    lines = SCRIPT.annotation_lines(results, 1, "w\n::error::x.toml")
    assert lines and all(
        re.fullmatch(r"::(error|warning|notice) title=[^\n:,]*::[^\n\r\x1b\x07]*", line) for line in lines
    )
    assert not any("pwned" in line or "set-output" in line for line in lines), lines
    assert (
        lines[1]
        == "::error title=TURN-007 (MUST)::TURN-007 failed: "
        + next(r.title for r in __import__("knowledge_schemas").load_catalogue() if r.id == "TURN-007")
        + " (the job summary shows how)"
    )


def test_the_suites_own_output_is_printed_with_workflow_commands_off(capfd: pytest.CaptureFixture[str]) -> None:
    code, out = SCRIPT._quiet_commands([sys.executable, "-c", f"print({HOSTILE!r})"])
    printed = capfd.readouterr().out.splitlines()
    assert code == 0 and "::error::pwned" in out
    token = printed[0].removeprefix("::stop-commands::")
    assert len(token) == 32 and printed[-1] == f"::{token}::" and "::error::pwned" in printed[1:-1]


def test_the_summary_fences_what_compare_printed(tmp_path: Path) -> None:
    text = SCRIPT.summary(tmp_path, None, 4, None)
    assert text.startswith("## knowledge-conformance: exit 4 (usage-error)")
    results = {"verdict": "conformant"}
    (tmp_path / "report.md").write_text("# report\n", "utf-8")
    text = SCRIPT.summary(tmp_path, results, 0, "```\n<img src=x onerror=alert(1)>")
    assert "\n````\n```\n<img src=x onerror=alert(1)>\n````\n" in text
