"""The MCP surfaces of seed 000: the Agent Session path (``search_business_knowledge`` and
``read_business_knowledge`` after the authorized turn) over every transport given, and the
Fixed Client Token stdio path (exactly the three job tools).

Each transport gets one warm session per run (a stdio server is a process: spawning one per
test would cost seconds each). Its first calls, made before any turn, are kept to judge
turn-first ordering; a session counts as fresh only when nothing else can have started a
turn for it (a new process, or an Agent Session minted for the MCP checks alone)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from conformance.clients.core import Wire
from conformance.mcp import raw
from conformance.mcp.endpoints import skipped
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
    hits,
    refused,
    said,
    serving,
    success,
    turn_mode,
)
from conformance.mcp.rules import (
    MCP_001,
    MCP_002,
    MCP_004,
    MCP_005,
    MCP_008,
    MCP_010,
    MCP_011,
    MCP_012,
    MCP_013,
)
from conformance.mcp.session import McpSession, ToolResult
from conformance.plugin.options import option
from conformance.server.expiry import ages
from conformance.server.world import Who, World
from conformance.target import contract as C
from conformance.target.config import TargetConfig
from conformance.target.open import Target
from conformance.target.outcomes import ContractViolation, NotVerified
from conformance.target.rules import expect
from knowledge_schemas.mcp import CHOSEN_ARGUMENTS, JOB_TOOLS, KNOWLEDGE_TOOLS, TRANSPORTS

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
        MCP_010,
        f"{what} was refused as {sorted({str(c) for c in codes if c})} with feedback next_action "
        f"{feedback.get('next_action')!r}, expected search_knowledge",
    )
    return True


# ----------------------------------------------------------------- tests
@R("MCP-001", "MCP-005")
def test_the_knowledge_tools_are_listed_before_and_after_the_turn(agent: Agent) -> None:
    before = {t.name for t in agent.tools_before}
    listed = {t.name for t in agent.session.tools()}
    for name in KNOWLEDGE_TOOLS:
        expect(name in before or name in listed, MCP_001, f"the Agent Session MCP path does not list {name}")
        expect(name in before, MCP_005, f"{name} is not listed before the turn")
    agent.start_turn("zz-no-such-capability-" + uuid.uuid4().hex[:8])  # a turn that hits nothing
    after = {t.name for t in agent.session.tools()}
    expect(set(KNOWLEDGE_TOOLS) <= after, MCP_005, f"after a turn without hits the tools are {sorted(after)}")


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


def _own_refs_only(agent: Agent, result: ToolResult, what: str) -> None:
    """A search that succeeded despite injected arguments ignored them: every ref it gave reads in the
    session's own current run, route and identity."""
    hints = [h for h in (said(result) or {}).get("hints", []) if isinstance(h, dict) and isinstance(h.get("ref"), str)]
    if hints:
        page = agent.session.call(READ, {"ref": hints[0]["ref"]})
        expect(not refused(page), MCP_008, f"a ref from a search with {what} is not the session's own: {clipped(page)}")


@R("MCP-008")
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
        expect(not chosen, MCP_008, f"{tool.name} lets a model choose {chosen}")
    who = agent.who or world.primary
    doc = world.docs.get("unicode")
    query = doc.token if doc else kc_config.probe_query
    # The delivery mode is a trusted host option: the model asks for the other mode than the host's own.
    wire = Wire(world.control) if world.control is not None and world.control.offers("transcript") else None
    _, own = turn_mode(agent.session, who, wire)
    if own is not None:
        asked = "inline" if own == "on_demand" else "on_demand"
        _, got = turn_mode(agent.session, who, wire, {"knowledge_delivery": asked, "knowledgeDelivery": asked})
        expect(got in (None, own), MCP_008, f"{TURN} let the model choose {asked} delivery (the host's is {own})")
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
            _own_refs_only(agent, injected, what)
        try:
            ref = world.ref_for(run_id, doc, them)
        except NotVerified:
            continue
        if not refused(agent.session.call(READ, {"ref": ref})):
            continue  # the session itself reads it: a read with the injection then shows nothing
        page = agent.session.call(READ, {"ref": ref, **_chosen(them, run_id)})
        expect(
            refused(page), MCP_008, f"a read with {what} in its arguments read that run's reference: {clipped(page)}"
        )


