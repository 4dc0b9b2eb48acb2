"""``knowledge-conformance observe`` judges the MCP tool calls it forwards: a client's
search_business_knowledge and read_business_knowledge calls over streamable HTTP, through the
proxy to the simulator's Agent Session MCP path, are judged by the active suite's relayed checks
(``conformance.mcp.relayed``): a clean simulator's results violate nothing, and a quirk whose
broken behaviour shows in a tool's result is named by the ID the active suite names for it.

One proxy run serves every test here: one upstream in front of a simulator per variant (each
under a path prefix of its own), so the variants share the proxy and its judge."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import simulator
from conformance.common.control import Control
from conformance.mcp.records import Endpoint
from conformance.mcp.results import READ, SEARCH, TURN
from conformance.mcp.session import connect
from conformance.observe.credentials import Credentials
from conformance.observe.judge import Judge
from conformance.observe.mcp_calls import answered, sse_data
from conformance.observe.pipeline import Pipeline
from conformance.observe.proxy import ObserveProxy
from conformance.observe.seen import Body, Seen
from knowledge_schemas import load_yaml
from simulator.config import SimConfig
from simulator.mcp.server import MCP_PATH
from tests.test_observe_support import CONTROL, DOCS, Clock, _bases, cfg, served

MCP_QUIRKS: dict[str, frozenset[str]] = {"mcp_ignores_max_bytes": frozenset({"MCP-011"})}
"""Each MCP quirk observe names from a tool's result, with the IDs it names (tests/test_observe.py
counts these as driven)."""
CORE_QUIRKS: dict[str, frozenset[str]] = {
    "search_fourth_hint": frozenset({"SRCH-003"}),
    "refs_never_expire": frozenset({"REF-001"}),
}
"""Core quirks the MCP path relays: named from the tools' results alone (the proxy sees no HTTP search or read)."""
VARIANTS = ("clean", *MCP_QUIRKS, *CORE_QUIRKS)
KEYS = ("alpha", "filler0", "filler1", "filler2", "ascii")
PREFIX = re.compile(r"^/(v\d+)(/.*)$")


def _dispatcher(apps: dict[str, Any]) -> Any:
    """One upstream for every variant: ``/vN/...`` goes to the N-th simulator as ``/...``."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        found = PREFIX.match(scope["path"])
        if found is None or found.group(1) not in apps:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        path = found.group(2)
        inner = {**scope, "path": path, "raw_path": path.encode("utf-8"), "root_path": ""}
        await apps[found.group(1)](inner, receive, send)

    return app


def _drive(session: Any, later: Callable[[], None]) -> None:
    """A turn, a search that fills its hints, and reads of a long document: at 4096 bytes, by
    default, by cursor; then, ``later`` (301 s on), the same reference read again."""
    session.call(TURN, {"user_input": "homepage binding"})
    session.call(SEARCH, {"query": "homepage binding"})
    hints = session.call(SEARCH, {"query": DOCS["ascii"].token}).structured or {}
    refs = [h["ref"] for h in hints.get("hints") or [] if str(h.get("title", "")).startswith(DOCS["ascii"].token)]
    for ref in refs[:1]:
        first = session.call(READ, {"ref": ref, "max_bytes": 4096}).structured or {}
        session.call(READ, {"ref": ref})
        if first.get("next_cursor"):
            session.call(READ, {"ref": ref, "max_bytes": 4096, "cursor": first["next_cursor"]})
        later()
        session.call(READ, {"ref": ref})


@dataclass
class Observed:
    judge: Judge
    variant_of: dict[int, str]  # exchange number -> variant

    def violated(self, variant: str) -> set[str]:
        return {
            rid
            for rid, found in self.judge.tally.findings.items()
            if any(self.variant_of.get(f.number) == variant for f in found)
        }


@pytest.fixture(scope="module")
def observed() -> Iterator[Observed]:
    """Every variant's MCP traffic through one observe proxy."""
    names = {f"v{i}": variant for i, variant in enumerate(VARIANTS)}
    apps = {
        key: simulator.create_app(
            SimConfig(control_token=CONTROL, demo=False, seed=5), quirks=[] if name == "clean" else [name]
        )
        for key, name in names.items()
    }
    credentials = Credentials()
    judge = Judge(cfg(), credentials, base_url="http://core.example")
    pipeline = Pipeline(judge, size=10_000).start()
    variant_of: dict[int, str] = {}

    def sink(seen: Seen) -> None:
        found = PREFIX.match(seen.path)
        variant_of[seen.number] = names.get(found.group(1), "") if found else ""
        pipeline.submit(seen)

    with served(_dispatcher(apps)) as upstream:
        clock = Clock()
        proxy = ObserveProxy(upstream, sink, credentials, clock=clock)
        with served(proxy) as proxy_url:
            for key in names:
                control = Control.of_core(f"{upstream}/{key}", CONTROL)
                try:
                    route = f"obmcp{key}"
                    control.create_workspace(route)
                    control.replace_corpus(route, _bases(KEYS))
                    token = control.mint("alice", route)["token"]
                    url = f"{proxy_url}/{key}" + MCP_PATH.format(route=route)

                    def later(control: Control = control) -> None:  # the simulator's clock and the judge's
                        control.advance(301)
                        clock.shift += 301

                    with connect(Endpoint("http", url=url, token=token), 30) as session:
                        _drive(session, later)
                finally:
                    control.close()
        pipeline.close()
    yield Observed(judge, variant_of)


