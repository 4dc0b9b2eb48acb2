"""The Agent Session tools of seed 000 (``search_business_knowledge`` and
``read_business_knowledge``, listed before the turn, refused until it, isError results with
feedback) over every transport given, and the Fixed Client Token stdio path (exactly the three
job tools).

Each transport gets one warm session per run (a stdio server is a process: spawning one per
test would cost seconds each). Its first calls, made before any turn, are kept to judge
turn-first ordering; a session counts as fresh only when nothing else can have started a
turn for it (a new process, or an Agent Session minted for the MCP checks alone)."""

from __future__ import annotations

import uuid

import pytest

from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.common.rules import expect
from conformance.mcp import rules as mcp
from conformance.mcp.endpoints import skipped
from conformance.mcp.records import ToolResult
from conformance.mcp.results import (
    READ,
    SEARCH,
    TURN,
    Agent,
    call,
    clipped,
    failure,
    hits,
    refused,
    serving,
    success,
)
from conformance.plugin.options import option
from conformance.server.world import World
from knowledge_schemas.mcp import JOB_TOOLS, KNOWLEDGE_TOOLS

R = pytest.mark.requirement


@R(mcp.MCP_001, mcp.MCP_005)
def test_the_knowledge_tools_are_listed_before_and_after_the_turn(agent: Agent) -> None:
    before = {t.name for t in agent.tools_before}
    listed = {t.name for t in agent.session.tools()}
    for name in KNOWLEDGE_TOOLS:
        expect(name in before or name in listed, mcp.MCP_001, f"the Agent Session MCP path does not list {name}")
        expect(name in before, mcp.MCP_005, f"{name} is not listed before the turn")
    agent.start_turn("zz-no-such-capability-" + uuid.uuid4().hex[:8])  # a turn that hits nothing
    after = {t.name for t in agent.session.tools()}
    expect(set(KNOWLEDGE_TOOLS) <= after, mcp.MCP_005, f"after a turn without hits the tools are {sorted(after)}")


@R(mcp.MCP_004, mcp.MCP_006, mcp.MCP_010)
def test_knowledge_calls_before_the_turn_are_refused(agent: Agent) -> None:
    if not agent.fresh:
        pytest.skip("not verified: this MCP session may share its current run (no fresh Agent Session without control)")
    for name, result in ((SEARCH, agent.search_before), (READ, agent.read_before)):
        expect(
            result.is_error or result.protocol_error is not None,
            mcp.MCP_004,
            f"{name} before any turn was accepted: {clipped(result)}",
        )
        failure(name, result)


@R(mcp.MCP_001, mcp.MCP_006, mcp.MCP_009)
def test_search_and_read_succeed_with_flags_and_structured_content(
    agent: Agent, world: World, kc_config: TargetConfig
) -> None:
    doc = world.docs.get("unicode")
    hints = hits(agent, doc.token if doc else kc_config.probe_query)
    if not hints:
        pytest.skip("not verified: the search found nothing to read")
    page = agent.session.call(READ, {"ref": hints[0]["ref"], "max_bytes": 4096})
    success(agent, READ, page, "mcp-read-result")


@R(mcp.MCP_006, mcp.MCP_010)
def test_failures_are_is_error_with_feedback(agent: Agent) -> None:
    failure(READ, agent.session.call(READ, {"ref": "kc-not-a-reference-" + uuid.uuid4().hex}), reference=True)
    failure(READ, agent.session.call(READ, {"ref": "kc-ref", "max_bytes": 100}))


@R(mcp.MCP_002)
def test_client_token_stdio_exposes_exactly_the_job_tools(
    kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    from conformance.mcp.endpoints import job_endpoint

    chosen = option(pytestconfig, "--mcp-target")
    endpoint = job_endpoint(kc_config, kc_target, chosen)
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    if endpoint is None:
        pytest.skip("not verified: no Fixed Client Token stdio server ([mcp].jobs_command)")
    unlisted = (*KNOWLEDGE_TOOLS, TURN, "search_knowledge")
    with serving(mcp.MCP_002, [endpoint], kc_config.timeout_seconds) as (session,):
        names = sorted(t.name for t in session.tools())
        calls = [
            (name, call(session, name, {"query": kc_config.probe_query, "ref": "kc-ref", "user_input": "x"}))
            for name in unlisted
        ]
    served = [name for name, result in calls if isinstance(result, ToolResult) and not refused(result)]
    expect(
        not served,
        mcp.MCP_002,
        f"the Client Token path serves {served} when called, though it may expose only the job tools",
    )
    knowledge = sorted(set(names) & {*KNOWLEDGE_TOOLS, TURN})
    expect(not knowledge, mcp.MCP_002, f"the Client Token path lists knowledge tools {knowledge}")
    expect(
        names == sorted(JOB_TOOLS),
        mcp.MCP_002,
        f"the Client Token path lists {names}, expected exactly {sorted(JOB_TOOLS)}",
    )
