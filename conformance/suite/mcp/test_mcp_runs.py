"""Whose run an Agent Session tool acts in: never one a model argument chooses (identity, route,
connection, run or delivery), only the session's current run (a previous turn's reference or
another session's is refused, and a refused reference says search again), and a turn whose
response was lost is the run the Core committed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from conformance.clients.core import Wire
from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.common.outcomes import NotVerified
from conformance.common.rules import expect
from conformance.mcp import rules as mcp
from conformance.mcp.endpoints import skipped
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
    flags,
    hints,
    hits,
    refused,
    said,
    serving,
    turn_mode,
)
from conformance.plugin.options import option
from conformance.server.expiry import ages
from conformance.server.world import Who, World
from knowledge_schemas.mcp import CHOSEN_ARGUMENTS, TRANSPORTS

if TYPE_CHECKING:
    from conformance.mcp.session import McpSession

R = pytest.mark.requirement


def _reference_family(code: Any) -> bool:
    """``knowledge_reference_*`` / ``knowledge_*changed``: the codes of a changed, invalid or expired reference (seed 000)."""
    return isinstance(code, str) and (
        code.startswith("knowledge_reference_") or (code.startswith("knowledge_") and code.endswith("changed"))
    )


def _says_search_again(result: ToolResult, what: str) -> bool:
    """A refused read whose feedback (or the Core error it carries) has a code of the reference family
    says next_action search_knowledge (MCP-010); True when it was judged. A refusal with another code is
    not judged here: whether the Core's code is right is the REF rules' matter, over HTTP."""
    feedback = failure(READ, result)
    body = said(result)
    error = body.get("error") if isinstance(body, dict) else None
    codes = [feedback.get("code"), error.get("error") if isinstance(error, dict) else error]
    if not any(_reference_family(c) for c in codes):
        return False
    expect(
        feedback.get("next_action") == "search_knowledge",
        mcp.MCP_010,
        f"{what} was refused as {sorted({str(c) for c in codes if c})} with feedback next_action "
        f"{feedback.get('next_action')!r}, expected search_knowledge",
    )
    return True


def _chosen(who: Who, run_id: str | None = None) -> dict[str, Any]:
    """Arguments that would make a call act for ``who`` (its token, account, session and route) and, given
    one, in ``run_id``: every spelling a server might honour (MCP-008)."""
    out: dict[str, Any] = {"token": who.token, "access_token": who.token, "authorization": f"Bearer {who.token}"}
    out.update({"route": who.route, "workspace": who.route, "account": who.account, "identity": who.account})
    out.update({"session_id": who.session, "session": who.session, "connection": who.session})
    out.update({"connection_key": who.session, "connectionKey": who.session})
    if run_id:
        out.update({"run_id": run_id, "runId": run_id})
    return out


def _own_refs_only(agent: Agent, result: ToolResult, query: str, what: str) -> None:
    """A search that succeeded despite injected arguments ignored them: every ref it gave reads in the
    session's own current run, route and identity. When a ref of the same search without them is
    refused too, the injection is not what bound it elsewhere: the session's searches do not bind
    its current run (MCP-004)."""
    found = hints(result)
    if not found:
        return
    page = agent.session.call(READ, {"ref": found[0]["ref"]})
    if not refused(page):
        mcp.MCP_008.held()
        return
    plain = hints(agent.session.call(SEARCH, {"query": query}))
    own = agent.session.call(READ, {"ref": plain[0]["ref"]}) if plain else None
    expect(
        own is None or not refused(own),
        mcp.MCP_004,
        f"a ref from a search with {what} is refused in the current run, and so is one from the same search "
        f"without them: the session's searches are not bound to its current run: {clipped(own or page)}",
    )
    mcp.MCP_008.fail(f"a ref from a search with {what} is not the session's own: {clipped(page)}")


@R(mcp.MCP_008, mcp.MCP_004)
def test_inputs_admit_no_identity_route_connection_run_or_delivery(
    agent: Agent, world: World, kc_config: TargetConfig
) -> None:
    """Every model-visible argument is probed: no tool declares one that chooses an identity, route,
    connection, run or delivery mode, and a call that carries one anyway is refused or acts for the
    session alone (CHOICES.md "MCP tool arguments"). What would choose is always a real, valid
    value of elsewhere (another run of this Agent Session, another account's or route's token and
    run), so honouring it shows as a success where the session's own binding refuses."""
    for tool in agent.session.tools():
        declared = set((tool.input_schema or {}).get("properties", {}))
        chosen = sorted(declared & set(CHOSEN_ARGUMENTS))
        expect(not chosen, mcp.MCP_008, f"{tool.name} lets a model choose {chosen}")
    who = agent.who or world.primary
    doc = world.docs.get("unicode")
    query = doc.token if doc else kc_config.probe_query
    # The delivery mode is a trusted host option: the model asks for the other mode than the host's own.
    wire = Wire(world.control) if world.control is not None and world.control.offers("transcript") else None
    _, own = turn_mode(agent.session, who, wire)
    if own is not None:
        asked = "inline" if own == "on_demand" else "on_demand"
        _, got = turn_mode(agent.session, who, wire, {"knowledge_delivery": asked, "knowledgeDelivery": asked})
        expect(got in (None, own), mcp.MCP_008, f"{TURN} let the model choose {asked} delivery (the host's is {own})")
    agent.start_turn("knowledge")  # the session's own current run again, whatever the probe did
    # Another run of this Agent Session (over HTTP), and runs of another account and of another route.
    elsewhere = [(who, world.start_run(who))]
    elsewhere += [
        (w, world.start_run(w)) for w in (world.others.get("other_account"), world.others.get("other_route")) if w
    ]
    for them, run_id in elsewhere:
        whose = "its own token" if them is who else f"the identity and route of {them.account}@{them.route}"
        what = f"{whose} and another run"
        injected = agent.session.call(SEARCH, {"query": query, **_chosen(them, run_id)})
        if not refused(injected):
            flags(injected, "an injected search")
            _own_refs_only(agent, injected, query, what)
        try:
            ref = world.ref_for(run_id, doc, them)
        except NotVerified:
            continue
        if not refused(agent.session.call(READ, {"ref": ref})):
            continue  # the session itself reads it: a read with the injection then shows nothing
        page = agent.session.call(READ, {"ref": ref, **_chosen(them, run_id)})
        expect(
            refused(page),
            mcp.MCP_008,
            f"a read with {what} in its arguments read that run's reference: {clipped(page)}",
        )


