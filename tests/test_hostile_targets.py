"""The suite against hostile servers: one run per scenario of ``tests/hostile/scenarios.py``
(a proxy in front of the served simulator answering one route with an attack), each run then
checked on every output: exit code, wall time, peak RSS, reports written, report.html in headless
Chromium, junit.xml parsed, stdout/stderr/report.md/junit.xml free of CI commands and control
characters, report.md free of rendered server Markdown, no spelling of any secret anywhere, and
no redirect followed. The per-scenario results go into a table (printed at the end and written
under pytest's temporary folder) for the issue's closing note.

Each run selects one to three suite tests, so a run takes 4-15 s (the trickle the longest); the
whole file took about 3 minutes on a 2-core machine that other jobs kept at a load of 8."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.common.served import ServedSimulator
from tests.hostile import outputs, payloads
from tests.hostile.forms import Finder
from tests.hostile.runner import KILL_GRACE, Measured, run_suite
from tests.hostile.scenarios import SCENARIOS, Scenario
from tests.hostile.server import HostileServer, Seen

REPORTS = ("results.json", "report.md", "report.html", "junit.xml")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TABLE = "hostile-targets.md"


@dataclass
class Outcome:
    """One scenario's run: its measures, the proxy's view, and each check's result."""

    scenario: Scenario
    measured: Measured
    reports: Path
    seen: Seen
    finder: Finder
    dom: Future[str] | None = None
    results: dict[str, str] = field(default_factory=dict)

    def report(self, name: str) -> Path | None:
        path = self.reports / name
        return path if path.is_file() else None

    def tail(self) -> str:
        """The end of the run's output for a failure message: masked, and defanged like any server
        text (this message lands in CI logs too)."""
        text = (self.measured.stdout + self.measured.stderr).decode("utf-8", "replace")
        return outputs.quoted(self.finder.mask(text[-3000:])[-1200:])


def _target_config(root: Path, server: HostileServer, scenario: Scenario) -> Path:
    path = root / "target.toml"
    control = f'[control]\nurl = "{server.url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n'
    path.write_text(f"[target]\ntimeout_seconds = {scenario.timeout_seconds}\n{control}", "utf-8")
    return path


def _run(scenario: Scenario, sim: ServedSimulator, root: Path) -> Outcome:
    """The suite, its MCP checks off, against the scenario's hostile server; only its selected tests."""
    root.mkdir(parents=True, exist_ok=True)
    reports = root / "reports"
    with HostileServer(sim.url, scenario, sim.control_token) as server:
        args = ["--target", server.url, "--target-config", str(_target_config(root, server, scenario))]
        args += ["--mcp-target", "none", "--report-dir", str(reports), "--", *scenario.select]
        env = {**os.environ, "KC_CONTROL": sim.control_token}
        measured = run_suite(args, env, root / "output", scenario.wall_seconds + KILL_GRACE)
    return Outcome(scenario, measured, reports, server.seen, Finder(server.seen.secrets))


# ------------------------------------------------------------------------------------- the checks


def check_exit(run: Outcome) -> list[str]:
    """The verdict the attack must produce, never an internal error, and the attack was served."""
    problems = []
    if run.seen.on_route == 0:
        problems.append(f"no request on route {run.scenario.route!r}: the selection does not reach the attack")
    exits = sorted(run.scenario.exits)
    if run.measured.exit not in run.scenario.exits:
        got = run.measured.ended or f"exit {run.measured.exit}"
        problems.append(f"{got}, expected exit {' or '.join(map(str, exits))}; output ends:\n{run.tail()}")
    return problems


def check_time(run: Outcome) -> list[str]:
    bound = run.scenario.wall_seconds
    if run.measured.wall <= bound:
        return []
    return [f"the run took {run.measured.wall:.1f} s, bound {bound:g} s ({run.measured.ended or 'it ended by itself'})"]


def check_memory(run: Outcome) -> list[str]:
    bound = run.scenario.rss_mib
    if run.measured.rss_mib <= bound:
        return []
    return [
        f"peak RSS {run.measured.rss_mib:.0f} MiB, bound {bound} MiB ({run.measured.ended or 'it ended by itself'})"
    ]


def check_reports(run: Outcome) -> list[str]:
    if not run.scenario.reports:
        return []
    missing = [name for name in REPORTS if run.report(name) is None]
    if not missing:
        return []
    return [f"no {', '.join(missing)} in the reports folder ({run.measured.ended or f'exit {run.measured.exit}'})"]


def check_html(run: Outcome) -> list[str]:
    """report.html as Chromium left it after running every script it would run."""
    return outputs.html_problems(run.dom.result()) if run.dom is not None else []


def check_junit(run: Outcome) -> list[str]:
    junit = run.report("junit.xml")
    return outputs.junit_problems(junit) if junit else []


def check_logs(run: Outcome) -> list[str]:
    """stdout, stderr, report.md and junit.xml: what CI logs, job summaries and reporters show."""
    shown = {"stdout": run.measured.stdout, "stderr": run.measured.stderr}
    shown |= {name: path.read_bytes() for name in ("report.md", "junit.xml") if (path := run.report(name))}
    return [p for name, data in shown.items() for p in outputs.log_problems(name, data, run.finder)]


def check_markdown(run: Outcome) -> list[str]:
    md = run.report("report.md")
    return outputs.markdown_problems(md, run.finder) if md else []


def check_secrets(run: Outcome) -> list[str]:
    every = outputs.every_output(run.measured.stdout, run.measured.stderr, run.reports)
    missing = [] if run.seen.secrets else ["the run was issued no secret to search for"]
    return missing + outputs.secret_problems(every, run.finder)