@R("MCP-004", "MCP-006", "MCP-010")
def test_knowledge_calls_before_the_turn_are_refused(agent: Agent) -> None:
    if not agent.fresh:
        pytest.skip("not verified: this MCP session may share its current run (no fresh Agent Session without control)")
    for name, result in ((SEARCH, agent.search_before), (READ, agent.read_before)):
        expect(
            result.is_error or result.protocol_error is not None,
            MCP_004,
            f"{name} before any turn was accepted: {clipped(result)}",
        )
        failure(name, result)


@R("MCP-001", "MCP-006", "MCP-009")
def test_search_and_read_succeed_with_flags_and_structured_content(
    agent: Agent, world: World, kc_config: TargetConfig
) -> None:
    doc = world.docs.get("unicode")
    hints = hits(agent, doc.token if doc else kc_config.probe_query)
    if not hints:
        pytest.skip("not verified: the search found nothing to read")
    page = agent.session.call(READ, {"ref": hints[0]["ref"], "max_bytes": 4096})
    success(agent, READ, page, "mcp-read-result")


@R("MCP-006", "MCP-010")
def test_failures_are_is_error_with_feedback(agent: Agent) -> None:
    failure(READ, agent.session.call(READ, {"ref": "kc-not-a-reference-" + uuid.uuid4().hex}), reference=True)
    failure(READ, agent.session.call(READ, {"ref": "kc-ref", "max_bytes": 100}))


@R("MCP-004", "MCP-010")
def test_reads_bind_the_current_run(agent: Agent, world: World, kc_config: TargetConfig) -> None:
    doc = world.docs.get("unicode")
    hints = hits(agent, doc.token if doc else kc_config.probe_query)
    if not hints:
        pytest.skip("not verified: the search found nothing to read")
    agent.start_turn("a later turn")
    stale = agent.session.call(READ, {"ref": hints[0]["ref"]})
    expect(
        stale.is_error or stale.protocol_error is not None,
        MCP_004,
        "a reference of the previous turn's run was read in the current run",
    )
    failure(READ, stale, reference=True)


@R("MCP-004", "MCP-010")
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
    with serving(MCP_001, pair, kc_config.timeout_seconds) as (first, second):  # judged after the block: a check
        # failing inside would reach pytest in a task group
        turns = [first.call(TURN, {"user_input": "knowledge"}), second.call(TURN, {"user_input": "knowledge"})]
        found = first.call(SEARCH, {"query": query})
        hints = [
            h for h in (said(found) or {}).get("hints", []) if isinstance(h, dict) and isinstance(h.get("ref"), str)
        ]
        own = first.call(READ, {"ref": hints[0]["ref"]}) if hints else None
        foreign = second.call(READ, {"ref": hints[0]["ref"]}) if hints else None
    for turn in turns:
        expect(not refused(turn), MCP_004, f"{TURN} failed: {clipped(turn)}")
    if own is None or foreign is None or refused(own):
        pytest.skip("not verified: the first session's search gave no reference it reads itself")
    expect(
        refused(foreign),
        MCP_004,
        "a reference of one Agent Session's current run was read by another Agent Session of the same account",
    )
    if foreign.protocol_error is None:  # a binding mismatch: a reference error, which says search again
        _says_search_again(foreign, "a read of another Agent Session's reference")


