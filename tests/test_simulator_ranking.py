"""The simulator ranks each workspace by its own corpus: another tenant's documents never move
its rankings (shared statistics would also leak what the other tenant holds)."""

from __future__ import annotations

from typing import Any

import httpx

from conformance.common.transport import InProcessTransport
from simulator import create_app

CTL = {"Authorization": "Bearer ctl"}


def _order(http: httpx.Client, route: str, token: str, query: str) -> list[str]:
    auth = {"Authorization": f"Bearer {token}"}
    turn = {
        "client_conversation_id": "c",
        "client_turn_id": f"t-{len(query)}",
        "user_message_id": "m",
        "user_input": query,
    }
    run = http.post(f"/agent-api/v1/workspaces/{route}/turns", json=turn, headers=auth).json()["run_id"]
    found = http.post(
        f"/agent-api/v1/workspaces/{route}/knowledge/search", json={"query": query, "run_id": run}, headers=auth
    ).json()
    return [h["title"] for h in found["hints"]]


def test_another_workspace_never_moves_this_ones_ranking() -> None:
    with httpx.Client(
        transport=InProcessTransport(create_app(demo=False, control_token="ctl")), base_url="http://sim"
    ) as http:
        for route in ("mine", "theirs"):
            assert http.post("/_control/v1/workspaces", json={"route": route}, headers=CTL).status_code == 201
        mine: dict[str, Any] = {
            "bases": [
                {
                    "id": "kb",
                    "items": [
                        {"id": "a", "title": "one", "content": "apple"},
                        {"id": "b", "title": "two", "content": "banana"},
                    ],
                }
            ]
        }
        http.put("/_control/v1/workspaces/mine/corpus", json=mine, headers=CTL)
        token = http.post("/_control/v1/identities", json={"account": "x", "route": "mine"}, headers=CTL).json()[
            "token"
        ]
        before = _order(http, "mine", token, "apple banana")
        # the other tenant: fifty documents about apples make "apple" a common word, there
        theirs = {
            "bases": [
                {
                    "id": "kb",
                    "items": [{"id": f"d{i}", "title": f"t{i}", "content": f"apple pie {i}"} for i in range(50)],
                }
            ]
        }
        http.put("/_control/v1/workspaces/theirs/corpus", json=theirs, headers=CTL)
        assert _order(http, "mine", token, "apple banana") == before and sorted(before) == ["one", "two"]
        # and the order does respond to this workspace's own corpus
        mine["bases"][0]["items"] += [{"id": f"c{i}", "title": f"c{i}", "content": "apple crumble"} for i in range(10)]
        http.put("/_control/v1/workspaces/mine/corpus", json=mine, headers=CTL)
        after = _order(http, "mine", token, "apple banana")
        assert after[0] == "two", after