def test_mcp_tool_results_of_a_clean_simulator_violate_nothing(observed: Observed) -> None:
    tally = observed.judge.tally
    assert not tally.errors, tally.errors
    assert not observed.violated("clean"), {rid: f[0].message for rid, f in tally.findings.items()}
    assert {"MCP-011", "SRCH-003", "SRCH-008", "READ-002", "REF-001"} <= set(tally.held), sorted(tally.held)


@pytest.mark.parametrize("quirk", [*MCP_QUIRKS, *CORE_QUIRKS])
def test_a_quirk_a_tool_result_shows_is_named_by_its_ids(observed: Observed, quirk: str) -> None:
    expected = (MCP_QUIRKS | CORE_QUIRKS)[quirk]
    violated = observed.violated(quirk)
    assert violated == expected, {rid: observed.judge.tally.findings[rid][0].message for rid in violated}
    message = observed.judge.tally.findings[sorted(expected)[0]][0].message
    assert "over MCP (streamable HTTP)" in message


def test_the_mcp_quirks_named_are_the_catalogues_ids() -> None:
    listed = {entry["name"]: set(entry["violates"]) for entry in load_yaml("quirk-outcomes.yaml")["quirks"]}
    for quirk, ids in (MCP_QUIRKS | CORE_QUIRKS).items():
        assert set(ids) <= listed[quirk], quirk
    assert all(MCP_QUIRKS[q] == listed[q] for q in MCP_QUIRKS)


def _seen(request: bytes, response: bytes, kind: str) -> Seen:
    body = Body(response, len(response), True)
    return Seen(
        1, 0.0, 0.0, "POST", "/mcp", "", None, Body(request, len(request), True), 200, body, (("content-type", kind),)
    )


def test_calls_pair_with_their_results_by_id_in_json_and_event_streams() -> None:
    batch = (
        b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}},'
        b'{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"b"}},'
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}]'
    )
    stream = (
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\r\n\r\n'
        b'data: {"jsonrpc":"2.0","id":"1",\ndata:  "result":{"b":true}}\n\n'
        b'data: {"jsonrpc":"2.0","id":1,"result":{"a":true}}\n\n'
        b'data: {"jsonrpc":"2.0","id":9,"result":{"cut":'
    )
    pairs = answered(_seen(batch, stream, "text/event-stream"))
    assert pairs is not None
    assert [(c.tool, c.arguments, r) for c, r in pairs] == [("b", {}, {"b": True}), ("a", {"x": 1}, {"a": True})]
    assert list(sse_data(b"data: one\n\ndata: cut")) == [b"one"]
    single = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a"}}'
    pairs = answered(_seen(single, b'{"jsonrpc":"2.0","id":7,"result":{"ok":1}}', "application/json"))
    assert pairs is not None and [r for _, r in pairs] == [{"ok": 1}]
    assert answered(_seen(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', b"{}", "application/json")) is None