@R(mcp.MCP_004, mcp.MCP_010)
def test_reads_bind_the_current_run(agent: Agent, world: World, kc_config: TargetConfig) -> None:
    """After a new turn, a reference of the previous turn's run is refused, and the same search made
    again gives references of the current run, which read in it (a search answered from what an
    earlier run's search gave would hand back references the current run refuses)."""
    doc = world.docs.get("unicode")
    query = doc.token if doc else kc_config.probe_query
    found = hits(agent, query)
    if not found:
        pytest.skip("not verified: the search found nothing to read")
    agent.start_turn("a later turn")
    stale = agent.session.call(READ, {"ref": found[0]["ref"]})
    expect(
        stale.is_error or stale.protocol_error is not None,
        mcp.MCP_004,
        "a reference of the previous turn's run was read in the current run",
    )
    failure(READ, stale, reference=True)
    again = hits(agent, query)
    if again:
        page = agent.session.call(READ, {"ref": again[0]["ref"]})
        expect(
            not refused(page),
            mcp.MCP_004,
            f"the same search made again after a new turn gave a reference the current run refuses: {clipped(page)}",
        )


@R(mcp.MCP_004, mcp.MCP_010, mcp.MCP_001)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_each_agent_session_of_an_account_reads_in_its_own_run(
    transport: str, world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """Two Agent Sessions of one account (through control: two tokens minted for the same account,
    each its own session), each with its own current run: a reference one session's search gave
    reads in that session and is refused in the other."""
    from conformance.mcp.endpoints import agent_endpoints

    chosen = option(pytestconfig, "--mcp-target")
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    if world.control is not None:
        minted = [world.control.mint("alice", world.route) for _ in range(2)]
        a, b = (Who(m["token"], m["route"], m["account"], m["session_id"]) for m in minted)
    else:
        a, b = world.primary, world.isolated("other_session", "session")
    ends = [agent_endpoints(kc_config, kc_target, chosen, str(w.token), w.route).get(transport) for w in (a, b)]
    if ends[0] is None or ends[1] is None:
        pytest.skip(f"not verified: no Agent Session MCP server over {transport}")
    pair = (ends[0], ends[1])
    doc = world.docs.get("unicode")
    query = doc.token if doc else kc_config.probe_query
    with serving(mcp.MCP_001, pair, kc_config.timeout_seconds) as (first, second):  # judged after the block: a check
        # failing inside would reach pytest in a task group
        turns = [first.call(TURN, {"user_input": "knowledge"}), second.call(TURN, {"user_input": "knowledge"})]
        found = first.call(SEARCH, {"query": query})
        refs = hints(found)
        own = first.call(READ, {"ref": refs[0]["ref"]}) if refs else None
        foreign = second.call(READ, {"ref": refs[0]["ref"]}) if refs else None
    for turn in turns:
        expect(not refused(turn), mcp.MCP_004, f"{TURN} failed: {clipped(turn)}")
    # The first session's turn came first: its search and read still bind its own current run, never
    # the run the other session's later turn started.
    expect(
        not refused(found) and (own is None or not refused(own)),
        mcp.MCP_004,
        "after another Agent Session of the account started a turn, the first session's own search or the read "
        f"of the reference it gave was refused: its current run is not its own: {clipped(own or found)}",
    )
    if own is None or foreign is None:
        pytest.skip("not verified: the first session's search gave no reference to read")
    expect(
        refused(foreign),
        mcp.MCP_004,
        "a reference of one Agent Session's current run was read by another Agent Session of the same account",
    )
    if foreign.protocol_error is None:  # a binding mismatch: a reference error, which says search again
        _says_search_again(foreign, "a read of another Agent Session's reference")


@R(mcp.MCP_010, mcp.MCP_001, mcp.MCP_004)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_expired_and_changed_references_over_mcp_say_search_knowledge(
    transport: str, fresh_world: World, kc_config: TargetConfig, mcp_for: McpFor
) -> None:
    """Each reference-error family the control extension can produce, over MCP: a reference read
    after 300 s, after a new revision of its document, and after the account's scope dropped its
    knowledge base. A refusal with a ``knowledge_reference_*`` / ``knowledge_*changed`` code has
    feedback ``next_action: search_knowledge`` (seed 000), whichever family it is. A read the Core
    still serves, or refuses with another code, is the REF rules' matter over HTTP, not judged here.
    (An invalid reference and a previous run's or another session's reference are judged elsewhere.)"""
    world = fresh_world
    control = world.need_control("age, rewrite and re-scope references")
    endpoint = mcp_for(world.primary, (transport,), "a changed scope or revision")
    doc = world.docs["alpha"]
    changes = (
        ("read 300 s after its issue", lambda: control.advance(ages(world.cfg.clock_skew_seconds)["after"])),
        (
            "read after a new revision of its document",
            lambda: control.publish(world.route, doc.item_id, f"{doc.token} binding. A rewritten revision."),
        ),
        (
            "read after the account's scope dropped its knowledge base",
            lambda: control.set_scope(world.route, world.primary.account, ["kb-second"]),
        ),
    )

    def issue(session: McpSession) -> str | None:
        """A fresh reference of the document from a search of the session's current run, read once."""
        found = call(session, SEARCH, {"query": doc.token})
        if isinstance(found, str) or refused(found):
            return None
        for hint in (said(found) or {}).get("hints", []):
            if not isinstance(hint, dict) or not isinstance(hint.get("ref"), str):
                continue
            page = call(session, READ, {"ref": hint["ref"]})
            if (
                not isinstance(page, str)
                and not refused(page)
                and doc.token in str((said(page) or {}).get("content", ""))
            ):
                return str(hint["ref"])
        return None

    answers: list[tuple[str, ToolResult | str | None]] = []
    with serving(mcp.MCP_001, [endpoint], kc_config.timeout_seconds) as (
        session,
    ):  # judged after the block (a task group)
        turn = call(session, TURN, {"user_input": "knowledge"})
        if not isinstance(turn, str) and not refused(turn):
            for what, change in changes:
                ref = issue(session)
                if ref is not None:
                    change()
                answers.append((what, None if ref is None else call(session, READ, {"ref": ref})))
    if isinstance(turn, str) or refused(turn):
        mcp.MCP_004.fail(f"{TURN} failed: {turn if isinstance(turn, str) else clipped(turn)}")
    judged = []
    for what, answer in answers:
        if isinstance(answer, str):
            mcp.MCP_010.fail(
                f"a reference {what} crashed the read instead of an isError result with feedback ({answer})"
            )
        if isinstance(answer, ToolResult) and refused(answer) and _says_search_again(answer, f"a reference {what}"):
            judged.append(what)
    if not judged:
        pytest.skip(
            "not verified: no read of an expired or changed reference was refused with a reference-family code "
            f"({', '.join(w for w, a in answers if a is None) or 'each was read or refused otherwise'})"
        )


@R(mcp.MCP_013, mcp.MCP_010)
def test_a_turn_whose_response_was_lost_returns_the_committed_run(agent: Agent, world: World) -> None:
    """The Core commits a turn of the MCP session and loses its response (control's
    ``lose_next_turn_response``). ``start_business_turn`` may answer that as an error (the seed asks
    for no retry: a failure claims no run, which holds), but a success after its retries is the
    original idempotent turn, so its ``run_id`` is the run the Core committed (read back with
    ``GET /faults/lost``), never a second one."""
    control = world.need_control("lose a turn response")
    who = agent.who or world.primary
    before = control.lost_responses(who.route)
    if before is None:
        pytest.skip(
            "not verified: the control extension cannot read back a lost response (GET /faults/lost), "
            "so the committed run is unknown"
        )
    control.fault("lose_next_turn_response", who.route)
    result = call(agent.session, TURN, {"user_input": "homepage binding"})
    withheld = control.lost(who.route)[len(before) :]
    committed = withheld[-1].get("body") if withheld else None
    if isinstance(committed, str):
        try:
            committed = json.loads(committed)
        except ValueError:
            committed = None
    if not isinstance(committed, dict) or "run_id" not in committed:
        pytest.skip(
            f"not verified: the lose fault withheld no turn response of this MCP session's route {who.route!r} "
            f"({len(withheld)} new)"
        )
    if isinstance(result, str):
        mcp.MCP_010.fail(f"{TURN} after a lost turn response crashed instead of answering ({result})")
    if refused(result):
        mcp.MCP_013.held()  # no retry is asked for: a failure claims no run, so it cannot claim a second one
        return
    body = said(result)
    run_id = body.get("run_id") if isinstance(body, dict) else None
    expect(
        run_id == committed["run_id"],
        mcp.MCP_013,
        f"{TURN} retried a turn whose response was lost and returned run {run_id!r}; the Core committed "
        f"{committed['run_id']!r} for the original turn",
    )
