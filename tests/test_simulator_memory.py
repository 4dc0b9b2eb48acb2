"""The served simulator answers lookups and search rankings from memory (simulator.store): never
after a write, whichever process wrote, never across accounts or scopes, and its encodings are
the standard library's byte for byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from random import Random
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from simulator import create_app
from simulator.sizing import dumps, escaped_size, fit_prefix
from simulator.store import ItemInput, Store

API = "/agent-api/v1/workspaces/demo"
CORPUS = [
    (
        "kb",
        "kb",
        [ItemInput("a", "alpha", "zebra stripes first"), ItemInput("b", "beta", "zebra crossing second")],
    ),
    ("other", "other", [ItemInput("c", "gamma", "zebra zebra zebra third")]),
]


def _served(**options: Any) -> Any:
    app = create_app(concurrent=True, control_token="ctl", **options)
    core = app.state.core
    core.store.replace_corpus("demo", CORPUS, core.clock.now())
    return app


async def _run(http: httpx.AsyncClient, token: str) -> str:
    """A run of ``token``'s (a turn: a write, which empties the memory: make runs before what is measured)."""
    turn = {"client_conversation_id": "c", "client_turn_id": token, "user_message_id": "m", "user_input": "x"}
    run: str = (await http.post(f"{API}/turns", json=turn, headers={"Authorization": f"Bearer {token}"})).json()[
        "run_id"
    ]
    return run


async def _search(http: httpx.AsyncClient, token: str, run: str, query: str) -> list[dict[str, Any]]:
    auth = {"Authorization": f"Bearer {token}"}
    answer = await http.post(f"{API}/knowledge/search", json={"run_id": run, "query": query}, headers=auth)
    assert answer.status_code == 200, answer.text
    hints: list[dict[str, Any]] = answer.json()["hints"]
    return hints


def _items(app: Any, hints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    claims = [app.state.core.signer.verify("ref", h["ref"]) for h in hints]
    return [(c["i"], c["v"]) for c in claims]


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")


def test_a_publish_by_another_process_is_seen_by_the_next_search(tmp_path: Path) -> None:
    """Two stores on one file stand for two processes (--reuse-port): the remembered ranking and
    revisions of one are forgotten when the other commits."""
    database = str(tmp_path / "shared.sqlite")
    app = _served(database=database)
    token = app.state.core.store.identities("demo")[0].token
    other = Store(database, Random(9), concurrent=True)

    async def scenario() -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
        async with _client(app) as http:
            run = await _run(http, token)
            first = _items(app, await _search(http, token, run, "zebra"))
            again = _items(app, await _search(http, token, run, "zebra"))  # from memory: nothing was written
            other.publish_revision("demo", "a", "zebra rewritten", None, None, 1.0)
            after = _items(app, await _search(http, token, run, "zebra"))
            return first, again, after

    first, again, after = asyncio.run(scenario())
    other.close()
    assert first == again
    published = dict(after)["a"]
    assert published != dict(first)["a"]  # the new revision, not the remembered one
    assert app.state.core.store.current_revision("demo", "a").revision_id == published


def test_a_ranking_is_never_handed_to_another_scope_or_kept_past_a_scope_change() -> None:
    app = _served()
    core = app.state.core
    alice = core.store.identities("demo")[0]
    bob = core.store.mint_identity("bob", "demo", core.config.hub, alice.session_id)
    core.store.set_scope("demo", "bob", ["kb"])

    async def scenario() -> list[set[str]]:
        async with _client(app) as http:
            runs = {ident.token: await _run(http, ident.token) for ident in (alice, bob)}
            seen = [
                {i for i, _ in _items(app, await _search(http, ident.token, runs[ident.token], "zebra"))}
                for ident in (alice, bob)
            ]
            core.store.set_scope("demo", "alice", ["other"])
            seen.append({i for i, _ in _items(app, await _search(http, alice.token, runs[alice.token], "zebra"))})
            return seen

    everything, bobs, narrowed = asyncio.run(scenario())
    assert everything == {"a", "b", "c"}
    assert bobs == {"a", "b"}  # bob's scope, though alice's wider answer to the same words is remembered
    assert narrowed == {"c"}  # the scope change forgot alice's earlier answer


def test_a_revoked_workspace_state_is_seen_at_once() -> None:
    """Workspace mode and identities are remembered too: a mode set through the store is the next answer."""
    app = _served()
    core = app.state.core
    token = core.store.identities("demo")[0].token

    async def scenario() -> tuple[int, int]:
        async with _client(app) as http:
            auth = {"Authorization": f"Bearer {token}"}
            before = (await http.get(f"{API}/knowledge/capabilities", headers=auth)).json()["enabled"]
            core.store.set_mode("demo", "disabled", None)
            after = (await http.get(f"{API}/knowledge/capabilities", headers=auth)).json()["enabled"]
            return before, after

    assert asyncio.run(scenario()) == (True, False)


@given(st.text())
def test_the_wire_encoding_is_the_standard_librarys(text: str) -> None:
    """orjson's encoding (simulator.sizing) is byte for byte ``json.dumps(ensure_ascii=False)``, so
    the sizes a page is fitted by are those of the page sent."""
    try:
        expected = json.dumps({"t": text}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: sent as its escape, as before
        assert b"\\u" in dumps({"t": text})
        return
    assert dumps({"t": text}) == expected
    assert escaped_size(text) == len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


@given(st.text(max_size=300), st.integers(min_value=0, max_value=400))
def test_a_prefix_fits_its_budget_and_one_more_character_would_not(text: str, budget: int) -> None:
    try:
        escaped_size(text)
    except UnicodeEncodeError:
        return
    keep = fit_prefix(text, budget)
    assert escaped_size(text[:keep]) <= budget or keep == 0
    assert keep == len(text) or escaped_size(text[: keep + 1]) > budget


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@given(_JSON, st.booleans())
def test_a_request_body_reads_as_the_standard_library_reads_it(value: Any, ascii_only: bool) -> None:
    """Request bodies are read by orjson where it agrees with the standard library (simulator.http):
    integers past 64 bits, NaN, lone surrogates and the rest read exactly as ``json.loads`` does."""
    from simulator.http import _loads

    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        expected: Any = ("value", json.loads(raw))
    except (ValueError, RecursionError) as exc:
        expected = ("refused", type(exc))
    try:
        got: Any = ("value", _loads(raw))
    except (ValueError, RecursionError) as exc:
        got = ("refused", type(exc))
    assert repr(got) == repr(expected)
