"""Negotiation behind the Agent Session tools: ``start_business_turn`` is a client of the Core's
capabilities like any other (seed 000: "capabilities.supported ? { knowledgeDelivery: 'on_demand' }
: {}"). It asks for on_demand where the Core supports it; only an old Core's 404/405/501 gets a
plain turn; a service failure or an unknown schema is an error, never an old Core and never
support; and the tools stay listed, proving nothing, in front of a legacy Core."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.clients import rules as clients
from conformance.clients.core import Wire
from conformance.common.config import TargetConfig
from conformance.common.outcomes import NotVerified
from conformance.common.rules import expect
from conformance.mcp import rules as mcp
from conformance.mcp.records import ToolResult
from conformance.mcp.results import (
    READ,
    SEARCH,
    TURN,
    Agent,
    McpFor,
    call,
    clipped,
    failure,
    refused,
    serving,
    turn_mode,
)
from conformance.server import checks
from conformance.server.world import World
from knowledge_schemas.mcp import KNOWLEDGE_TOOLS, TRANSPORTS

R = pytest.mark.requirement


def _wire(world: World) -> Wire | None:
    """The transcript of what reached the Core, where control offers it."""
    return Wire(world.control) if world.control is not None and world.control.offers("transcript") else None


@R(clients.TURN_002, mcp.MCP_001)
def test_start_business_turn_asks_a_supporting_core_for_on_demand(agent: Agent, world: World) -> None:
    """Where the route's capabilities offer on_demand, the turn the tool starts asks for it
    (``knowledge_delivery: on_demand`` in the Core turn request, read from the transcript, or the
    mode the turn's result reports)."""
    if not checks.advertises_on_demand(world):
        pytest.skip("not verified: the route's capabilities do not offer on_demand with knowledge enabled")
    turn, mode = turn_mode(agent.session, agent.who or world.primary, _wire(world))
    if isinstance(turn, str) or refused(turn):
        mcp.MCP_001.fail(f"{TURN} failed: {turn if isinstance(turn, str) else clipped(turn)}")
    if mode is None:
        pytest.skip("not verified: neither the transcript nor the turn's result shows its delivery mode")
    expect(
        mode == "on_demand",
        clients.TURN_002,
        f"{TURN} started a {mode} turn though the Core's capabilities offer on_demand",
    )


ARMED = 3
"""Canned capabilities answers armed at once: an adapter that asks again after a failure (up to
twice more) still sees only the failure, so a success is never owed to a retry's real answer."""
UNKNOWN_SCHEMA = "bailing.agent-knowledge-capabilities.v9"


def _canned(world: World, failure_kind: str) -> tuple[int, Any]:
    """The status and body capabilities answers: a service failure, or the route's own answer
    under a schema identifier no contract names."""
    if failure_kind != "unknown_schema":
        return int(failure_kind), {"error": "service_unavailable"}
    response = world.core.capabilities(world.primary.token, world.route)
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:  # not JSON: the capabilities rules' matter, nothing to alter here
        body = None
    if not isinstance(body, dict):
        raise NotVerified(f"the route's capabilities answered HTTP {response.status_code}, not a body to alter")
    return 200, {**body, world.cfg.names.capabilities.get("schema_version", "schema_version"): UNKNOWN_SCHEMA}


@R(clients.NEG_002, clients.NEG_003, mcp.MCP_010, mcp.MCP_001)
@pytest.mark.parametrize("failure_kind", ["500", "503", "unknown_schema"])
def test_a_capabilities_failure_is_no_old_core_and_no_support_over_mcp(
    failure_kind: str, fresh_world: World, kc_config: TargetConfig, mcp_for: McpFor
) -> None:
    """Seed 000: "authorization, service failures and unknown schemas are not a successful empty
    knowledge result". Capabilities answers a 5xx, or 200 with an unknown schema identifier, to a
    new MCP session's ``start_business_turn``: an error (isError with feedback) holds, and so does
    an on_demand turn after a 5xx (a retry may have reached the real answer); a plain turn takes
    the failure for an old Core (NEG-002), and an on_demand turn while the unknown schema is still
    the answer takes it for support (NEG-003)."""
    world = fresh_world
    control = world.need_control("make capabilities fail")
    if not checks.advertises_on_demand(world):
        pytest.skip("not verified: the route's capabilities do not offer on_demand with knowledge enabled")
    endpoint = mcp_for(world.primary, TRANSPORTS, "a failing capabilities")
    status, body = _canned(world, failure_kind)
    for _ in range(ARMED):
        control.respond_next(world.route, "capabilities", status, body)
    what = f"capabilities answered {'an unknown schema' if failure_kind == 'unknown_schema' else f'HTTP {status}'}"
    with serving(mcp.MCP_001, [endpoint], kc_config.timeout_seconds) as (
        session,
    ):  # judged after the block (a task group)
        turn, mode = turn_mode(session, world.primary, _wire(world))
    if isinstance(turn, str):
        mcp.MCP_010.fail(f"{TURN} crashed after {what} ({turn})")
    assert isinstance(turn, ToolResult)
    if refused(turn):
        failure(TURN, turn)
        (clients.NEG_003 if failure_kind == "unknown_schema" else clients.NEG_002).held()
        return
    expect(
        mode != "inline", clients.NEG_002, f"{TURN} started a plain turn after {what}: a failure taken for an old Core"
    )
    if mode is None:
        pytest.skip(
            f"not verified: {TURN} succeeded after {what}, in a mode neither the transcript nor its result shows"
        )
    if failure_kind != "unknown_schema":
        clients.NEG_002.held()
        return
    still = world.core.capabilities(world.primary.token, world.route)
    if still.status_code != 200 or UNKNOWN_SCHEMA not in still.text:
        pytest.skip("not verified: the adapter asked capabilities until the canned unknown schema ran out")
    clients.NEG_003.fail(f"{TURN} started an on_demand turn while {what}: an unknown schema taken for support")


@R(mcp.MCP_005, mcp.MCP_006, clients.MCP_007, mcp.MCP_010, mcp.MCP_001)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_legacy_core_behind_the_tools_is_not_supported(
    transport: str, fresh_world: World, kc_config: TargetConfig, mcp_for: McpFor
) -> None:
    """The tools stay listed in front of a Core that does not speak the knowledge protocol, and
    their presence proves nothing: a search or read is a clear failure with feedback, never a
    success and never a crash. Legacy mode is switched on through control for a workspace of
    this test alone, so the check needs an MCP server that can act on any route (the bundled
    simulator's); a configured server is bound to its own route and identity."""
    who = fresh_world.primary
    endpoint = mcp_for(fresh_world.primary, (transport,), "a legacy workspace")
    fresh_world.need_control("set the workspace's mode").set_mode(fresh_world.route, "legacy")
    legacy = fresh_world.core.capabilities(who.token, fresh_world.route).status_code
    if legacy not in kc_config.wire["legacy"]["unsupported_statuses"]:  # the precondition, not a rule of the Core
        pytest.skip(
            f"not verified: the control extension's legacy mode left capabilities answering HTTP {legacy}, "
            "not an old Core's 404/405/501"
        )
    what = f"behind a legacy Core ({transport})"
    calls = (
        (TURN, {"user_input": "knowledge"}),
        (SEARCH, {"query": kc_config.probe_query}),
        (READ, {"ref": "kc-ref-of-an-old-core"}),
    )
    # judged after the block: a check failing inside would reach pytest wrapped in a task group
    with serving(mcp.MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):
        listed = {t.name for t in session.tools()}
        results = [(name, call(session, name, arguments)) for name, arguments in calls]
    expect(set(KNOWLEDGE_TOOLS) <= listed, mcp.MCP_005, f"{what} the tools are {sorted(listed)}")
    for name, result in results:
        if isinstance(result, str):
            mcp.MCP_010.fail(f"{what} {name} crashed instead of answering isError with feedback ({result})")
            continue
        if name == TURN:
            if result.is_error or result.protocol_error is not None:
                failure(TURN, result)  # a refused turn is a failure like any other: isError with feedback
                expect(not _plain_turn_accepted(fresh_world), clients.MCP_007, _plain_turn_refused(what, result))
            continue
        expect(
            result.is_error or result.protocol_error is not None,
            clients.MCP_007,
            f"{what} {name} answered as a success, taking the tools' presence as knowledge support: {clipped(result)}",
        )
        failure(name, result)


OLD_CODES = {405: "method_not_allowed", 501: "not_implemented"}


@R(clients.MCP_007, mcp.MCP_010, mcp.MCP_001)
@pytest.mark.parametrize("status", sorted(OLD_CODES))
def test_every_old_core_status_gets_a_plain_turn_over_mcp(
    status: int, fresh_world: World, kc_config: TargetConfig, mcp_for: McpFor
) -> None:
    """Seed 000: "Only old endpoint statuses 404/405/501 become supported: false". The legacy test
    above sees the status the control extension's legacy mode answers (404 for the bundled
    simulator); here capabilities answers each other old status once (control's ``respond_next``),
    in front of that legacy workspace, to a new MCP session. Its ``start_business_turn`` may not
    fail where the old Core starts a plain turn. One transport suffices (the negotiation does not
    depend on it): streamable HTTP when there is one."""
    world = fresh_world
    control = world.need_control("make capabilities answer an old status")
    endpoint = mcp_for(world.primary, ("http", "stdio"), "an old Core's status")
    control.set_mode(world.route, "legacy")
    # no specific error code, as an old server's framework answers (CONVENTIONS: "404/405/501 (with no
    # specific error code) mean not supported"); a specific code would be a new Core's error
    control.respond_next(world.route, "capabilities", status, {"error": OLD_CODES[status]})
    with serving(mcp.MCP_001, [endpoint], kc_config.timeout_seconds) as (
        session,
    ):  # judged after the block (a task group)
        result = call(session, TURN, {"user_input": "knowledge"})
    what = f"behind an old Core whose capabilities answered {status} ({endpoint.transport})"
    if isinstance(result, str):
        mcp.MCP_010.fail(f"{what} {TURN} crashed instead of answering ({result})")
        return
    refused = result.is_error or result.protocol_error is not None
    if refused and not _plain_turn_accepted(world):
        pytest.skip(f"not verified: {what} {TURN} failed, and so does a plain turn of the Core itself")
    expect(not refused, clients.MCP_007, _plain_turn_refused(what, result))


@R(clients.MCP_007, mcp.MCP_010, mcp.MCP_001)
def test_a_route_error_on_capabilities_is_no_old_core_over_mcp(
    fresh_world: World, kc_config: TargetConfig, mcp_for: McpFor
) -> None:
    """Strict (CHOICES.md): a 404 carrying a specific code (``route_unavailable``) is a new Core's
    error, never an old Core (CONVENTIONS), so ``start_business_turn`` fails with it rather than
    starting a plain turn. The seed's words alone ("404/405/501 become supported: false") allow
    either reading, so a default run judges only that the tool answers (MCP-010)."""
    world = fresh_world
    control = world.need_control("make capabilities answer a route error")
    endpoint = mcp_for(world.primary, ("http", "stdio"), "a route error")
    control.respond_next(world.route, "capabilities", 404, {"error": "route_unavailable"})
    with serving(mcp.MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):
        result = call(session, TURN, {"user_input": "knowledge"})
    if isinstance(result, str):
        mcp.MCP_010.fail(f"{TURN} crashed after capabilities answered 404 route_unavailable ({result})")
        return
    mcp.MCP_010.held()
    if not kc_config.strict_codes:
        return
    expect(
        result.is_error or result.protocol_error is not None,
        clients.MCP_007,
        f"strict: capabilities answered 404 route_unavailable and {TURN} started a turn ({clipped(result)}): "
        "a specific code is a new Core's error, never an old Core (CHOICES.md)",
    )


def _plain_turn_accepted(world: World) -> bool:
    """Whether the Core itself starts a plain turn (no ``knowledge_delivery``) for the world's
    primary identity. Asked after ``start_business_turn`` failed in front of an old Core: if the
    Core takes a plain turn, the MCP server asked it for something else, the knowledge delivery
    an old Core does not know, taking anything but capabilities as proof of support (MCP-007;
    seed 000: "capabilities.supported ? { knowledgeDelivery: 'on_demand' } : {}"). A Core that
    refuses the plain turn too decides nothing about the MCP server."""
    who = world.primary
    return world.core.turn(who.token, who.route, world.core.turn_body("knowledge", None)).status_code == 200


def _plain_turn_refused(what: str, refused: ToolResult) -> str:
    return (
        f"{what} {TURN} failed ({clipped(refused)}), though the old Core starts a plain turn for the same identity "
        "(HTTP 200 without knowledge_delivery): capabilities decide, and an old Core gets a plain turn"
    )
