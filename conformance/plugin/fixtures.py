"""The suite's fixtures. Registered by the plugin only in sessions that run the suite,
so a project that merely has this package installed never sees ``world`` or ``core``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from conformance.plugin.state import STATE
from knowledge_schemas.mcp import TRANSPORTS

if TYPE_CHECKING:
    from conformance.common.config import TargetConfig
    from conformance.common.control import Control
    from conformance.common.open import Target
    from conformance.common.settings import RunSettings
    from conformance.mcp.records import NotServing
    from conformance.mcp.results import Agent, McpFor
    from conformance.server.expiry import Clock, ExpiryProbes
    from conformance.server.wire import CoreWire
    from conformance.server.world import Stated, World


@pytest.fixture(scope="session")
def kc_config(pytestconfig: pytest.Config) -> TargetConfig:
    """The configuration checked before any test ran (see plugin.prepare)."""
    return pytestconfig.stash[STATE].config


@pytest.fixture(scope="session")
def kc_settings(pytestconfig: pytest.Config) -> RunSettings:
    """The run's settings, built once from the options (see plugin.prepare)."""
    return pytestconfig.stash[STATE].settings


@pytest.fixture(scope="session")
def kc_target(kc_config: TargetConfig, kc_settings: RunSettings, pytestconfig: pytest.Config) -> Iterator[Target]:
    from conformance.common.open import open_target

    target = open_target(kc_config, kc_settings)
    state = pytestconfig.stash[STATE]
    state.recorder = target.recorder
    state.base_url = target.base_url
    yield target
    target.close()


@pytest.fixture(scope="session")
def core(kc_target: Target, kc_config: TargetConfig, kc_settings: RunSettings) -> CoreWire:
    from conformance.server.wire import CoreWire

    return CoreWire(kc_target.http, kc_config, kc_settings.namespace)


@pytest.fixture(scope="session")
def _provisioner(kc_target: Target, pytestconfig: pytest.Config) -> Iterator[Control | None]:
    """Control for setting up worlds; at the end it removes every workspace the run created."""
    from conformance.common.control import Control

    if kc_target.control_url is None or kc_target.control_token is None:
        yield None
        return
    control = Control(
        kc_target.http, kc_target.control_url, kc_target.control_token, over_network=kc_target.app is None
    )
    yield control
    pytestconfig.stash[STATE].kept_workspaces.extend(control.cleanup())


@pytest.fixture(scope="session")
def control(_provisioner: Control | None, kc_settings: RunSettings) -> Control | None:
    """Control for tests; None when the target has none or --no-control is given."""
    return None if kc_settings.no_control else _provisioner


@pytest.fixture(scope="session")
def world(
    kc_config: TargetConfig,
    kc_settings: RunSettings,
    core: CoreWire,
    _provisioner: Control | None,
    control: Control | None,
) -> World:
    """The shared world: provisioned through control when the target has it (even
    with --no-control, as an operator would set up a test tenant), else configured."""
    from conformance.server.world import provision

    if _provisioner is None and "primary" not in kc_config.identities:
        pytest.skip("not verified: no identities configured and no control extension to mint them")
    built = provision(kc_config, core, _provisioner, realtime=kc_settings.realtime)
    built.control = control
    return built


@pytest.fixture
def fresh_world(kc_config: TargetConfig, kc_settings: RunSettings, core: CoreWire, control: Control | None) -> World:
    """An isolated workspace for a test that changes state (mode, scope, revisions)."""
    from conformance.server.world import provision

    if control is None:
        pytest.skip("not verified: needs the test-control extension to provision an isolated workspace")
    return provision(kc_config, core, control, large=False, realtime=kc_settings.realtime)


TEST_CLOCK = "KNOWLEDGE_CONFORMANCE_TEST_CLOCK"
"""For the project's own tests only: the control URL of a served simulator whose clock stands in
for real time in the realtime expiry probes (its credential in ``TEST_CLOCK + "_TOKEN"``)."""


@pytest.fixture(scope="session")
def kc_clock() -> Clock:
    """The clock the realtime expiry probes wait on: real time, unless the project's tests say otherwise."""
    import os

    from conformance.server.expiry import ControlClock, RealClock

    url = os.environ.get(TEST_CLOCK)
    if url:
        return ControlClock(url, os.environ.get(f"{TEST_CLOCK}_TOKEN", ""))
    return RealClock()


@pytest.fixture(scope="session")
def expiry_probes(world: World, kc_clock: Clock) -> ExpiryProbes:
    """Every realtime expiry probe of the run, issued together and read in one wait (on first use)."""
    from conformance.server.expiry import ExpiryProbes

    return ExpiryProbes(world, kc_clock)


REALTIME_EXPIRY = "expiry_probes"


