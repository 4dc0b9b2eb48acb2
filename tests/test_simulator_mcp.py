"""The simulator's MCP servers: the Agent Session path over streamable HTTP (served in this
process over loopback, beside the Core API it adapts) and the Fixed Client Token job path
(its job model on an injected clock, plus one real stdio server)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import mcp_types as mtypes
import pytest

from conformance.common.open import serve_over_loopback
from conformance.common.transport import InProcessTransport
from conformance.mcp.records import Endpoint, ToolResult
from conformance.mcp.session import McpSession, connect
from knowledge_schemas.mcp import AGENT_TOOLS, JOB_TOOLS, KNOWLEDGE_TOOLS
from simulator import create_app
from simulator.mcp.jobs import JobTools
from simulator.mcp.server import http_endpoint, stdio_command
from simulator.mcp.tools import CoreHttp

ROUTE, CTL = "mcp-sim", {"Authorization": "Bearer ctl"}
TOKEN_WORD = "zebrafinch"
# Several pages at 4096 bytes, with escapes, astral and combining characters to cut through.
DOCUMENT = " ".join(f'{TOKEN_WORD} line {i}: caf\u00e9 "q" \\ \U0001f600 e\u0301 \u4e2d\u6587\n' for i in range(400))
FLAGS = {"dispatch": "not_dispatched", "business_operation_performed": False}
BOUND = ("next_cursor", "ref", "run_id")  # members bound to a run: equal only within one run


@dataclass
class Sim:
    base: str
    http: httpx.Client
    token: str

    def endpoint(self, token: str | None = None) -> Endpoint:
        return Endpoint("http", url=http_endpoint(self.base, ROUTE), token=token or self.token)

    def mint(self) -> str:
        """A new Agent Session: the current run is kept per Agent Session and route."""
        return str(
            self.http.post("/_control/v1/identities", json={"account": "alice", "route": ROUTE}, headers=CTL).json()[
                "token"
            ]
        )

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(
            f"/agent-api/v1/workspaces/{ROUTE}{path}", json=body, headers={"Authorization": f"Bearer {self.token}"}
        )


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    app = create_app(demo=False, control_token="ctl", seed=0)
    base, stop = serve_over_loopback(app)
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.post("/_control/v1/workspaces", json={"route": ROUTE}, headers=CTL).status_code < 300
            corpus = {
                "bases": [{"id": "kb", "items": [{"id": "doc", "title": f"{TOKEN_WORD} notes", "content": DOCUMENT}]}]
            }
            assert http.put(f"/_control/v1/workspaces/{ROUTE}/corpus", json=corpus, headers=CTL).status_code < 300
            token = http.post("/_control/v1/identities", json={"account": "alice", "route": ROUTE}, headers=CTL).json()[
                "token"
            ]
            yield Sim(base, http, token)
    finally:
        stop()
        gc.collect()  # finalize the servers' clients and loops now, not in the middle of a later import (CPython 3.11)


def _ok(result: ToolResult) -> dict[str, Any]:
    assert not result.is_error, result.texts
    assert result.has_structured and result.text_json() == result.structured
    body = dict(result.structured)
    assert {k: body.pop(k) for k in FLAGS} == FLAGS
    return body


def _refused(result: ToolResult) -> dict[str, Any]:
    assert result.is_error
    body = result.structured if result.has_structured else result.text_json()
    assert {k: body[k] for k in FLAGS} == FLAGS
    return dict(body["feedback"])


def _mcp_chain(session: McpSession, ref: str) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = _ok(
            session.call(
                "read_business_knowledge", {"ref": ref, "max_bytes": 4096, **({"cursor": cursor} if cursor else {})}
            )
        )
        pages.append(page)
        cursor = page.get("next_cursor")
        if not cursor:
            return pages


def _http_chain(sim: Sim) -> list[dict[str, Any]]:
    turn = {
        "client_conversation_id": "http-c",
        "client_turn_id": "t1",
        "user_message_id": "m1",
        "user_input": "notes",
        "knowledge_delivery": "on_demand",
    }
    run = sim.post("/turns", turn).json()["run_id"]
    hints = sim.post("/knowledge/search", {"query": TOKEN_WORD, "run_id": run}).json()["hints"]
    pages, cursor = [], None
    while True:
        response = sim.post(
            "/knowledge/read",
            {"ref": hints[0]["ref"], "run_id": run, "max_bytes": 4096, **({"cursor": cursor} if cursor else {})},
        )
        assert response.status_code == 200, response.text
        pages.append(response.json())
        cursor = pages[-1].get("next_cursor")
        if not cursor:
            return pages


# ----------------------------------------------------------------- Agent Session path
def test_agent_session_path_lists_the_turn_and_the_two_knowledge_tools(sim: Sim) -> None:
    with connect(sim.endpoint()) as session:
        tools = {t.name: t for t in session.tools()}
    assert sorted(tools) == sorted(AGENT_TOOLS) and set(KNOWLEDGE_TOOLS) <= set(tools)
    assert not set(tools) & set(JOB_TOOLS)
    for tool in tools.values():
        assert tool.output_schema is not None and tool.input_schema.get("additionalProperties") is False


@pytest.mark.parametrize(
    ("status", "code", "plain_turn"),
    [(404, "not_found", True), (405, None, True), (501, "not_implemented", True), (404, "route_unavailable", False)],
)
def test_only_a_generic_legacy_status_is_an_old_core(sim: Sim, status: int, code: str | None, plain_turn: bool) -> None:
    """404/405/501 without a specific code mean an old Core (a plain turn); a 404 carrying a
    specific code such as route_unavailable is a new Core's error, and the turn fails with it."""
    fault = {"kind": "respond_next", "route": ROUTE, "endpoint": "capabilities", "status": status}
    if code is not None:
        fault["body"] = {"error": code}
    assert sim.http.post("/_control/v1/faults", json=fault, headers=CTL).status_code < 300
    with connect(sim.endpoint(sim.mint())) as session:
        turn = session.call("start_business_turn", {"user_input": "notes"})
    if plain_turn:
        body = _ok(turn)
        assert "knowledge_delivery" not in json.dumps(body), body
    else:
        assert turn.is_error and "route_unavailable" in json.dumps(turn.structured or turn.texts), turn.texts


