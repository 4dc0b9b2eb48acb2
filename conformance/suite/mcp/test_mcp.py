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
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from conformance.clients.core import Wire
from conformance.clients.rules import MCP_007
from conformance.mcp.endpoints import skipped
from conformance.mcp.rules import (
    MCP_001,
    MCP_002,
    MCP_004,
    MCP_005,
    MCP_006,
    MCP_008,
    MCP_009,
    MCP_010,
    MCP_011,
    MCP_012,
    MCP_013,
)
from conformance.mcp.session import Endpoint, McpSession, NotServing, ToolResult, connect_all, connect_each
from conformance.plugin.options import option
from conformance.server.expiry import ages
from conformance.server.world import Who, World
from conformance.target import contract as C
from conformance.target.config import TargetConfig
from conformance.target.open import Target
from conformance.target.outcomes import ContractViolation, NotVerified
from conformance.target.rules import Rule, expect
from conformance.target.secrets import clip
from knowledge_schemas import load_registry
from knowledge_schemas.mcp import CHOSEN_ARGUMENTS, JOB_TOOLS, KNOWLEDGE_TOOLS

R = pytest.mark.requirement
SEARCH, READ, TURN = "search_business_knowledge", "read_business_knowledge", "start_business_turn"
TRANSPORTS = ("http", "stdio")


@dataclass
class Agent:
    """A warm Agent Session MCP session and what it answered before its first turn."""

    transport: str
    session: McpSession
    fresh: bool
    tools_before: list[Any]
    search_before: ToolResult
    read_before: ToolResult
    turn: ToolResult | None = None
    who: Who | None = None  # the Agent Session the MCP session acts for
    schemas: dict[str, Any] = field(default_factory=dict)
    strict: bool = False  # codes.strict: this project's result schemas too (CHOICES.md)

    def start_turn(self, text: str) -> ToolResult:
        result = self.session.call(TURN, {"user_input": text})
        expect(not result.is_error and result.protocol_error is None, MCP_004, f"{TURN} failed: {_clip(result)}")
        return result


def _clip(result: ToolResult) -> str:
    if result.protocol_error is not None:
        return result.protocol_error[:300]
    return json.dumps(result.structured if result.has_structured else list(result.texts), ensure_ascii=False)[:300]


def _body(result: ToolResult) -> Any:
    """What the result says: its structuredContent, else its JSON text block."""
    return result.structured if result.has_structured else result.text_json()


