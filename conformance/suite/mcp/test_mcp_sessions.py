"""A streamable-HTTP MCP session is bound to the route and credential that opened it: its
``Mcp-Session-Id`` presented on another route's URL, or with another account's token, never acts
with the original session's identity, route or run (seed 000: "Model arguments cannot choose an
identity, route, connection or run"; a session ID is what a client sends, so no more trusted)."""

from __future__ import annotations

import pytest

from conformance.mcp import raw
from conformance.mcp.endpoints import agent_endpoints, skipped
from conformance.mcp.results import SEARCH, TURN
from conformance.mcp.rules import MCP_004, MCP_008
from conformance.plugin.options import option
from conformance.server.world import World
from conformance.target.config import TargetConfig
from conformance.target.open import Target
from conformance.target.rules import expect

R = pytest.mark.requirement


@R("MCP-008")
def test_a_session_id_acts_only_for_the_route_and_credential_that_opened_it(
    world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """A session of a fresh Agent Session starts a turn and searches. Its session ID is then sent
    with a search by a fresh Agent Session of another route (on that route's URL) and of another
    account (on the same URL): neither has started a turn, so a search that succeeds acted in
    the original session's run. A refusal (any 4xx, or an ``isError`` result) holds."""
    chosen = option(pytestconfig, "--mcp-target")
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    control = world.need_control("mint Agent Sessions that have started no turn")
    other = world.others.get("other_route")
    minted = {
        "its own": control.mint("alice", world.route),
        "another account's": control.mint("bob", world.route),
        **({"another route's": control.mint("alice", other.route)} if other is not None else {}),
    }
    ends = {
        k: agent_endpoints(kc_config, kc_target, chosen, m["token"], m["route"]).get("http") for k, m in minted.items()
    }
    own = ends["its own"]
    if own is None:
        pytest.skip("not verified: no Agent Session MCP server over streamable HTTP")
    timeout = kc_config.timeout_seconds
    session_id = raw.opened(own.url, own.token, timeout)
    if session_id is None:
        pytest.skip("not verified: the streamable-HTTP endpoint keeps no session (no Mcp-Session-Id)")
    query = {"query": kc_config.probe_query}
    turn = raw.tool_call(own.url, TURN, {"user_input": "knowledge"}, timeout, token=own.token, session_id=session_id)
    expect(raw.succeeded(turn), MCP_004, f"{TURN} failed in a fresh session (HTTP {turn.status})")
    if not raw.succeeded(raw.tool_call(own.url, SEARCH, query, timeout, token=own.token, session_id=session_id)):
        pytest.skip("not verified: the session's own search after its turn did not succeed")
    probed = 0
    for whose, endpoint in ends.items():
        if whose == "its own" or endpoint is None or endpoint.token == own.token:
            continue  # one configured token for every session: no other credential to present
        answer = raw.tool_call(endpoint.url, SEARCH, query, timeout, token=endpoint.token, session_id=session_id)
        probed += 1
        expect(
            not raw.succeeded(answer),
            MCP_008,
            f"a session's Mcp-Session-Id presented with {whose} credential (on its route's URL) served {SEARCH} "
            "for an Agent Session that started no turn: the session's identity, route and run were carried over",
        )
    if not probed:
        pytest.skip(
            "not verified: the MCP server takes one configured token, so no other credential can present the ID"
        )