def _waits_for_expiry(item: pytest.Item) -> bool:
    return REALTIME_EXPIRY in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --realtime the tests that read the expiry probes run last: the probes are issued
    when the run starts and waited out while every other test runs. Then, under --concurrency,
    the longest tests head the workers' shares (conformance.plugin.schedule), which keeps the
    others in their order."""
    from conformance.plugin.schedule import spread

    if config.stash[STATE].settings.realtime:
        items.sort(key=_waits_for_expiry)  # stable: the order is otherwise kept
    spread(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What imports and collection built lives as long as the run: it is frozen out of the
    collector's reach, so the full collections the MCP sessions ask for (conformance.mcp.session)
    and the interpreter's own walk only the objects tests make (a tenth of a second less each)."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _expiry_waited_in_the_background(request: pytest.FixtureRequest, kc_settings: RunSettings) -> None:
    """--realtime in one process: the five-minute expiry wait starts with the run, beside the
    other tests (under --concurrency the other workers overlap it anyway)."""
    if not kc_settings.realtime or hasattr(request.config, "workerinput"):
        return
    if not any(_waits_for_expiry(item) for item in request.session.items):
        return
    try:
        probes: ExpiryProbes = request.getfixturevalue(REALTIME_EXPIRY)
    except Exception:  # the world could not be built: the tests that need it say so themselves
        return
    others = any(not _waits_for_expiry(item) for item in request.session.items)
    if probes.world.control is None and not (others and getattr(probes.clock, "moves_the_core", False)):
        probes.start()


@pytest.fixture
def in_state(
    kc_config: TargetConfig, kc_settings: RunSettings, core: CoreWire, control: Control | None
) -> Callable[[str], Stated]:
    """A workspace in a state: one kept so by hand ([target.workspaces]), or a fresh one set through control."""
    from conformance.server.world import in_state as stated

    return lambda state: stated(kc_config, core, control, state, realtime=kc_settings.realtime)


@pytest.fixture(scope="session")
def mcp_agents(
    world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> Iterator[dict[str, Agent | NotServing]]:
    """One warm session per transport for the run (a stdio server is a process: spawning one per
    test would cost seconds each). Its first calls, made before any turn, are kept to judge
    turn-first ordering; a session counts as fresh only when nothing else can have started a
    turn for it (a new process, or an Agent Session minted for the MCP checks alone)."""
    from conformance.mcp.endpoints import agent_endpoints
    from conformance.mcp.records import NotServing
    from conformance.mcp.results import READ, SEARCH, Agent
    from conformance.plugin.options import option
    from conformance.server.world import Who

    who, fresh_http = world.primary, False
    if world.control is not None:  # an Agent Session of its own, so nothing else started a turn for it
        minted = world.control.mint("alice", world.route)
        who, fresh_http = Who(minted["token"], minted["route"], minted["account"], minted["session_id"]), True
    endpoints = agent_endpoints(kc_config, kc_target, option(pytestconfig, "--mcp-target"), str(who.token), who.route)
    agents: dict[str, Agent | NotServing] = {}
    if not endpoints:  # no MCP server to reach: the MCP SDK is not even imported (conformance.mcp.records)
        yield agents
        return
    from conformance.mcp.session import connect_each

    with connect_each(list(endpoints.values()), kc_config.timeout_seconds) as sessions:
        for transport, session in zip(endpoints, sessions, strict=True):
            if isinstance(session, NotServing):
                agents[transport] = session
                continue
            tools = session.tools()
            before_search = session.call(SEARCH, {"query": kc_config.probe_query})
            before_read = session.call(READ, {"ref": "kc-before-any-turn"})
            agents[transport] = Agent(
                transport,
                session,
                transport == "stdio" or fresh_http,
                tools,
                before_search,
                before_read,
                who=who,
                strict=kc_config.strict_codes,
            )
        yield agents


@pytest.fixture(params=TRANSPORTS)
def agent(request: pytest.FixtureRequest, mcp_agents: dict[str, Agent | NotServing]) -> Agent:
    """The warm Agent Session MCP session of one transport, after its first turn."""
    from conformance.mcp import rules as mcp
    from conformance.mcp.endpoints import skipped
    from conformance.mcp.records import NotServing
    from conformance.plugin.options import option

    found = mcp_agents.get(str(request.param))
    if found is None:
        if skipped(option(request.config, "--mcp-target")):
            pytest.skip("not verified: MCP checks skipped: --mcp-target none")
        pytest.skip(f"not verified: no Agent Session MCP server over {request.param} (--mcp-target or [mcp])")
    if isinstance(found, NotServing):
        mcp.MCP_001.fail(f"the Agent Session MCP server {found}")
    if found.turn is None:
        found.turn = found.start_turn("knowledge")
    return found


@pytest.fixture
def mcp_for(kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config) -> McpFor:
    """The Agent Session MCP server for an identity on its own (fresh) route, over the first of the
    transports given that is offered (:func:`conformance.mcp.results.route_endpoint`)."""
    from conformance.mcp.results import route_endpoint
    from conformance.plugin.options import option

    chosen = option(pytestconfig, "--mcp-target")
    return lambda who, transports, why: route_endpoint(chosen, kc_config, kc_target, who, transports, why)
