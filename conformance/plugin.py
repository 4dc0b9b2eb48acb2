"""pytest plugin: target options, the ``requirement`` marker, fixtures, and the
reports written at the end of a suite run (in the main process only)."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from conformance import __version__

MARKER = "requirement"
_STATE = pytest.StashKey[dict[str, Any]]()
_EXERCISED = pytest.StashKey[set[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("knowledge-conformance", "knowledge contract conformance")
    group.addoption("--target", default="sim", help="sim (in-process, default), sim+http (loopback) or the URL of a live Core")
    group.addoption("--target-config", default=None, help="TOML file: route, identities, control, wire overrides, tolerances")
    group.addoption("--sim-quirk", action="append", default=[], help="run the bundled simulator with this deliberate deviation")
    group.addoption("--sim-seed", type=int, default=0, help="seed of the bundled simulator")
    group.addoption("--no-control", action="store_true", help="do not use the test-control extension during tests")
    group.addoption("--realtime", action="store_true", help="wait real seconds for expiry when there is no control")
    group.addoption("--rate-limit", type=float, default=0.0, help="at most this many requests per second to the target")
    group.addoption("--reports", "--report-dir", dest="reports", default="reports", help="folder for results.json, report.md, report.html, junit.xml")
    group.addoption("--fail-on", choices=("must", "should"), default="must", help="which failures make the run non-conformant")
    group.addoption("--waivers", default=None, help="TOML file of [[waiver]] id, justification, expires")
    group.addoption("--requirement", action="append", default=[], help="run only tests tagged with this requirement ID")
    group.addoption("--stateful-examples", type=int, default=None, help="examples of the stateful model (default 20; deep: 200)")
    group.addoption("--stateful-steps", type=int, default=None, help="steps per example of the stateful model (default 25; deep: 60)")
    group.addoption("--deep", action="store_true", help="release-gating depth for the stateful model and negative testing")
    group.addoption("--no-shrink", action="store_true", help="report the first failing generated sequence without minimising it (faster)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(*ids): requirement IDs of the catalogue that this test verifies")
    config.stash[_STATE] = {"started": time.time()}


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _ids(item: pytest.Item) -> list[str]:
    return [rid for mark in item.iter_markers(MARKER) for rid in mark.args]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    tagged = [i for i in items if _ids(i)]
    if not tagged:
        return
    from knowledge_schemas import load_catalogue

    catalogue = load_catalogue()
    unknown = sorted({rid for i in tagged for rid in _ids(i) if rid not in catalogue})
    if unknown:
        raise pytest.UsageError(f"tests name requirement IDs missing from the catalogue: {', '.join(unknown)}")
    wanted = set(config.getoption("--requirement"))
    if wanted:
        bad = sorted(wanted - set(catalogue.ids))
        if bad:
            raise pytest.UsageError(f"--requirement: unknown ID(s) {', '.join(bad)}")
        keep = [i for i in items if wanted & set(_ids(i))]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    for item in items:
        item.user_properties.append(("requirements", json.dumps(_ids(item))))
    config.stash[_STATE]["suite"] = True
    if items:
        _prepare(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"knowledge-conformance {__version__}: target={config.getoption('--target')}"
            + (f" quirks={','.join(config.getoption('--sim-quirk'))}" if config.getoption("--sim-quirk") else "")]


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def kc_config(pytestconfig: pytest.Config) -> Any:
    """The configuration checked before collection ended (see _prepare)."""
    return pytestconfig.stash[_STATE]["config"]


def _prepare(config: pytest.Config) -> None:
    """Load the target configuration and reach a live target before any test runs.

    A bad setup (missing file, unset secret, unreachable URL) is a usage error
    (exit 4) with one clear message, never a wall of failed requirements."""
    from conformance.config import ConfigError, load_config

    try:
        cfg = load_config(config.getoption("--target-config"), target=config.getoption("--target"))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    cfg.sim_quirks = tuple(config.getoption("--sim-quirk"))
    cfg.sim_seed = config.getoption("--sim-seed")
    cfg.realtime = config.getoption("--realtime")
    cfg.rate_limit = config.getoption("--rate-limit")
    if not cfg.is_sim:
        import httpx

        try:
            httpx.get(cfg.target, timeout=min(cfg.timeout_seconds, 10.0))
        except httpx.HTTPError as exc:
            raise pytest.UsageError(f"--target {cfg.target}: cannot reach it ({type(exc).__name__}: {exc})") from None
    config.stash[_STATE]["config"] = cfg


@pytest.fixture(scope="session")
def kc_target(kc_config: Any, pytestconfig: pytest.Config) -> Iterator[Any]:
    from conformance.target import open_target

    target = open_target(kc_config)
    pytestconfig.stash[_STATE]["recorder"] = target.recorder
    pytestconfig.stash[_STATE]["base_url"] = target.base_url
    pytestconfig.stash[_STATE]["target"] = target.description
    pytestconfig.stash[_STATE]["control_available"] = target.has_control
    yield target
    target.close()


@pytest.fixture(scope="session")
def core(kc_target: Any, kc_config: Any) -> Any:
    from conformance.wire import CoreWire

    return CoreWire(kc_target.http, kc_config)


@pytest.fixture(scope="session")
def _provisioner(kc_target: Any) -> Any:
    from conformance.wire import ControlWire

    if not kc_target.has_control:
        return None
    return ControlWire(kc_target.http, kc_target.control_url, kc_target.control_token)


@pytest.fixture(scope="session")
def control(_provisioner: Any, pytestconfig: pytest.Config) -> Any:
    """Control for tests; None when the target has none or --no-control is given."""
    return None if pytestconfig.getoption("--no-control") else _provisioner


@pytest.fixture(scope="session")
def world(kc_config: Any, core: Any, _provisioner: Any, control: Any) -> Any:
    """The shared world: provisioned through control when the target has it (even
    with --no-control, as an operator would set up a test tenant), else configured."""
    from conformance.world import provision

    if _provisioner is None and "primary" not in kc_config.identities:
        pytest.skip("not verified: no identities configured and no control extension to mint them")
    built = provision(kc_config, core, _provisioner)
    built.control = control
    return built


@pytest.fixture
def fresh_world(kc_config: Any, core: Any, control: Any) -> Any:
    """An isolated workspace for a test that changes state (mode, scope, revisions)."""
    from conformance.world import provision

    if control is None:
        pytest.skip("not verified: needs the test-control extension to provision an isolated workspace")
    return provision(kc_config, core, control, large=False)


@pytest.fixture
def record_exercised(request: pytest.FixtureRequest) -> Any:
    """For tests whose reach depends on the target or on generated steps: register the
    requirement IDs whose checks really ran.

    The set is reported with the test's result; a passing test then verifies only
    those of its tagged IDs, and the others stay not verified."""

    def register(ids: set[str]) -> None:
        request.node.stash[_EXERCISED] = ids

    return register


# ------------------------------------------------------------------ results
def pytest_runtest_setup(item: pytest.Item) -> None:
    recorder = item.config.stash[_STATE].get("recorder")
    if recorder is not None:
        recorder.current = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    exercised = item.stash.get(_EXERCISED, None)
    if report.when == "call" and exercised is not None:
        report.user_properties.append(("exercised", json.dumps(sorted(exercised))))
    if not _ids(item) or report.passed:
        return
    from conformance.checks import ContractViolation

    if call.excinfo is not None and isinstance(call.excinfo.value, ContractViolation):
        report.user_properties.append(("violated", call.excinfo.value.requirement))
    if report.failed and call.excinfo is not None:
        report.user_properties.append(("message", f"{call.excinfo.typename}: {call.excinfo.value}"[:2000]))
        sequence = _failing_sequence(report.longreprtext)
        if sequence:
            report.user_properties.append(("sequence", json.dumps(sequence)))
    state = item.config.stash[_STATE]
    recorder = state.get("recorder")
    if report.failed and recorder is not None and recorder.current:
        base = state.get("base_url", "")
        exchanges = [{**asdict(e), "curl": e.curl(base)} for e in recorder.current[-4:]]
        report.user_properties.append(("exchanges", json.dumps(exchanges)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props: dict[str, Any] = dict(report.user_properties)
    if "requirements" not in props:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed) or (report.when == "teardown" and report.failed):
        from conformance.report.results import TestResult

        detail = ""
        if report.skipped:
            longrepr = report.longrepr
            message = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
            outcome = "skipped"
        elif report.failed:
            detail = report.longreprtext[-4000:]
            message = props.get("message") or (detail.strip().splitlines() or ["test failed"])[-1]
            outcome = "failed" if report.when == "call" else "error"
        else:
            message, outcome = "", "passed"
        _pending.append(TestResult(
            report.nodeid, outcome, json.loads(props["requirements"]), props.get("violated"), message,
            json.loads(props.get("exchanges", "[]")), round(report.duration, 4),
            json.loads(props["exercised"]) if "exercised" in props else None,
            json.loads(props["sequence"]) if "sequence" in props else None, detail,
        ))


_pending: list[Any] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash[_STATE]
    if _is_worker(config) or not state.get("suite") or not _pending:
        return
    from conformance.config import redact_url
    from conformance.report.results import VERDICT_EXIT, RunInfo, aggregate, load_waivers
    from conformance.report.writers import write_all
    from knowledge_schemas import load_catalogue
    from knowledge_schemas.catalogue import catalogue_version

    try:
        waivers = load_waivers(config.getoption("--waivers"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    recorder = state.get("recorder")
    info = RunInfo(
        suite_version=__version__, catalogue_version=catalogue_version(),
        target=state.get("target", redact_url(config.getoption("--target"))), configuration=_configuration(config, state),
        hypothesis=_hypothesis(config), started=dt.datetime.fromtimestamp(state["started"], dt.UTC).isoformat(timespec="seconds"),
        duration_seconds=time.time() - state["started"], requests=recorder.count if recorder else 0, fail_on=config.getoption("--fail-on"),
    )
    run = aggregate(load_catalogue(), list(_pending), info, waivers=waivers, today=dt.date.today())
    _pending.clear()
    paths = write_all(run, Path(config.getoption("--reports")))
    state["run"] = run
    state["paths"] = paths
    if exitstatus in (0, 1):
        session.exitstatus = VERDICT_EXIT[run.verdict]


_STEP = re.compile(r"^(?:E\s+)?(state = \w+\(\)|state\.\w+\(.*\)|\w+ = state\.\w+\(.*\))\s*$")


def _failing_sequence(longrepr: str) -> list[str]:
    """The minimal failing program Hypothesis printed for a stateful test, one step a line."""
    return [m.group(1) for m in map(_STEP.match, longrepr.splitlines()) if m]


def _configuration(config: pytest.Config, state: dict[str, Any]) -> dict[str, Any]:
    """The run's settings, as a reader needs them to reproduce it; never a secret."""
    cfg = state.get("config")
    options = {name: config.getoption(name) for name in ("--no-control", "--realtime", "--rate-limit", "--deep", "--no-shrink",
                                                         "--stateful-examples", "--stateful-steps", "--requirement", "--sim-quirk",
                                                         "--sim-seed", "--waivers")}
    out: dict[str, Any] = {name.lstrip("-").replace("-", "_"): value for name, value in options.items()}
    out["target_config"] = config.getoption("--target-config")
    if cfg is not None:
        out["control_available"] = state.get("control_available", False)
        out["strict_codes"] = cfg.strict_codes
        out["clock_skew_seconds"] = cfg.clock_skew_seconds
        out["wire"] = cfg.wire
        out["identities"] = sorted(cfg.identities)
    return out


def _hypothesis(config: pytest.Config) -> dict[str, Any]:
    """Generated tests are derandomized: the same suite version and target replay the same cases."""
    seed = config.getoption("hypothesis_seed", None)
    return {"derandomize": True, "seed": None if seed is None else str(seed)}


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash[_STATE].get("run")
    if run is None:
        return
    s = run.summary
    terminalreporter.section("knowledge contract verdict")
    terminalreporter.write_line(f"VERDICT: {run.verdict.upper()}  (server MUSTs verified {s['server_must_verified']}/{s['server_must_total']}; "
                                f"requirements verified {s['verified']}, failed {s['failed']}, waived {s['waived']}, not verified {s['not_verified']}; "
                                f"{run.requests} requests to the target)")
    for r in run.requirements:
        if r.status in ("failed", "waived"):
            terminalreporter.write_line(f"  {r.status.upper():7} {r.id} {r.title}: {r.reason[:160]}")
    for w in run.warnings:
        terminalreporter.write_line(f"  warning: {w}")
    for kind, path in config.stash[_STATE]["paths"].items():
        terminalreporter.write_line(f"  {kind:8} {path}")
