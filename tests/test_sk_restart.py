"""search_knowledge's states (seed 003) live in the kept store: a served simulator killed and
restarted on the same ``--database`` still serves the immutable revisions it published, with
its archived, unpublished and inactive resources, its runtime switch, scopes and audit log as
they were; replacing or deleting a workspace forgets them in the database too."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from simulator import create_app
from simulator.search_knowledge.routes import TOOL_PATH
from tests.test_simulator_restart import CTL, _served

SK = "/_control/v1/workspaces/keep/knowledge"
CORPUS = {
    "bases": [
        {
            "id": "kb",
            "items": [
                {"id": "d", "title": "Doc", "content": "first words \U0001f600 e\u0301 中"},
                {"id": "e", "title": "Archived", "content": "archived words"},
                {"id": "u", "title": "Unpublished", "content": "unpublished words"},
            ],
        },
        {"id": "kb2", "items": [{"id": "f", "title": "Other base", "content": "other base words"}]},
    ]
}


def _ask(http: Any, token: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = http.post(TOOL_PATH.format(route="keep"), json=arguments, headers={"Authorization": f"Bearer {token}"})
    return response.status_code, response.json()


def _pinned(http: Any, token: str, revision: str) -> dict[str, Any]:
    status, body = _ask(
        http, token, {"knowledge_item_id": "d", "knowledge_revision_id": revision, "offset": 6, "limit_chars": 5}
    )
    assert status == 200, body
    return body


def test_a_restarted_simulator_keeps_the_search_knowledge_states(tmp_path: Path) -> None:
    database = tmp_path / "core.sqlite"
    with _served(database) as (http, proc):
        assert http.post("/_control/v1/workspaces", json={"route": "keep"}, headers=CTL).status_code == 201
        first = http.put("/_control/v1/workspaces/keep/corpus", json=CORPUS, headers=CTL).json()["items"]["d"]
        tokens = {
            a: http.post("/_control/v1/identities", json={"account": a, "route": "keep"}, headers=CTL).json()["token"]
            for a in ("a", "b")
        }
        current = http.post(f"{SK}/items/d/revisions", json={"content": "second words"}, headers=CTL).json()[
            "revision_id"
        ]
        for path, state in (
            (f"{SK}/items/e/state", {"active": False}),
            (f"{SK}/items/u/state", {"published": False}),
            (f"{SK}/bases/kb2/state", {"active": False}),
            (f"{SK}/scopes/b", {"scopes": []}),
        ):
            assert http.put(path, json=state, headers=CTL).status_code < 300
        before = _pinned(http, tokens["a"], first)
        assert before["content"] == "words" and before["content_total_chars"] == 18
        assert http.put(f"{SK}/runtime", json={"enabled": False}, headers=CTL).status_code == 200
        audit = http.get(f"{SK}/audit", headers=CTL).json()["events"]
        assert len(audit) == 5  # publish, archive, unpublish, base archived, runtime off (scopes write none)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    with _served(database) as (http, _):
        status, body = _ask(http, tokens["a"], {"query": "words"})
        assert (status, body["error"]) == (503, "knowledge_runtime_disabled"), "the runtime switch was kept"
        assert http.get(f"{SK}/audit", headers=CTL).json()["events"] == audit
        assert http.put(f"{SK}/runtime", json={"enabled": True}, headers=CTL).status_code == 200
        assert _pinned(http, tokens["a"], first) == before  # the immutable revision reads again, window and all
        status, body = _ask(http, tokens["a"], {"knowledge_item_id": "d"})
        assert (status, body["knowledge_revision_id"], body["content"]) == (200, current, "second words")
        for item in ("e", "u", "f"):  # archived, unpublished, in an archived base
            assert (
                _ask(http, tokens["a"], {"knowledge_item_id": item})[1]["error"] == "knowledge_resource_unavailable"
            ), item
        status, body = _ask(http, tokens["a"], {"query": "words", "mode": "lexical", "max_results": 50})
        assert [(h["knowledge_item_id"], h["knowledge_revision_id"]) for h in body["results"]] == [("d", current)]
        assert _ask(http, tokens["b"], {"query": "words"})[1]["error"] == "insufficient_scope", "b's scopes were kept"


def _client(database: Path) -> TestClient:
    return TestClient(create_app(database=str(database), seed=4, demo=False, control_token="control"))


def test_replacing_or_deleting_a_workspace_forgets_its_kept_states(tmp_path: Path) -> None:
    database = tmp_path / "core.sqlite"
    headers = {"Authorization": "Bearer control"}
    client = _client(database)
    for route in ("keep", "gone"):
        client.post("/_control/v1/workspaces", json={"route": route}, headers=headers)
        client.put(f"/_control/v1/workspaces/{route}/corpus", json=CORPUS, headers=headers)
        client.put(f"/_control/v1/workspaces/{route}/knowledge/items/e/state", json={"active": False}, headers=headers)
        client.put(f"/_control/v1/workspaces/{route}/knowledge/runtime", json={"enabled": False}, headers=headers)
    client.put("/_control/v1/workspaces/keep/corpus", json=CORPUS, headers=headers)
    client.delete("/_control/v1/workspaces/gone", headers=headers)
    client.close()

    again = _client(database)
    token = again.post("/_control/v1/identities", json={"account": "a", "route": "keep"}, headers=headers).json()[
        "token"
    ]
    status, body = _ask(again, token, {"knowledge_item_id": "e"})
    assert (status, body["content"]) == (200, "archived words"), "the replaced corpus's states are gone after a restart"
    assert again.get("/_control/v1/workspaces/keep/knowledge/audit", headers=headers).json()["events"] == []
    again.close()
    with sqlite3.connect(database) as db:  # the deleted workspace left nothing behind
        assert db.execute("SELECT count(*) FROM sk_states WHERE route='gone'").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM sk_audit WHERE route='gone'").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM sk_audit").fetchone() == (0,)