@R("MCP-011")
def test_mcp_and_http_read_chains_agree(agent: Agent, world: World) -> None:
    doc = world.need_doc("cuts")  # escapes, astral characters and combining sequences at every page cut
    run_id = world.start_run()
    http_pages = world.follow(world.ref_for(run_id, doc), run_id)  # first: HTTP delivers this document
    if "".join(str(p.get("content", "")) for p in http_pages) != doc.content:
        # The Core's own chain is wrong (READ-015's to judge): a faithful MCP path relays that.
        raise NotVerified("not verified: the Core's HTTP read chain does not rebuild the document either")

    def read(args: dict[str, Any]) -> ToolResult:
        """What HTTP just delivered, the MCP path must deliver too: its failing to answer at all
        (unparseable JSON-RPC, a dropped or hung session) is a disagreement, not a harness error."""
        answer = call(agent.session, READ, args)
        if isinstance(answer, str):
            raise ContractViolation(MCP_011, f"the MCP read of a document HTTP delivers got no result: {answer}")
        return answer

    found: dict[str, Any] | None = None
    for hint in hits(agent, doc.token):
        page = read({"ref": hint["ref"]})
        if not page.is_error and doc.token in str((said(page) or {}).get("content", "")):
            found = hint
            break
    if found is None:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document")
    assert found is not None
    pages, cursor, consumed, empty = [], None, 0, 0
    while consumed <= C.READ_CHAIN_MAX_BYTES and empty < 8:  # bounded by the chain budget, never by a page count
        args: dict[str, Any] = {"ref": found["ref"], **({"cursor": cursor} if cursor else {})}
        body = success(agent, READ, read(args), "mcp-read-result")
        pages.append(body)
        size = len(str(body.get("content", "")).encode("utf-8"))
        consumed, empty = consumed + size, 0 if size else empty + 1
        cursor = body.get("next_cursor")
        if not cursor:
            break
    mcp_text, http_text = "".join(str(p["content"]) for p in pages), "".join(p["content"] for p in http_pages)
    expect(
        mcp_text == doc.content,
        MCP_011,
        f"the MCP read chain ({len(mcp_text)} characters) does not rebuild the stored document "
        f"({len(doc.content)} characters), which the HTTP chain ({len(http_text)} characters) delivers",
    )
    if agent.strict:  # the same pages on both wires is this project's reading (CHOICES.md)
        expect(
            [p["revision"] for p in pages][:1] == [p["revision"] for p in http_pages][:1],
            MCP_011,
            "strict: the revisions differ",
        )
        expect(
            len(pages) == len(http_pages),
            MCP_011,
            f"strict: {len(pages)} MCP pages, {len(http_pages)} HTTP pages at the same size",
        )


MCP_MEMBERS = ("dispatch", "business_operation_performed")  # what the MCP path adds to the Core's page


