"""What binds a streamable-HTTP MCP session: its ``Mcp-Session-Id`` presented on another route's
URL, or with another account's token, never acts with the original session's identity, route or
run (seed 000: "Model arguments cannot choose an identity, route, connection or run"; a session ID
is what a client sends, so no more trusted); and a request from a foreign web origin is refused
(DNS-rebinding protection)."""

from __future__ import annotations

import pytest

from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.common.rules import expect
from conformance.mcp import raw
from conformance.mcp import rules as mcp
from conformance.mcp.endpoints import agent_endpoints, skipped
from conformance.mcp.results import SEARCH, TURN
from conformance.plugin.options import option
from conformance.server.world import World

R = pytest.mark.requirement


@R(mcp.MCP_008, mcp.MCP_004)
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
    expect(raw.succeeded(turn), mcp.MCP_004, f"{TURN} failed in a fresh session (HTTP {turn.status})")
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
            mcp.MCP_008,
            f"a session's Mcp-Session-Id presented with {whose} credential (on its route's URL) served {SEARCH} "
            "for an Agent Session that started no turn: the session's identity, route and run were carried over",
        )
    if not probed:
        pytest.skip(
            "not verified: the MCP server takes one configured token, so no other credential can present the ID"
        )


FOREIGN = "evil.knowledge-conformance.example"  # a name no MCP endpoint under test serves or trusts
FOREIGN_ORIGINS = (  # each foreign, each what a check by prefix, substring or userinfo takes for loopback
    f"http://{FOREIGN}",
    f"http://localhost.{FOREIGN}",
    f"https://127.0.0.1.{FOREIGN}",
    f"http://localhost@{FOREIGN}",
    f"http://{FOREIGN}/localhost",
    "null",  # an opaque origin (a sandboxed frame, a file:// page): no loopback page sends it
)


def _initialized(answer: raw.Posted) -> bool:
    """The endpoint served the request: a 2xx answer (a JSON-RPC result, or an event stream carrying one)."""
    return 200 <= answer.status < 300


@R(mcp.MCP_012)
def test_the_streamable_http_endpoint_refuses_a_foreign_origin(
    world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """DNS-rebinding protection, on the HTTP transport only: the MCP transport says servers MUST
    validate ``Origin``, so a request from a foreign web origin is refused (any 4xx; the transport's
    403 under strict): a plain foreign name, and foreign origins that start with or contain a
    loopback name (``localhost.`` + a foreign domain, a loopback name as user-info or path), which
    a check by prefix or substring lets through. The transport asks nothing of ``Host``; refusing
    a foreign one is this project's choice, checked only under strict (CHOICES.md)."""
    chosen = option(pytestconfig, "--mcp-target")
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    who = world.primary
    endpoint = agent_endpoints(kc_config, kc_target, chosen, str(who.token), who.route).get("http")
    if endpoint is None:
        pytest.skip("not verified: no Agent Session MCP server over streamable HTTP")
    timeout = kc_config.timeout_seconds
    baseline = raw.initialize(endpoint.url, timeout, token=endpoint.token)
    if not _initialized(baseline):
        pytest.skip(f"not verified: a plain initialize without Origin got HTTP {baseline.status}")
    answers = {
        origin: raw.initialize(endpoint.url, timeout, token=endpoint.token, origin=origin) for origin in FOREIGN_ORIGINS
    }
    served = [
        f"HTTP {r.status} to Origin {o}" for o, r in answers.items() if _initialized(r) or not 400 <= r.status < 500
    ]
    expect(
        not served, mcp.MCP_012, f"the streamable-HTTP endpoint did not refuse a foreign origin: {'; '.join(served)}"
    )
    if kc_config.strict_codes:
        other = [f"HTTP {r.status} to Origin {o}" for o, r in answers.items() if r.status != 403]
        expect(not other, mcp.MCP_012, f"strict: a foreign Origin got another status than 403: {'; '.join(other)}")
        host = raw.initialize(endpoint.url, timeout, token=endpoint.token, host=FOREIGN)
        expect(
            not _initialized(host) and 400 <= host.status < 500,
            mcp.MCP_012,
            f"strict: the streamable-HTTP endpoint answered HTTP {host.status} to Host {FOREIGN} (CHOICES.md)",
        )
