"""A served simulator (``concurrent=True``, what ``knowledge-sim serve`` runs) answers requests side
by side: a slow search never holds up another request, each search or read is answered from one
consistent state of the store whatever is published meanwhile, and identical turns sent at once
still commit once. Orderings are forced with events, never measured with a clock."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path
from random import Random
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from simulator import create_app
from simulator.store import ItemInput, Revision, Store

API = "/agent-api/v1/workspaces/demo"
FAILSAFE = 20.0  # seconds an event wait gives up after, so a broken build fails instead of hanging


def _app(**options: Any) -> Starlette:
    app = create_app(concurrent=True, **options)
    core = app.state.core
    core.store.replace_corpus(
        "demo",
        [
            (
                "kb",
                "kb",
                [
                    ItemInput("a", "alpha", "zebra stripes " * 20 + "first"),
                    ItemInput("b", "beta", "zebra crossing " * 10 + "second"),
                ],
            )
        ],
        core.clock.now(),
    )
    return app


def _auth(app: Starlette) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.core.store.identities('demo')[0].token}"}


async def _run_id(http: httpx.AsyncClient, auth: dict[str, str]) -> str:
    turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "hello"}
    response = await http.post(f"{API}/turns", json=turn, headers=auth)
    assert response.status_code == 200, response.text
    run_id: str = response.json()["run_id"]
    return run_id


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim", timeout=FAILSAFE * 2)


def _revisions(app: Starlette, hints: list[dict[str, Any]]) -> dict[str, str]:
    """item -> revision each hint's reference names."""
    claims = [app.state.core.signer.verify("ref", h["ref"]) for h in hints]
    return {c["i"]: c["v"] for c in claims}


def test_a_long_search_does_not_hold_up_a_request_served_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search whose ranking may take long (its words' postings past ``inline_postings``, here 0:
    every search) is ranked on a store thread; the event loop answers meanwhile."""
    app = _app()
    store: Store = app.state.core.store
    store.inline_postings = 0
    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []
    rank = store.indexes.search

    def slow_rank(*args: Any, **kwargs: Any) -> list[int]:
        entered.set()
        released.append(release.wait(FAILSAFE))  # False: nothing else was answered while this one ran
        return rank(*args, **kwargs)

    async def scenario() -> tuple[int, bool, int]:
        auth = _auth(app)
        async with _client(app) as http:
            run = await _run_id(http, auth)
            monkeypatch.setattr(store.indexes, "search", slow_rank)
            pending = asyncio.create_task(
                http.post(f"{API}/knowledge/search", json={"run_id": run, "query": "zebra"}, headers=auth)
            )
            assert await asyncio.to_thread(entered.wait, FAILSAFE)
            capabilities = await http.get(f"{API}/knowledge/capabilities", headers=auth)
            answered_while_held = not release.is_set()
            release.set()
            return capabilities.status_code, answered_while_held, (await pending).status_code

    caps, answered_while_held, searched = asyncio.run(scenario())
    assert (caps, answered_while_held, searched) == (200, True, 200)
    assert released == [True]  # the search went on only once capabilities had answered


def test_a_short_search_is_ranked_on_the_event_loop_a_long_one_on_a_store_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Handing a short search to a thread costs more than the search; a long one must not hold the loop."""
    app = _app()
    store: Store = app.state.core.store
    ranked_on: list[str] = []
    rank = store.indexes.search

    def recording(*args: Any, **kwargs: Any) -> list[int]:
        ranked_on.append("loop" if threading.current_thread() is threading.main_thread() else "thread")
        return rank(*args, **kwargs)

    async def scenario() -> list[int]:
        auth = _auth(app)
        async with _client(app) as http:
            run = await _run_id(http, auth)
            monkeypatch.setattr(store.indexes, "search", recording)
            statuses = []
            for query, postings in (("zebra", 1000), ("stripes", 0), ("stripes", 0)):
                store.inline_postings = postings
                answer = await http.post(f"{API}/knowledge/search", json={"run_id": run, "query": query}, headers=auth)
                statuses.append(answer.status_code)
            return statuses

    assert asyncio.run(scenario()) == [200, 200, 200]
    # the third search is the second's, remembered: ranked by nobody, answered on the loop
    assert ranked_on == ["loop", "thread"]