def test_a_search_and_read_over_mcp_equal_http_byte_for_byte(sim: Sim) -> None:
    with connect(sim.endpoint()) as session:
        _ok(session.call("start_business_turn", {"user_input": "notes"}))
        hints = _ok(session.call("search_business_knowledge", {"query": TOKEN_WORD}))["hints"]
        assert len(hints) == 1
        mcp_pages = _mcp_chain(session, hints[0]["ref"])
    http_pages = _http_chain(sim)
    assert len(mcp_pages) == len(http_pages) > 2  # a real chain, cut at the same places
    strip = [[{k: v for k, v in p.items() if k not in BOUND} for p in pages] for pages in (mcp_pages, http_pages)]
    assert json.dumps(strip[0], ensure_ascii=False).encode() == json.dumps(strip[1], ensure_ascii=False).encode()
    assert "".join(p["content"] for p in mcp_pages).encode() == DOCUMENT.encode()


def test_identity_route_and_run_arguments_are_refused(sim: Sim) -> None:
    with connect(sim.endpoint()) as session:
        _ok(session.call("start_business_turn", {"user_input": "notes"}))
        for extra in (
            {"run_id": "00000000-0000-4000-8000-000000000000"},
            {"route": "elsewhere"},
            {"token": "bha_x" * 10},
        ):
            feedback = _refused(session.call("search_business_knowledge", {"query": TOKEN_WORD, **extra}))
            assert feedback["code"] == "invalid_arguments" and feedback["dispatch"] == "not_dispatched"
        _refused(session.call("start_business_turn", {"user_input": "x", "knowledge_delivery": "inline"}))
        assert _ok(session.call("search_business_knowledge", {"query": TOKEN_WORD}))["hints"]  # the session still works


def test_knowledge_calls_before_the_turn_are_refused(sim: Sim) -> None:
    with connect(sim.endpoint(sim.mint())) as session:  # a new Agent Session: no turn yet
        for name, args in (
            ("search_business_knowledge", {"query": TOKEN_WORD}),
            ("read_business_knowledge", {"ref": "r"}),
        ):
            feedback = _refused(session.call(name, args))
            assert feedback["code"] == "turn_required" and feedback["next_action"] == "start_business_turn"
        _ok(session.call("start_business_turn", {"user_input": "notes"}))
        assert _ok(session.call("search_business_knowledge", {"query": TOKEN_WORD}))["hints"]


