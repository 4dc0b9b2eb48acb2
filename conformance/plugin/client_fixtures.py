"""Fixtures of a client run (``--harness``): the Core, its world, the running harness.

Registered by the plugin only when ``--harness`` is given. Bad harness options are a usage
error (exit 4) before anything starts. The Core, its world and the harness start once, when
the session starts: a harness that does not start is one harness error with its reason on
one line (verdict ``error``, reports written), and no test runs; a harness that breaks the
protocol later is a harness error of the checks it broke.
"""

from __future__ import annotations

import pytest

from conformance.clients.session import Session
from conformance.common.control import Control
from conformance.common.outcomes import HarnessError
from conformance.common.secrets import clip, scrub
from conformance.common.untrusted import shown
from conformance.plugin.options import option
from conformance.plugin.state import STATE, ClientInfo, ClientRun


def pytest_configure(config: pytest.Config) -> None:
    from conformance.clients.protocol import usage_problem

    problem = usage_problem(option(config, "--harness"), option(config, "--harness-timeout"), "--harness-timeout")
    if problem is not None:
        raise pytest.UsageError(scrub(problem))


def _start(config: pytest.Config) -> None:
    """Serve (or reach) the Core, build the world, start the harness; everything started is kept
    in the state as soon as it runs, so that the end of the session stops it whatever failed."""
    from conformance.clients.core import DEFAULT_CONTROL_TOKEN
    from conformance.clients.protocol import Harness
    from conformance.clients.scope import gate
    from conformance.clients.world import build
    from conformance.common.secrets import SECRETS
    from conformance.common.served import ServedSimulator
    from conformance.common.transport import Recorder
    from knowledge_schemas import load_catalogue

    state = config.stash[STATE]
    state.recorder = Recorder()
    parts = state.client_run
    url, token = option(config, "--harness-core"), option(config, "--harness-control-token")
    if url is None:
        parts.served = served = ServedSimulator(seed=0, frozen_clock=True, instead="give --harness-core URL")
        url, token = served.url, served.control_token
    token = token or DEFAULT_CONTROL_TOKEN
    SECRETS.add(token)
    parts.control = control = Control.of_core(url, token)
    parts.world = world = build(control, url, state.settings.run_id)
    parts.harness = running = Harness(option(config, "--harness"), timeout=option(config, "--harness-timeout"))
    info = running.start(world.core_url, list(world.connections.values()))
    client, tool = info["client"], info["harness"]
    who = f"{client['name']} {client['version']} (harness {tool['name']} {tool['version']}"
    who += f", {info['language']})" if info.get("language") else ")"
    surfaces = list(info["surfaces"])
    state.client = ClientInfo(
        f"client {who}",
        [
            {
                "surface": s,
                "label": f"{s} harness",
                "checked": s in surfaces,
                "detail": who if s in surfaces else "the harness does not declare this surface",
            }
            for s in ("client", "host")
        ],
        tuple(gate(load_catalogue(), surfaces)),
    )
    parts.session = Session(running, world, control, surfaces, strict=bool(option(config, "--harness-strict")))


def _xdist_controller(config: pytest.Config) -> bool:
    """The controller of an xdist run runs no test: its workers start their own harness."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _failed(config: pytest.Config, exc: HarnessError) -> None:
    """The one account of a harness that did not start: its reason on the console and in the reports.
    The reason and the harness's stderr may quote the harness: both are shown through
    ``untrusted.shown`` (a line of its stderr starting with ``::`` would be a CI command)."""
    from conformance.report.results import TestResult

    state = config.stash[STATE]
    reason = shown(str(exc)).splitlines()[0] if str(exc).strip() else type(exc).__name__
    state.harness_failed = reason
    running = state.client_run.harness
    tail = shown(clip(running.stderr_tail(), -2000)) if running is not None else ""
    command = option(config, "--harness")
    state.client = ClientInfo(
        scrub(f"client harness {command} (it did not start)"),
        [
            {
                "surface": "client",
                "label": "client harness",
                "checked": False,
                "detail": f"the harness did not start: {reason}",
            }
        ],
        (),
    )
    state.pending.append(
        TestResult(
            nodeid="<harness start>",
            outcome="error",
            requirements=[],
            violated=None,
            message=f"the harness did not start: {reason}"[:2000],
            detail=f"harness stderr (last lines):\n{tail}" if tail else "",
        )
    )
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"harness error: the harness did not start: {reason}", red=True)
        if tail:
            reporter.write_line("harness stderr (last lines):")
            for line in tail.splitlines():
                reporter.write_line(f"  {line}")


@pytest.hookimpl(trylast=True)  # after the plugin's check of --harness-core (a usage error)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or _xdist_controller(config):
        return
    try:
        _start(config)
    except HarnessError as exc:
        _failed(config, exc)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """No test runs after the harness failed to start: each would only repeat that reason."""
    if session.config.stash[STATE].harness_failed is not None and not hasattr(session.config, "workerinput"):
        return True
    return None


def _started(config: pytest.Config) -> Session:
    state = config.stash[STATE]
    if state.harness_failed is not None:  # an xdist worker: its tests still run, each names the reason
        raise HarnessError(f"the harness did not start: {state.harness_failed}")
    if state.client_run.session is None:
        raise HarnessError("the harness was not started at the start of the session")
    return state.client_run.session


@pytest.fixture(scope="session")
def hc_control(pytestconfig: pytest.Config) -> Control:
    return _started(pytestconfig).control


@pytest.fixture(scope="session")
def harness(pytestconfig: pytest.Config, hc_control: Control) -> Session:
    return _started(pytestconfig)


@pytest.hookimpl(tryfirst=True)  # before the plugin writes the reports: they count the Core's requests
def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash[STATE]
    parts, state.client_run = state.client_run, ClientRun()
    if parts.harness is not None:
        parts.harness.close(stop=state.harness_failed is None)
    if parts.world is not None:
        parts.world.close()
    control = parts.control
    if control is not None:
        try:
            requests = len(control.transcript()) if control.created else 0
        except HarnessError:
            requests = 0  # the Core went away: the checks that needed it already say so
        control.cleanup()
        control.close()
        if state.recorder is not None:
            state.recorder.count = requests
    if parts.served is not None:
        parts.served.close()