def _page_bytes(body: dict[str, Any]) -> int:
    """The page as the Core's JSON, at its smallest (compact, UTF-8): the members the MCP path adds are
    left out, and no serialization of the same members is shorter, so this never asks more than the seed."""
    page = {k: v for k, v in body.items() if k not in MCP_MEMBERS}
    return len(json.dumps(page, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@R("MCP-011")
@pytest.mark.parametrize("max_bytes", (C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES))
def test_mcp_pages_keep_a_requested_max_bytes(agent: Agent, world: World, max_bytes: int) -> None:
    """Bounds are the Core's, not the adapter's: a read chain over MCP at a non-default ``max_bytes``
    has every page within it (the complete page JSON, as over HTTP), on every page of the chain."""
    doc = world.need_doc("unicode")  # multi-byte text, several pages at either size
    found = [
        h for h in hits(agent, doc.token) if doc.token in str(said(agent.session.call(READ, {"ref": h["ref"]})) or "")
    ]
    if not found:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document", doc)
    cursor, pages, consumed = None, 0, 0
    while consumed <= C.READ_CHAIN_MAX_BYTES and pages < C.READ_CHAIN_MAX_BYTES // 1024:
        args: dict[str, Any] = {
            "ref": found[0]["ref"],
            "max_bytes": max_bytes,
            **({"cursor": cursor} if cursor else {}),
        }
        body = success(agent, READ, agent.session.call(READ, args), "mcp-read-result")
        size = _page_bytes(body)
        expect(
            size <= max_bytes,
            MCP_011,
            f"MCP read page {pages + 1} at max_bytes {max_bytes} is {size} bytes of page JSON (without the MCP flags)",
        )
        pages, consumed = pages + 1, consumed + len(str(body.get("content", "")).encode("utf-8"))
        cursor = body.get("next_cursor")
        if not cursor:
            break


@R("MCP-010")
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
    with serving(MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):  # judged after the block (a task group)
        turn = call(session, TURN, {"user_input": "knowledge"})
        if not isinstance(turn, str) and not refused(turn):
            for what, change in changes:
                ref = issue(session)
                if ref is not None:
                    change()
                answers.append((what, None if ref is None else call(session, READ, {"ref": ref})))
    if isinstance(turn, str) or refused(turn):
        MCP_004.fail(f"{TURN} failed: {turn if isinstance(turn, str) else clipped(turn)}")
    judged = []
    for what, answer in answers:
        if isinstance(answer, str):
            MCP_010.fail(f"a reference {what} crashed the read instead of an isError result with feedback ({answer})")
        if isinstance(answer, ToolResult) and refused(answer) and _says_search_again(answer, f"a reference {what}"):
            judged.append(what)
    if not judged:
        pytest.skip(
            "not verified: no read of an expired or changed reference was refused with a reference-family code "
            f"({', '.join(w for w, a in answers if a is None) or 'each was read or refused otherwise'})"
        )


@R("MCP-013", "MCP-010")
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
        MCP_010.fail(f"{TURN} after a lost turn response crashed instead of answering ({result})")
    if refused(result):
        MCP_013.held()  # no retry is asked for: a failure claims no run, so it cannot claim a second one
        return
    body = said(result)
    run_id = body.get("run_id") if isinstance(body, dict) else None
    expect(
        run_id == committed["run_id"],
        MCP_013,
        f"{TURN} retried a turn whose response was lost and returned run {run_id!r}; the Core committed "
        f"{committed['run_id']!r} for the original turn",
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


@R("MCP-012")
def test_the_streamable_http_endpoint_refuses_a_foreign_origin(
    world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """DNS-rebinding protection, on the HTTP transport only: the MCP transport says servers MUST
    validate ``Origin``, so a request from a foreign web origin is refused (any 4xx; the transport's
    403 under strict): a plain foreign name, and foreign origins that start with or contain a
    loopback name (``localhost.`` + a foreign domain, a loopback name as user-info or path), which
    a check by prefix or substring lets through. The transport asks nothing of ``Host``; refusing
    a foreign one is this project's choice, checked only under strict (CHOICES.md)."""
    from conformance.mcp.endpoints import agent_endpoints

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
    expect(not served, MCP_012, f"the streamable-HTTP endpoint did not refuse a foreign origin: {'; '.join(served)}")
    if kc_config.strict_codes:
        other = [f"HTTP {r.status} to Origin {o}" for o, r in answers.items() if r.status != 403]
        expect(not other, MCP_012, f"strict: a foreign Origin got another status than 403: {'; '.join(other)}")
        host = raw.initialize(endpoint.url, timeout, token=endpoint.token, host=FOREIGN)
        expect(
            not _initialized(host) and 400 <= host.status < 500,
            MCP_012,
            f"strict: the streamable-HTTP endpoint answered HTTP {host.status} to Host {FOREIGN} (CHOICES.md)",
        )


@R("MCP-002")
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
    with serving(MCP_002, [endpoint], kc_config.timeout_seconds) as (session,):
        names = sorted(t.name for t in session.tools())
        calls = [
            (name, call(session, name, {"query": kc_config.probe_query, "ref": "kc-ref", "user_input": "x"}))
            for name in unlisted
        ]
    served = [name for name, result in calls if isinstance(result, ToolResult) and not refused(result)]
    expect(
        not served,
        MCP_002,
        f"the Client Token path serves {served} when called, though it may expose only the job tools",
    )
    knowledge = sorted(set(names) & {*KNOWLEDGE_TOOLS, TURN})
    expect(not knowledge, MCP_002, f"the Client Token path lists knowledge tools {knowledge}")
    expect(
        names == sorted(JOB_TOOLS),
        MCP_002,
        f"the Client Token path lists {names}, expected exactly {sorted(JOB_TOOLS)}",
    )