# ----------------------------------------------------------------- Fixed Client Token job path
class FakeClock:
    """The job model's injected clock; sleeping moves it, so waits cost no wall time."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.01)


def _job(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


def test_jobs_go_from_pending_to_done_and_waits_time_out() -> None:
    clock = FakeClock()
    jobs = JobTools(clock.now, job_seconds=5.0, sleep=clock.sleep)

    async def scenario() -> None:
        submitted = _job(await jobs.call("submit_governed_job", {"request_id": "r1", "input": "hello"}))
        assert submitted["status"] == "pending" and "output" not in submitted
        again = _job(await jobs.call("submit_governed_job", {"request_id": "r1", "input": "hello"}))
        assert again["job_id"] == submitted["job_id"]  # the same request_id is the same job
        waited = _job(await jobs.call("wait_for_governed_job", {"job_id": submitted["job_id"], "max_wait_seconds": 1}))
        assert waited["status"] == "pending" and waited["timed_out"] is True and 1.0 <= clock.t < 5.0
        assert _job(await jobs.call("get_governed_job", {"job_id": submitted["job_id"]}))["status"] == "pending"
        done = _job(await jobs.call("wait_for_governed_job", {"job_id": submitted["job_id"], "max_wait_seconds": 10}))
        assert done["status"] == "done" and done["timed_out"] is False and done["output"] and clock.t >= 5.0
        assert _job(await jobs.call("get_governed_job", {"job_id": submitted["job_id"]}))["status"] == "done"
        assert (
            await jobs.call("wait_for_governed_job", {"job_id": submitted["job_id"], "max_wait_seconds": 61})
        ).is_error
        assert (await jobs.call("get_governed_job", {"job_id": "job-unknown"})).is_error

    anyio.run(scenario)


def test_the_job_path_over_stdio_has_exactly_the_three_job_tools_and_runs_a_job() -> None:
    argv, env = stdio_command("jobs", job_seconds=0.2)
    with connect(Endpoint("stdio", argv=tuple(argv), env=tuple(env.items()))) as session:
        names = sorted(t.name for t in session.tools())
        submitted = session.call("submit_governed_job", {"request_id": "r1", "input": "hello"})
        waited = session.call(
            "wait_for_governed_job", {"job_id": submitted.structured["job_id"], "max_wait_seconds": 5}
        )
        knowledge = session.call("search_business_knowledge", {"query": TOKEN_WORD})
    assert names == sorted(JOB_TOOLS)
    assert submitted.structured["status"] == "pending"
    assert waited.structured["status"] == "done" and waited.structured["timed_out"] is False
    assert knowledge.is_error  # no knowledge tool on this path


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({}, 200),
        ({"Origin": "http://127.0.0.1:9"}, 200),
        ({"Host": "evil.example"}, 421),
        ({"Origin": "http://evil.example"}, 403),
    ],
)
def test_mcp_endpoint_refuses_foreign_host_and_origin(sim: Sim, extra: dict[str, str], status: int) -> None:
    """DNS-rebinding protection: loopback Host and Origin by default, a foreign one refused before the session starts."""
    response = sim.http.post(
        http_endpoint(sim.base, ROUTE),
        json=INITIALIZE,
        headers={**MCP_HEADERS, "Authorization": f"Bearer {sim.token}", **extra},
    )
    assert response.status_code == status, response.text
    assert len(response.headers.get_list("cache-control")) == 1  # the SSE stream's own is replaced, not repeated
    assert response.headers["cache-control"].startswith("no-store")


def test_mcp_allowed_hosts_are_an_option() -> None:
    """knowledge-sim serve --allow-host: a name the endpoint accepts besides the loopback ones."""
    app = create_app(demo=False, control_token="ctl", seed=0, mcp_allowed_hosts=("sim.example",))
    with httpx.Client(transport=InProcessTransport(app), base_url="http://sim.example") as http:
        response = http.post(http_endpoint("http://sim.example", ROUTE), json=INITIALIZE, headers=MCP_HEADERS)
    assert response.status_code != 421


def test_a_lone_surrogate_from_the_core_is_relayed_as_a_character_not_a_dead_session() -> None:
    """A broken Core's page may end in half a character, a lone ``\\ud83d`` escape: JSON parsers
    take it, but no MCP message can carry it (the SDK's serializer refused it and the stdio
    server died, so a whole run against that Core ended in a harness error). The adapter relays
    U+FFFD in its place and keeps a pair that is whole."""
    body = b'{"text": "half \\ud83d, whole \\ud83d\\ude00, \\u00e9"}'
    core = CoreHttp(
        httpx.AsyncClient(
            transport=httpx.MockTransport(lambda _: httpx.Response(200, content=body)), base_url="http://core"
        )
    )
    status, answer = anyio.run(core.request, "POST", "/read", "t")
    assert (status, answer) == (200, {"text": "half \ufffd, whole \U0001f600, \u00e9"})
    mtypes.CallToolResult(content=[], structured_content=answer).model_dump_json()  # serializable: no error