def check_reached(run: Outcome) -> list[str]:
    """Each payload the scenario tags reached every text output (escaped or not), or the other
    checks of that output prove nothing."""
    texts = {"stdout": run.measured.stdout}
    texts |= {name: path.read_bytes() for name in REPORTS if (path := run.report(name))}
    return [
        f"{name}: payload {tag!r} never shown"
        for tag in run.scenario.reaches
        for name, data in texts.items()
        if payloads.tagged(tag, "").strip().encode() not in data
    ]


def check_redirects(run: Outcome) -> list[str]:
    """A redirect is never followed, so no token travels to another host."""
    return [f"a redirect was followed to another origin: {hit}" for hit in run.seen.sink_requests]


CHECKS: dict[str, Callable[[Outcome], list[str]]] = {
    "exit": check_exit,
    "time": check_time,
    "memory": check_memory,
    "reports": check_reports,
    "html": check_html,
    "junit": check_junit,
    "logs": check_logs,
    "markdown": check_markdown,
    "secrets": check_secrets,
    "redirects": check_redirects,
    "reached": check_reached,
}


# ---------------------------------------------------------------------------------- the fixtures


class Runs:
    """Each scenario run once, on first use, against one served simulator. Its report.html is
    opened in Chromium in the background at once (its check comes after every run's other checks),
    so the browser overlaps the next run instead of adding to the file's time."""

    def __init__(self, sim: ServedSimulator, root: Path, browser: ThreadPoolExecutor) -> None:
        self.sim, self.root, self.browser = sim, root, browser
        self.done: dict[str, Outcome] = {}

    def of(self, scenario: Scenario) -> Outcome:
        if scenario.name not in self.done:
            run = _run(scenario, self.sim, self.root / scenario.name)
            page = run.report("report.html")
            if CHROMIUM is not None and page is not None:
                run.dom = self.browser.submit(outputs.dump_dom, CHROMIUM, page)
            self.done[scenario.name] = run
        return self.done[scenario.name]


def table(done: dict[str, Outcome]) -> str:
    """scenario | class | answer | exit | wall | peak RSS | each check: the closing note's table."""
    head = ["scenario", "class", "answer", "exit", "wall s", "peak RSS MiB", *CHECKS]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in done.values():
        m = run.measured
        exit_shown = str(m.exit) if m.exit is not None else m.ended
        cells = [run.scenario.name, run.scenario.klass, run.scenario.answer.describe(), exit_shown]
        cells += [f"{m.wall:.1f}", f"{m.rss_mib:.0f}", *(run.results.get(name, "-") for name in CHECKS)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("hostile")
    with ThreadPoolExecutor(1) as browser, ServedSimulator(instead="the hostile-server kit needs knowledge-sim") as sim:
        kept = Runs(sim, root, browser)
        yield kept
    written = tmp_path_factory.getbasetemp() / TABLE
    written.write_text(table(kept.done), "utf-8")
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and kept.done:
        terminal.write_line(f"\nhostile targets ({written}):\n{table(kept.done)}")


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Debian's chromium, proven to run an injected script with the kit's flags."""
    if CHROMIUM is None:
        if os.environ.get("KC_REQUIRE_BROWSER") == "1":
            pytest.fail("KC_REQUIRE_BROWSER=1 but no chromium is installed")
        pytest.skip("no chromium on this machine (CI installs it)")
    assert outputs.chromium_runs_scripts(CHROMIUM, tmp_path_factory.mktemp("canary")), "chromium ran no script"
    return CHROMIUM


def _case(scenario: Scenario, check: str) -> object:
    reason = scenario.pending.get(check)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(scenario, check, id=f"{scenario.name}-{check}", marks=marks)


def _cases() -> list[object]:
    """Each scenario's checks in turn, the browser's last (see ``Runs``)."""
    first = [_case(scenario, check) for scenario in SCENARIOS for check in CHECKS if check != "html"]
    return first + [_case(scenario, "html") for scenario in SCENARIOS]


@pytest.mark.parametrize(("scenario", "check"), _cases())
def test_hostile_target(runs: Runs, scenario: Scenario, check: str, request: pytest.FixtureRequest) -> None:
    if check == "html":
        request.getfixturevalue("chromium")
    run = runs.of(scenario)
    run.results[check] = "FAIL"
    problems = CHECKS[check](run)
    run.results[check] = "FAIL" if problems else "ok"
    assert not problems, f"{scenario.name} ({scenario.klass}), {check}:\n" + "\n".join(problems)


def test_a_browser_whose_start_failed_with_efault_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """execve of the browser failed once with EFAULT in a loaded full run: it never ran, so one
    more start judges the page; any other start failure is still the error it is."""
    import errno
    import subprocess

    calls: list[list[str]] = []

    def flaky(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if len(calls) == 1:
            raise OSError(errno.EFAULT, "Bad address", cmd[0])
        return subprocess.CompletedProcess(cmd, 0, "<html><body></body></html>", "")

    monkeypatch.setattr(subprocess, "run", flaky)
    page = tmp_path / "page.html"
    page.write_text("<html></html>", "utf-8")
    assert outputs.dump_dom("chromium", page) == "<html><body></body></html>" and len(calls) == 2

    def missing(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        raise OSError(errno.ENOENT, "No such file", cmd[0])

    monkeypatch.setattr(subprocess, "run", missing)
    with pytest.raises(FileNotFoundError):
        outputs.dump_dom("chromium", page)