def test_a_search_sees_one_state_of_the_store_while_revisions_are_published(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()
    core = app.state.core
    store: Store = core.store
    before: dict[str, str] = {}
    for item in ("a", "b"):
        seeded = store.current_revision("demo", item)
        assert seeded is not None
        before[item] = seeded.revision_id
    after: dict[str, str] = {}
    rank = store.indexes.search

    def publish_midway(*args: Any, **kwargs: Any) -> list[int]:
        ranked = rank(*args, **kwargs)
        if not after:  # between the search's ranking and its reading of the hits: new revisions, committed
            for item in ("a", "b"):
                after[item] = str(
                    store.publish_revision("demo", item, f"zebra {item} rewritten", None, None, core.clock.now())
                )
        return ranked

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        auth = _auth(app)
        async with _client(app) as http:
            run = await _run_id(http, auth)
            monkeypatch.setattr(store.indexes, "search", publish_midway)
            first = (
                await http.post(f"{API}/knowledge/search", json={"run_id": run, "query": "zebra"}, headers=auth)
            ).json()
            second = (
                await http.post(f"{API}/knowledge/search", json={"run_id": run, "query": "zebra"}, headers=auth)
            ).json()
            return first, second

    first, second = asyncio.run(scenario())
    assert set(after) == {"a", "b"} and set(after.values()).isdisjoint(before.values())
    assert _revisions(app, first["hints"]) == before  # never one item's old revision beside the other's new one
    assert _revisions(app, second["hints"]) == after  # and the next search sees what was published


def test_reads_during_a_publish_see_one_revision_and_none_sees_it_after(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()
    core = app.state.core
    store: Store = core.store
    old = store.current_revision("demo", "a")
    assert old is not None
    calls: list[str] = []
    current_revision = store.current_revision

    counting = threading.Lock()

    def publish_on_the_fifth(route: str, item_id: str) -> Revision | None:
        with counting:  # reads run on several threads: the fifth call is the one that made it five
            calls.append(item_id)
            fifth = len(calls) == 5
        found = current_revision(route, item_id)
        if fifth:
            store.publish_revision("demo", "a", "rewritten", None, None, core.clock.now())
        return found

    async def scenario() -> tuple[list[httpx.Response], httpx.Response]:
        auth = _auth(app)
        async with _client(app) as http:
            run = await _run_id(http, auth)
            hints = (
                await http.post(f"{API}/knowledge/search", json={"run_id": run, "query": "first"}, headers=auth)
            ).json()["hints"]
            monkeypatch.setattr(store, "current_revision", publish_on_the_fifth)
            body = {"run_id": run, "ref": hints[0]["ref"], "max_bytes": 4096}
            reads = await asyncio.gather(
                *(http.post(f"{API}/knowledge/read", json=body, headers=auth) for _ in range(16))
            )
            return list(reads), await http.post(f"{API}/knowledge/read", json=body, headers=auth)

    reads, later = asyncio.run(scenario())
    assert len(calls) >= 16
    for response in reads:
        if response.status_code == 200:
            page = response.json()
            assert page["revision"] == old.revision_id and old.content.startswith(page["content"])
        else:
            assert (response.status_code, response.json()["error"]) == (409, "knowledge_revision_changed"), (
                response.text
            )
    # once the publish committed, no pooled connection answers from an older state
    assert (later.status_code, later.json().get("error")) == (409, "knowledge_revision_changed"), later.text


def test_identical_turns_sent_at_once_commit_once() -> None:
    app = _app()

    async def scenario() -> list[httpx.Response]:
        auth = _auth(app)
        turn = {
            "client_conversation_id": "c",
            "client_turn_id": "same",
            "user_message_id": "m",
            "user_input": "zebra",
            "knowledge_delivery": "on_demand",
        }
        async with _client(app) as http:
            return list(await asyncio.gather(*(http.post(f"{API}/turns", json=turn, headers=auth) for _ in range(12))))

    responses = asyncio.run(scenario())
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["run_id"] for r in responses}) == 1


@pytest.mark.parametrize("loss", ["folder removed", "generation behind", "generation file lost", "fts5 layout"])
def test_a_kept_store_whose_index_is_missing_or_stale_rebuilds_it_when_opened(tmp_path: Path, loss: str) -> None:
    """The index folder beside the store is a derived copy: lost, or left at another generation (a
    kill -9 between the index's commit and the store's), or a store of the FTS5 layout: rebuilt at start."""
    database = str(tmp_path / "kept.sqlite")
    store = Store(database, Random(1), concurrent=True)
    store.create_workspace("w1")
    store.replace_corpus(
        "w1", [("kb", "kb", [ItemInput("a", "alpha", "walrus"), ItemInput("b", "beta", "narwhal")])], 0.0
    )
    store.publish_revision("w1", "b", "walrus too", None, None, 1.0)
    assert [r.item_id for r in store.search("w1", "walrus", None, 3)] == ["a", "b"]
    store.close()
    folder = Path(database + ".index")
    (build,) = (b for space in folder.iterdir() for b in space.iterdir())
    if loss == "folder removed":
        shutil.rmtree(folder)
    elif loss == "generation behind":
        store = Store(database, Random(1), concurrent=True)
        store.publish_revision("w1", "a", "seal", None, None, 2.0)
        store.close()
        (build,) = (b for space in folder.iterdir() for b in space.iterdir())
        (build / "generation").write_text("2")  # the index of before the publish, as a kill would leave it
    elif loss == "generation file lost":
        (build / "generation").unlink()
    else:
        with sqlite3.connect(database) as db:
            db.execute("CREATE VIRTUAL TABLE fti_old USING fts5(title, content)")
    reopened = Store(database, Random(1), concurrent=True)
    expected = ["b"] if loss == "generation behind" else ["a", "b"]
    assert sorted(r.item_id for r in reopened.search("w1", "walrus", None, 3)) == expected
    assert reopened.search("w1", "narwhal", None, 3) == []  # only current revisions are indexed
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'fti%'").fetchall() == []
    reopened.close()


def test_a_concurrent_in_memory_store_is_a_private_file_shared_by_its_threads() -> None:
    store = Store(":memory:", Random(2), concurrent=True)
    store.create_workspace("w1")
    store.replace_corpus("w1", [("kb", "kb", [ItemInput("a", "alpha", "okapi")])], 0.0)
    seen: list[list[str]] = []
    worker = threading.Thread(target=lambda: seen.append([r.item_id for r in store.search("w1", "okapi", None, 3)]))
    worker.start()
    worker.join(FAILSAFE)
    assert seen == [["a"]]  # another thread's own connection sees what this one wrote
    store.close()
