"""The reference simulator at the contract's edges: expiry just below, at and just above 300 s,
and the control extension's read-back of a lost turn response."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conformance.common.transport import InProcessTransport
from simulator import create_app

CTL = {"Authorization": "Bearer ctl"}
BASE = "/agent-api/v1/workspaces/edge"


@pytest.fixture
def sim() -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    with httpx.Client(
        transport=InProcessTransport(create_app(demo=False, control_token="ctl")), base_url="http://sim"
    ) as http:
        assert http.post("/_control/v1/workspaces", json={"route": "edge"}, headers=CTL).status_code == 201
        items = [{"id": "d", "title": "edge doc", "content": "findme " + "text " * 5000}]
        http.put("/_control/v1/workspaces/edge/corpus", json={"bases": [{"id": "kb", "items": items}]}, headers=CTL)
        token = http.post("/_control/v1/identities", json={"account": "a", "route": "edge"}, headers=CTL).json()[
            "token"
        ]
        yield http, {"Authorization": f"Bearer {token}"}


def _turn(http: httpx.Client, auth: dict[str, str], key: str, delivery: str = "on_demand") -> httpx.Response:
    body = {
        "client_conversation_id": key,
        "client_turn_id": key,
        "user_message_id": key,
        "user_input": "findme",
        "knowledge_delivery": delivery,
    }
    return http.post(f"{BASE}/turns", json=body, headers=auth)


def _ref(http: httpx.Client, auth: dict[str, str], run_id: str) -> str:
    hints = http.post(f"{BASE}/knowledge/search", json={"query": "findme", "run_id": run_id}, headers=auth).json()[
        "hints"
    ]
    return str(hints[0]["ref"])


def _advance(http: httpx.Client, seconds: float) -> None:
    http.post("/_control/v1/clock/advance", json={"seconds": seconds, "routes": ["edge"]}, headers=CTL)


@pytest.mark.parametrize(("age", "status"), [(299.9, 200), (300.0, 410), (300.1, 410)])
def test_expiry_edge_holds_after_the_clock_drifted_by_float_steps(
    sim: tuple[httpx.Client, dict[str, str]], age: float, status: int
) -> None:
    """Valid below 300 s, expired from 300 s on (CHOICES.md), for a reference and its cursor,
    after earlier advances in steps of 0.1 s (a float sum that is not a round value)."""
    http, auth = sim
    for _ in range(7):
        _advance(http, 0.1)
    run_id = _turn(http, auth, "edge-run").json()["run_id"]
    ref = _ref(http, auth, run_id)
    first = http.post(
        f"{BASE}/knowledge/read", json={"ref": ref, "run_id": run_id, "max_bytes": 4096}, headers=auth
    ).json()
    _advance(http, age)
    for extra in ({}, {"cursor": first["next_cursor"]}):
        response = http.post(f"{BASE}/knowledge/read", json={"ref": ref, "run_id": run_id, **extra}, headers=auth)
        assert response.status_code == status, (extra.keys(), response.text[:200])


def test_control_reads_back_what_a_lost_turn_response_withheld(sim: tuple[httpx.Client, dict[str, str]]) -> None:
    http, auth = sim
    assert http.get("/_control/v1/faults/lost", params={"route": "edge"}, headers=CTL).json() == {"responses": []}
    http.post("/_control/v1/faults", json={"kind": "lose_next_turn_response", "route": "edge"}, headers=CTL)
    assert _turn(http, auth, "lost").status_code == 502
    withheld: list[dict[str, Any]] = http.get("/_control/v1/faults/lost", params={"route": "edge"}, headers=CTL).json()[
        "responses"
    ]
    assert [(w["route"], w["status"]) for w in withheld] == [("edge", 200)]
    retried = _turn(http, auth, "lost")
    assert retried.status_code == 200 and retried.json() == withheld[0]["body"], (
        "the retry replays exactly what was committed"
    )
    assert _turn(http, auth, "lost", "inline").status_code == 409
    assert http.get("/_control/v1/faults/lost", params={"route": "other"}, headers=CTL).json() == {"responses": []}
    assert http.get("/_control/v1/faults/lost", headers={}).status_code == 401