@pytest.fixture(scope="session")
def mcp_agents(
    world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> Iterator[dict[str, Agent | NotServing]]:
    from conformance.mcp.endpoints import agent_endpoints

    who, fresh_http = world.primary, False
    if world.control is not None:  # an Agent Session of its own, so nothing else started a turn for it
        minted = world.control.mint("alice", world.route)
        who, fresh_http = Who(minted["token"], minted["route"], minted["account"], minted["session_id"]), True
    endpoints = agent_endpoints(kc_config, kc_target, option(pytestconfig, "--mcp-target"), str(who.token), who.route)
    agents: dict[str, Agent | NotServing] = {}
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
    found = mcp_agents.get(str(request.param))
    if found is None:
        if skipped(option(request.config, "--mcp-target")):
            pytest.skip("not verified: MCP checks skipped: --mcp-target none")
        pytest.skip(f"not verified: no Agent Session MCP server over {request.param} (--mcp-target or [mcp])")
    if isinstance(found, NotServing):
        MCP_001.fail(f"the Agent Session MCP server {found}")
    if found.turn is None:
        found.turn = found.start_turn("knowledge")
    return found


@contextmanager
def serving(rule: Rule, endpoints: Sequence[Endpoint], timeout: float) -> Iterator[list[McpSession]]:
    """Sessions with the servers under test, started side by side (:func:`connect_all`); one that
    does not answer ``initialize`` fails the rule of its path (MCP-001 for the Agent Session path,
    MCP-002 for the job path)."""
    with ExitStack() as stack:
        try:
            opened = stack.enter_context(connect_all(endpoints, timeout))
        except NotServing as exc:
            rule.fail(f"the {'Fixed Client Token' if rule == MCP_002 else 'Agent Session'} MCP server {exc}")
        yield opened


def _flags(result: ToolResult, what: str) -> dict[str, Any]:
    body = _body(result)
    expect(
        isinstance(body, dict), MCP_006, f"{what}: no JSON object to carry dispatch and business_operation_performed"
    )
    expect(body.get("dispatch") == "not_dispatched", MCP_006, f"{what}: dispatch is {body.get('dispatch')!r}")
    expect(
        body.get("business_operation_performed") is False,
        MCP_006,
        f"{what}: business_operation_performed is {body.get('business_operation_performed', '<missing>')!r}",
    )
    return dict(body)


def _tool(agent: Agent, name: str) -> Any:
    tools = {t.name: t for t in agent.session.tools()}
    expect(name in tools, MCP_001, f"the Agent Session MCP path does not list {name}")
    return tools[name]


SEED_MEMBERS = {  # what the seed names of a search and of a read ("hints and a status"; "original ref, revision, content, and next_cursor")
    "mcp-search-result": ("hints", "status"),
    "mcp-read-result": ("ref", "revision", "content", "next_cursor"),
}


def _success(agent: Agent, name: str, result: ToolResult, stem: str) -> dict[str, Any]:
    """A success: both flags, structuredContent valid against the declared outputSchema, the members the
    seed names of a search or a read, and a text block with the same JSON. Strict also holds it to this
    project's schema of the result (the HTTP body's shape): the conventions say only "structuredContent"."""
    expect(not result.is_error and result.protocol_error is None, MCP_001, f"{name} failed: {_clip(result)}")
    body = _flags(result, name)
    expect(result.has_structured, MCP_009, f"{name} succeeded without structuredContent")
    declared = _tool(agent, name).output_schema
    expect(isinstance(declared, dict), MCP_009, f"{name} declares no outputSchema")
    try:
        errors = sorted(_reason(e) for e in Draft202012Validator(declared).iter_errors(result.structured))
    except SchemaError as exc:
        errors = [f"the outputSchema itself is invalid: {exc.message}"]
    expect(not errors, MCP_009, f"{name} structuredContent does not match its outputSchema: {'; '.join(errors[:3])}")
    missing = [
        m for m in SEED_MEMBERS.get(stem, ()) if not isinstance(result.structured, dict) or m not in result.structured
    ]
    expect(not missing, MCP_009, f"{name} structuredContent lacks {missing}, which the seed names of its result")
    if agent.strict:
        errors = load_registry().errors(stem, result.structured)
        expect(not errors, MCP_009, f"strict: {name} structuredContent is not a {stem}: {errors[:3]} (CHOICES.md)")
    expect(result.text_json() == result.structured, MCP_009, f"{name} has no text block carrying the same JSON")
    return body


def _reason(error: Any) -> str:
    """One schema error as where and why, on one short line: jsonschema's message repeats the whole
    instance, which for a page is kilobytes of escaped text."""
    where = "/".join(map(str, error.absolute_path)) or "(the result)"
    return f"at {where}: {error.validator} {clip(repr(error.validator_value), 80)} failed"


def _failure(name: str, result: ToolResult, *, reference: bool = False) -> dict[str, Any]:
    expect(
        result.protocol_error is None,
        MCP_010,
        f"{name} answered a failing call with a JSON-RPC error, not an isError result with feedback: {_clip(result)}",
    )
    expect(result.is_error, MCP_010, f"{name} answered a failing call without isError: {_clip(result)}")
    body = _flags(result, name)
    feedback = body.get("feedback", body)
    errors = load_registry().errors("feedback", feedback)
    expect(not errors, MCP_010, f"{name} failure carries no feedback object (bailing.agent-feedback.v1): {errors[:3]}")
    if reference:
        expect(
            feedback.get("next_action") == "search_knowledge",
            MCP_010,
            f"{name} reference failure says next_action {feedback.get('next_action')!r}, expected search_knowledge",
        )
    return dict(feedback)


def _reference_family(code: Any) -> bool:
    """``knowledge_reference_*`` / ``knowledge_*changed``: the codes of a changed, invalid or expired reference (seed 000)."""
    return isinstance(code, str) and (
        code.startswith("knowledge_reference_") or (code.startswith("knowledge_") and code.endswith("changed"))
    )


def _says_search_again(result: ToolResult, what: str) -> bool:
    """A refused read whose feedback (or the Core error it carries) has a code of the reference family
    says next_action search_knowledge (MCP-010); True when it was judged. A refusal with another code is
    not judged here: whether the Core's code is right is the REF rules' matter, over HTTP."""
    feedback = _failure(READ, result)
    body = _body(result)
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


def _hits(agent: Agent, query: str) -> list[dict[str, Any]]:
    result = agent.session.call(SEARCH, {"query": query})
    body = _success(agent, SEARCH, result, "mcp-search-result")
    return [h for h in body.get("hints", []) if isinstance(h, dict) and isinstance(h.get("ref"), str)]


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


def _refused(result: ToolResult) -> bool:
    """A refusal: ``isError`` or a JSON-RPC error (as MCP itself answers an argument a tool does not declare)."""
    return result.is_error or result.protocol_error is not None


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


def _turn_mode(agent: Agent, world: World, who: Who, injected: dict[str, Any]) -> str | None:
    """The delivery mode of a turn of this session, from what reached the Core (the transcript, where
    control offers it: no ``knowledge_delivery`` is the Core's default, inline) or else from the turn's
    result; None when it is refused or neither says."""
    wire = Wire(world.control) if world.control is not None and world.control.offers("transcript") else None
    mark = wire.mark(who.route) if wire else 0
    turn = agent.session.call(TURN, {"user_input": "knowledge", **injected})
    if _refused(turn):
        return None
    sent = [
        e.get("body")
        for e in (wire.since(mark, who.route) if wire else [])
        if str(e["path"]).endswith("/turns") and e.get("session_id") in (None, who.session or e.get("session_id"))
    ]
    modes = {str(b.get("knowledge_delivery", "inline")) for b in sent if isinstance(b, dict)}
    if len(modes) == 1:
        return modes.pop()
    delivery = (_body(turn) or {}).get("knowledge_delivery")
    mode = delivery.get("mode") if isinstance(delivery, dict) else None
    return str(mode) if mode in ("inline", "on_demand") else None


def _own_refs_only(agent: Agent, result: ToolResult, what: str) -> None:
    """A search that succeeded despite injected arguments ignored them: every ref it gave reads in the
    session's own current run, route and identity."""
    hints = [h for h in (_body(result) or {}).get("hints", []) if isinstance(h, dict) and isinstance(h.get("ref"), str)]
    if hints:
        page = agent.session.call(READ, {"ref": hints[0]["ref"]})
        expect(not _refused(page), MCP_008, f"a ref from a search with {what} is not the session's own: {_clip(page)}")


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
    own = _turn_mode(agent, world, who, {})
    if own is not None:
        asked = "inline" if own == "on_demand" else "on_demand"
        got = _turn_mode(agent, world, who, {"knowledge_delivery": asked, "knowledgeDelivery": asked})
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
        if not _refused(injected):
            _flags(injected, "an injected search")
            _own_refs_only(agent, injected, what)
        try:
            ref = world.ref_for(run_id, doc, them)
        except NotVerified:
            continue
        if not _refused(agent.session.call(READ, {"ref": ref})):
            continue  # the session itself reads it: a read with the injection then shows nothing
        page = agent.session.call(READ, {"ref": ref, **_chosen(them, run_id)})
        expect(_refused(page), MCP_008, f"a read with {what} in its arguments read that run's reference: {_clip(page)}")


@R("MCP-004", "MCP-006", "MCP-010")
def test_knowledge_calls_before_the_turn_are_refused(agent: Agent) -> None:
    if not agent.fresh:
        pytest.skip("not verified: this MCP session may share its current run (no fresh Agent Session without control)")
    for name, result in ((SEARCH, agent.search_before), (READ, agent.read_before)):
        expect(
            result.is_error or result.protocol_error is not None,
            MCP_004,
            f"{name} before any turn was accepted: {_clip(result)}",
        )
        _failure(name, result)


@R("MCP-001", "MCP-006", "MCP-009")
def test_search_and_read_succeed_with_flags_and_structured_content(
    agent: Agent, world: World, kc_config: TargetConfig
) -> None:
    doc = world.docs.get("unicode")
    hints = _hits(agent, doc.token if doc else kc_config.probe_query)
    if not hints:
        pytest.skip("not verified: the search found nothing to read")
    page = agent.session.call(READ, {"ref": hints[0]["ref"], "max_bytes": 4096})
    _success(agent, READ, page, "mcp-read-result")


@R("MCP-006", "MCP-010")
def test_failures_are_is_error_with_feedback(agent: Agent) -> None:
    _failure(READ, agent.session.call(READ, {"ref": "kc-not-a-reference-" + uuid.uuid4().hex}), reference=True)
    _failure(READ, agent.session.call(READ, {"ref": "kc-ref", "max_bytes": 100}))


@R("MCP-004", "MCP-010")
def test_reads_bind_the_current_run(agent: Agent, world: World, kc_config: TargetConfig) -> None:
    doc = world.docs.get("unicode")
    hints = _hits(agent, doc.token if doc else kc_config.probe_query)
    if not hints:
        pytest.skip("not verified: the search found nothing to read")
    agent.start_turn("a later turn")
    stale = agent.session.call(READ, {"ref": hints[0]["ref"]})
    expect(
        stale.is_error or stale.protocol_error is not None,
        MCP_004,
        "a reference of the previous turn's run was read in the current run",
    )
    _failure(READ, stale, reference=True)


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
            h for h in (_body(found) or {}).get("hints", []) if isinstance(h, dict) and isinstance(h.get("ref"), str)
        ]
        own = first.call(READ, {"ref": hints[0]["ref"]}) if hints else None
        foreign = second.call(READ, {"ref": hints[0]["ref"]}) if hints else None
    for turn in turns:
        expect(not _refused(turn), MCP_004, f"{TURN} failed: {_clip(turn)}")
    if own is None or foreign is None or _refused(own):
        pytest.skip("not verified: the first session's search gave no reference it reads itself")
    expect(
        _refused(foreign),
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
        answer = _call(agent.session, READ, args)
        if isinstance(answer, str):
            raise ContractViolation(MCP_011, f"the MCP read of a document HTTP delivers got no result: {answer}")
        return answer

    found: dict[str, Any] | None = None
    for hint in _hits(agent, doc.token):
        page = read({"ref": hint["ref"]})
        if not page.is_error and doc.token in str((_body(page) or {}).get("content", "")):
            found = hint
            break
    if found is None:
        world.not_found(f"no MCP hint for {doc.token!r} reads as the document")
    assert found is not None
    pages, cursor, consumed, empty = [], None, 0, 0
    while consumed <= C.READ_CHAIN_MAX_BYTES and empty < 8:  # bounded by the chain budget, never by a page count
        args: dict[str, Any] = {"ref": found["ref"], **({"cursor": cursor} if cursor else {})}
        body = _success(agent, READ, read(args), "mcp-read-result")
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
        h for h in _hits(agent, doc.token) if doc.token in str(_body(agent.session.call(READ, {"ref": h["ref"]})) or "")
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
        body = _success(agent, READ, agent.session.call(READ, args), "mcp-read-result")
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


def _call(session: McpSession, name: str, arguments: dict[str, Any]) -> ToolResult | str:
    """A tool call's result, or what went wrong when none came back: a protocol error or a
    dropped session is the server crashing where it owes the agent an ``isError`` result."""
    try:
        return session.call(name, arguments)
    except Exception as exc:  # any exception here is the server crashing (a protocol error, a dropped session)
        return f"{type(exc).__name__}: {str(exc)[:200]}"


@R("MCP-005", "MCP-006", "MCP-007", "MCP-010")
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_legacy_core_behind_the_tools_is_not_supported(
    transport: str, fresh_world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """The tools stay listed in front of a Core that does not speak the knowledge protocol, and
    their presence proves nothing: a search or read is a clear failure with feedback, never a
    success and never a crash. Legacy mode is switched on through control for a workspace of
    this test alone, so the check needs an MCP server that can act on any route (the bundled
    simulator's); a configured server is bound to its own route and identity."""
    who = fresh_world.primary
    endpoint = _route_endpoint((transport,), fresh_world, kc_config, kc_target, pytestconfig, "a legacy workspace")
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
    with serving(MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):
        listed = {t.name for t in session.tools()}
        results = [(name, _call(session, name, arguments)) for name, arguments in calls]
    expect(set(KNOWLEDGE_TOOLS) <= listed, MCP_005, f"{what} the tools are {sorted(listed)}")
    for name, result in results:
        if isinstance(result, str):
            MCP_010.fail(f"{what} {name} crashed instead of answering isError with feedback ({result})")
            continue
        if name == TURN:
            if result.is_error or result.protocol_error is not None:
                _failure(TURN, result)  # a refused turn is a failure like any other: isError with feedback
                expect(not _plain_turn_accepted(fresh_world), MCP_007, _plain_turn_refused(what, result))
            continue
        expect(
            result.is_error or result.protocol_error is not None,
            MCP_007,
            f"{what} {name} answered as a success, taking the tools' presence as knowledge support: {_clip(result)}",
        )
        _failure(name, result)


OLD_CODES = {405: "method_not_allowed", 501: "not_implemented"}


@R("MCP-007", "MCP-010")
@pytest.mark.parametrize("status", sorted(OLD_CODES))
def test_every_old_core_status_gets_a_plain_turn_over_mcp(
    status: int, fresh_world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """Seed 000: "Only old endpoint statuses 404/405/501 become supported: false". The legacy test
    above sees the status the control extension's legacy mode answers (404 for the bundled
    simulator); here capabilities answers each other old status once (control's ``respond_next``),
    in front of that legacy workspace, to a new MCP session. Its ``start_business_turn`` may not
    fail where the old Core starts a plain turn. One transport suffices (the negotiation does not
    depend on it): streamable HTTP when there is one."""
    world = fresh_world
    control = world.need_control("make capabilities answer an old status")
    endpoint = _route_endpoint(("http", "stdio"), world, kc_config, kc_target, pytestconfig, "an old Core's status")
    control.set_mode(world.route, "legacy")
    # no specific error code, as an old server's framework answers (CONVENTIONS: "404/405/501 (with no
    # specific error code) mean not supported"); a specific code would be a new Core's error
    control.respond_next(world.route, "capabilities", status, {"error": OLD_CODES[status]})
    with serving(MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):  # judged after the block (a task group)
        result = _call(session, TURN, {"user_input": "knowledge"})
    what = f"behind an old Core whose capabilities answered {status} ({endpoint.transport})"
    if isinstance(result, str):
        MCP_010.fail(f"{what} {TURN} crashed instead of answering ({result})")
        return
    refused = result.is_error or result.protocol_error is not None
    if refused and not _plain_turn_accepted(world):
        pytest.skip(f"not verified: {what} {TURN} failed, and so does a plain turn of the Core itself")
    expect(not refused, MCP_007, _plain_turn_refused(what, result))


@R("MCP-007", "MCP-010")
def test_a_route_error_on_capabilities_is_no_old_core_over_mcp(
    fresh_world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """Strict (CHOICES.md): a 404 carrying a specific code (``route_unavailable``) is a new Core's
    error, never an old Core (CONVENTIONS), so ``start_business_turn`` fails with it rather than
    starting a plain turn. The seed's words alone ("404/405/501 become supported: false") allow
    either reading, so a default run judges only that the tool answers (MCP-010)."""
    world = fresh_world
    control = world.need_control("make capabilities answer a route error")
    endpoint = _route_endpoint(("http", "stdio"), world, kc_config, kc_target, pytestconfig, "a route error")
    control.respond_next(world.route, "capabilities", 404, {"error": "route_unavailable"})
    with serving(MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):
        result = _call(session, TURN, {"user_input": "knowledge"})
    if isinstance(result, str):
        MCP_010.fail(f"{TURN} crashed after capabilities answered 404 route_unavailable ({result})")
        return
    MCP_010.held()
    if not kc_config.strict_codes:
        return
    expect(
        result.is_error or result.protocol_error is not None,
        MCP_007,
        f"strict: capabilities answered 404 route_unavailable and {TURN} started a turn ({_clip(result)}): "
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
        f"{what} {TURN} failed ({_clip(refused)}), though the old Core starts a plain turn for the same identity "
        "(HTTP 200 without knowledge_delivery): capabilities decide, and an old Core gets a plain turn"
    )


def _route_endpoint(
    transports: tuple[str, ...],
    world: World,
    kc_config: TargetConfig,
    kc_target: Target,
    pytestconfig: pytest.Config,
    why: str,
) -> Endpoint:
    """The Agent Session MCP server for ``world``'s primary identity on its own (fresh) route, over
    the first of ``transports`` offered; skipped when the configured server is bound to its own
    route (no ``{route}``)."""
    from conformance.mcp.endpoints import agent_endpoints

    chosen = option(pytestconfig, "--mcp-target")
    if skipped(chosen):
        pytest.skip("not verified: MCP checks skipped: --mcp-target none")
    configured = [chosen] if chosen else [kc_config.mcp.get("url") or "", *(kc_config.mcp.get("command") or [])]
    if any(configured) and not any("{route}" in str(part) for part in configured):
        pytest.skip(
            f"not verified: the configured MCP server acts on its own route; {why} needs one per route "
            "({route} in its URL or command)"
        )
    offered = agent_endpoints(kc_config, kc_target, chosen, str(world.primary.token), world.route)
    endpoint = next((offered[t] for t in transports if t in offered), None)
    if endpoint is None:
        pytest.skip(f"not verified: no Agent Session MCP server over {' or '.join(transports)} for a fresh workspace")
    return endpoint


@R("MCP-010")
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_expired_and_changed_references_over_mcp_say_search_knowledge(
    transport: str, fresh_world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config
) -> None:
    """Each reference-error family the control extension can produce, over MCP: a reference read
    after 300 s, after a new revision of its document, and after the account's scope dropped its
    knowledge base. A refusal with a ``knowledge_reference_*`` / ``knowledge_*changed`` code has
    feedback ``next_action: search_knowledge`` (seed 000), whichever family it is. A read the Core
    still serves, or refuses with another code, is the REF rules' matter over HTTP, not judged here.
    (An invalid reference and a previous run's or another session's reference are judged elsewhere.)"""
    world = fresh_world
    control = world.need_control("age, rewrite and re-scope references")
    endpoint = _route_endpoint((transport,), world, kc_config, kc_target, pytestconfig, "a changed scope or revision")
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
        found = _call(session, SEARCH, {"query": doc.token})
        if isinstance(found, str) or _refused(found):
            return None
        for hint in (_body(found) or {}).get("hints", []):
            if not isinstance(hint, dict) or not isinstance(hint.get("ref"), str):
                continue
            page = _call(session, READ, {"ref": hint["ref"]})
            if (
                not isinstance(page, str)
                and not _refused(page)
                and doc.token in str((_body(page) or {}).get("content", ""))
            ):
                return str(hint["ref"])
        return None

    answers: list[tuple[str, ToolResult | str | None]] = []
    with serving(MCP_001, [endpoint], kc_config.timeout_seconds) as (session,):  # judged after the block (a task group)
        turn = _call(session, TURN, {"user_input": "knowledge"})
        if not isinstance(turn, str) and not _refused(turn):
            for what, change in changes:
                ref = issue(session)
                if ref is not None:
                    change()
                answers.append((what, None if ref is None else _call(session, READ, {"ref": ref})))
    if isinstance(turn, str) or _refused(turn):
        MCP_004.fail(f"{TURN} failed: {turn if isinstance(turn, str) else _clip(turn)}")
    judged = []
    for what, answer in answers:
        if isinstance(answer, str):
            MCP_010.fail(f"a reference {what} crashed the read instead of an isError result with feedback ({answer})")
        if isinstance(answer, ToolResult) and _refused(answer) and _says_search_again(answer, f"a reference {what}"):
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
    result = _call(agent.session, TURN, {"user_input": "homepage binding"})
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
    if _refused(result):
        MCP_013.held()  # no retry is asked for: a failure claims no run, so it cannot claim a second one
        return
    body = _body(result)
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
)


def _initialize(url: str, token: str, timeout: float, **headers: str) -> httpx.Response:
    """A bare ``initialize`` POST to a streamable-HTTP endpoint, with extra headers (``Origin``, ``Host``)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "knowledge-conformance", "version": "1"},
        },
    }
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json", **headers}
    if token:
        sent["authorization"] = f"Bearer {token}"
    with httpx.Client(timeout=timeout) as client:
        return client.post(url, json=body, headers=sent)


def _initialized(response: httpx.Response) -> bool:
    """The endpoint served the request: a 2xx answer (a JSON-RPC result, or an event stream carrying one)."""
    return 200 <= response.status_code < 300


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
    baseline = _initialize(endpoint.url, endpoint.token, timeout)
    if not _initialized(baseline):
        pytest.skip(f"not verified: a plain initialize without Origin got HTTP {baseline.status_code}")
    answers = {origin: _initialize(endpoint.url, endpoint.token, timeout, origin=origin) for origin in FOREIGN_ORIGINS}
    served = [
        f"HTTP {r.status_code} to Origin {o}"
        for o, r in answers.items()
        if _initialized(r) or not 400 <= r.status_code < 500
    ]
    expect(not served, MCP_012, f"the streamable-HTTP endpoint did not refuse a foreign origin: {'; '.join(served)}")
    if kc_config.strict_codes:
        other = [f"HTTP {r.status_code} to Origin {o}" for o, r in answers.items() if r.status_code != 403]
        expect(not other, MCP_012, f"strict: a foreign Origin got another status than 403: {'; '.join(other)}")
        host = _initialize(endpoint.url, endpoint.token, timeout, host=FOREIGN)
        expect(
            not _initialized(host) and 400 <= host.status_code < 500,
            MCP_012,
            f"strict: the streamable-HTTP endpoint answered HTTP {host.status_code} to Host {FOREIGN} (CHOICES.md)",
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
            (name, _call(session, name, {"query": kc_config.probe_query, "ref": "kc-ref", "user_input": "x"}))
            for name in unlisted
        ]
    served = [name for name, result in calls if isinstance(result, ToolResult) and not _refused(result)]
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
