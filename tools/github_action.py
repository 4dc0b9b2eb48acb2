"""The steps of the repository's GitHub Action (``action.yml``), as one script a test can run locally.

``install`` (any Python 3.11+, standard library only) puts knowledge-conformance in a virtual
environment of its own. ``run`` (that environment's Python) runs the suite, compares with a stored
baseline when given one, appends report.md to the job summary, emits annotations, writes the
step's outputs, and exits with the gate's code (the documented exit codes).

Everything a target sends is hostile, and this step prints into a CI log that reads workflow
commands (``::error::``, ``::set-output``). So the suite's own console output is printed with
workflow commands switched off (``::stop-commands::`` with a token drawn for this run, which no
target can know), and every annotation is built from the suite's own text only: requirement IDs
checked against the catalogue, their titles from the catalogue, counts, the verdict from its fixed
set, the inputs' own file names; never a reason, message or body from results.json.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
"""The action's own source tree (the repository at the action's ref): what ``install`` installs by default."""

VERDICTS = ("conformant", "non-conformant", "incomplete", "error", "interrupted")
NO_REPORT = {3: "internal-error", 4: "usage-error", 5: "no-tests"}
"""The verdict output of a run that wrote no results.json, by its exit code."""
SUMMARY_MAX = 1_000_000
"""A job summary holds at most 1 MiB per step; a longer report.md is left to the artifact."""
ANNOTATIONS_MAX = 10
"""GitHub shows at most 10 annotations of each kind per step; the rest are counted in one more."""
ID = re.compile(r"[A-Z]+-[0-9]{3}")
VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]*")


def _env(name: str) -> str:
    """An input as the action passes it (``env:``, never pasted into a script), trimmed."""
    return os.environ.get(name, "").strip()


# ----------------------------------------------------------------- install
def install_spec(version: str, root: Path = ROOT) -> str:
    """What pip installs: the action's own source (no version given), ``knowledge-conformance==V``
    (a version), or any other pip requirement as it is (a path, a URL, ``name>=x``)."""
    if not version:
        return str(root)
    if VERSION.fullmatch(version):
        return f"knowledge-conformance=={version}"
    return version


def install() -> int:
    """A fresh virtual environment at ``$KC_VENV`` holding the suite (its console scripts included)."""
    target = Path(_env("KC_VENV") or Path(_env("RUNNER_TEMP") or ".") / "knowledge-conformance")
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    python = target / ("Scripts" if os.name == "nt" else "bin") / "python"
    spec = install_spec(_env("KC_VERSION"))
    print(f"installing {spec} into {target}", flush=True)
    return subprocess.call([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec])


# ----------------------------------------------------------------- run
def suite_command(report_dir: str) -> list[str]:
    """``knowledge-conformance run`` with the inputs: each one an argument of its own (no shell)."""
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--report-dir", report_dir]
    for name, flag in (
        ("KC_TARGET", "--target"),
        ("KC_TARGET_CONFIG", "--target-config"),
        ("KC_SCOPE", "--scope"),
        ("KC_FAIL_ON", "--fail-on"),
        ("KC_WAIVERS", "--waivers"),
    ):
        if _env(name):
            cmd += [flag, _env(name)]
    return cmd + shlex.split(_env("KC_ARGS"))


def _quiet_commands(cmd: list[str]) -> tuple[int, str]:
    """Run ``cmd`` with its output in the log and workflow commands off meanwhile; its exit code
    and its standard output (kept for the job summary)."""
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}", flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, errors="replace", check=False)
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
    finally:
        print(f"::{token}::", flush=True)
    return proc.returncode, proc.stdout


def _load_results(path: Path) -> dict[str, Any] | None:
    """The run's results.json, when it wrote one that is one (a usage error writes none)."""
    if not path.is_file():
        return None
    from knowledge_schemas import load_registry

    try:
        data = json.loads(path.read_text("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) and not load_registry().errors("results", data) else None


def _escape(text: str, *, prop: bool = False) -> str:
    """A workflow command's message (or property) encoding: no line break or separator survives."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def annotation(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={_escape(title, prop=True)}::{_escape(message)}"


def annotation_lines(
    results: dict[str, Any] | None,
    code: int,
    waivers: str,
    baseline: dict[str, Any] | None = None,
    allow_fixed: bool = False,
    gate: int | None = None,
) -> list[str]:
    """The annotations of a run, from the suite's own text only (see the module's docstring)."""
    from knowledge_schemas import load_catalogue

    if results is None:
        what = NO_REPORT.get(code, "no report")
        return [annotation("error", "knowledge-conformance", f"exit {code} ({what}): the step's log says what to fix")]
    catalogue = {r.id: r for r in load_catalogue()}
    before = {str(r["id"]): r["status"] for r in (baseline or {}).get("requirements", [])}
    errors: list[str] = []
    warnings: list[str] = []
    for row in results["requirements"]:
        rid = str(row["id"])
        req = catalogue.get(rid) if ID.fullmatch(rid) else None
        if req is None:  # not the catalogue's: nothing of it is shown
            continue
        title = f"{rid} ({req.level})"
        if row["status"] == "failed":
            if before.get(rid) in ("failed", "waived"):
                warnings.append(annotation("warning", title, f"{rid} failed, as in the baseline: {req.title}"))
            elif req.level == "MUST" or results.get("fail_on") == "should":
                errors.append(annotation("error", title, f"{rid} failed: {req.title} (the job summary shows how)"))
            else:
                warnings.append(annotation("warning", title, f"{rid} failed: {req.title}"))
        elif row["status"] == "verified" and (row.get("waiver") or {}).get("stale") is True:
            errors.append(
                annotation(
                    "error",
                    "stale waiver",
                    f"{rid} was verified in this run; remove its [[waiver]] entry from {waivers or 'the waivers file'} "
                    "(or add allow_passing = true to it)",
                )
            )
        elif row["status"] == "verified" and before.get(rid) in ("failed", "waived") and not allow_fixed:
            errors.append(
                annotation(
                    "error",
                    "stale baseline",
                    f"{rid} failed in the baseline and is verified now: store this run's results.json as the baseline "
                    "(or set allow-fixed)",
                )
            )
    verdict = str(results["verdict"]) if results["verdict"] in VERDICTS else "error"
    s = results["summary"]
    against = "" if gate is None else f"; against the baseline, exit {gate}"
    head = (
        f"verdict {verdict.upper()}, exit {code}{against}: server MUSTs verified {int(s['server_must_verified'])} of "
        f"{int(s['server_must_total'])}; requirements failed {int(s['failed'])}, waived {int(s['waived'])}. "
        "The job summary holds report.md, the reports artifact every report."
    )
    out = [annotation("notice" if (code if gate is None else gate) == 0 else "error", "knowledge-conformance", head)]
    for kind, found in (("error", errors), ("warning", warnings)):
        out += found[:ANNOTATIONS_MAX]
        if len(found) > ANNOTATIONS_MAX:
            out.append(
                annotation(kind, "knowledge-conformance", f"and {len(found) - ANNOTATIONS_MAX} more in the job summary")
            )
    return out


def summary(report_dir: Path, results: dict[str, Any] | None, code: int, compared: str | None) -> str:
    """The job summary: report.md (written by the suite for exactly this: a target's text only in
    code spans and fences), or a short note when there is none or it is too long."""
    from conformance.report.writers import fence

    report = report_dir / "report.md"
    if results is None or not report.is_file():
        text = (
            f"## knowledge-conformance: exit {code} ({NO_REPORT.get(code, 'no report')})\n\n"
            "No report was written: the step's log says what to fix (a usage error is found before any test runs).\n"
        )
    elif report.stat().st_size > SUMMARY_MAX:
        verdict = results["verdict"] if results["verdict"] in VERDICTS else "error"
        text = (
            f"## knowledge-conformance: {str(verdict).upper()} (exit {code})\n\n"
            f"report.md is {report.stat().st_size} bytes, more than a job summary holds: it is in the reports artifact.\n"
        )
    else:
        text = report.read_text("utf-8")
    if compared is not None:
        text += f"\n## Compared with the baseline\n\n{fence(compared)}\n"
    return text if text.endswith("\n") else text + "\n"


def _append(variable: str, text: str) -> None:
    path = _env(variable)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def _output(name: str, value: str) -> str:
    """One output in the multi-line form, so no value (a path with a line break) can set another."""
    delimiter = f"kc_{secrets.token_hex(8)}"
    return f"{name}<<{delimiter}\n{value}\n{delimiter}\n"


def run() -> int:
    """The suite, the baseline gate, the summary, annotations and outputs; the gate's exit code."""
    report_dir = _env("KC_REPORT_DIR") or "knowledge-conformance-reports"
    if not _env("KC_TARGET") and not _env("KC_TARGET_CONFIG"):
        # an unset variable (target: ${{ vars.CORE_URL }}) must not test the bundled simulator and pass
        print(
            "knowledge-conformance: the target input is empty and no target-config is given: give the Core's URL, or sim"
        )
        code = 4
    else:
        code, _ = _quiet_commands(suite_command(report_dir))
    results = _load_results(Path(report_dir) / "results.json")
    gate, compared, baseline = code, None, None
    if _env("KC_BASELINE") and results is not None and code in (0, 1, 6):
        # a harness error or a bad setup judged nothing: it is never compared (and keeps its code)
        cmd = [
            sys.executable,
            "-m",
            "conformance.cli",
            "compare",
            _env("KC_BASELINE"),
            str(Path(report_dir) / "results.json"),
        ]
        cmd += ["--fail-on-new-failures", *(["--allow-fixed"] if _env("KC_ALLOW_FIXED") == "true" else [])]
        gate, compared = _quiet_commands(cmd)
        baseline = _load_results(Path(_env("KC_BASELINE")))
    _append("GITHUB_STEP_SUMMARY", summary(Path(report_dir), results, code, compared))
    checked = None if compared is None else gate
    for line in annotation_lines(
        results, code, _env("KC_WAIVERS"), baseline, _env("KC_ALLOW_FIXED") == "true", checked
    ):
        print(line, flush=True)
    verdict = (
        str(results["verdict"])
        if results is not None and results["verdict"] in VERDICTS
        else NO_REPORT.get(code, "none")
    )
    _append(
        "GITHUB_OUTPUT",
        _output("verdict", verdict)
        + _output("exit-code", str(gate))
        + _output("suite-exit-code", str(code))
        + _output("report-dir", report_dir),
    )
    return gate


def main(argv: list[str]) -> int:
    if argv[1:] == ["install"]:
        return install()
    if argv[1:] == ["run"]:
        return run()
    print("usage: github_action.py install|run", file=sys.stderr)
    return 4


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
