"""Properties of the simulator's byte budgets over arbitrary Unicode."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.common.transport import InProcessTransport
from simulator import create_app
from simulator.sizing import dumps, escaped_size, fit_prefix

TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=0, max_size=3000)


@given(TEXT, st.integers(min_value=0, max_value=20000))
def test_fit_prefix_is_the_largest_fitting_prefix(text: str, budget: int) -> None:
    keep = fit_prefix(text, budget)
    assert escaped_size(text[:keep]) <= budget
    if keep < len(text):
        assert escaped_size(text[: keep + 1]) > budget


def _chain(app: Any, doc: str, max_bytes: int) -> list[bytes]:
    """Every page body of the read chain of ``doc`` (one document of a fresh workspace)."""
    import httpx

    with httpx.Client(transport=InProcessTransport(app), base_url="http://sim") as http:  # closes the event loop too
        ctl = {"Authorization": "Bearer ctl"}
        http.post("/_control/v1/workspaces", json={"route": "prop"}, headers=ctl)
        http.put(
            "/_control/v1/workspaces/prop/corpus",
            json={"bases": [{"id": "kb", "items": [{"id": "d", "title": "findme", "content": doc}]}]},
            headers=ctl,
        )
        token = http.post("/_control/v1/identities", json={"account": "a", "route": "prop"}, headers=ctl).json()[
            "token"
        ]
        auth = {"Authorization": f"Bearer {token}"}
        turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "findme"}
        run = http.post("/agent-api/v1/workspaces/prop/turns", json=turn, headers=auth).json()["run_id"]
        hints = http.post(
            "/agent-api/v1/workspaces/prop/knowledge/search", json={"query": "findme", "run_id": run}, headers=auth
        ).json()["hints"]
        ref, cursor, pages = hints[0]["ref"], None, []
        while True:
            body = {"ref": ref, "run_id": run, "max_bytes": max_bytes, **({"cursor": cursor} if cursor else {})}
            response = http.post("/agent-api/v1/workspaces/prop/knowledge/read", json=body, headers=auth)
            assert response.status_code == 200, response.text
            pages.append(response.content)
            cursor = json.loads(response.content)["next_cursor"]
            if cursor is None:
                return pages


@settings(max_examples=25, deadline=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=60000), st.integers(4096, 32768))
def test_every_page_fits_and_pages_rebuild_the_document(doc: str, max_bytes: int) -> None:
    parts, total = [], 0
    for raw in _chain(create_app(demo=False, control_token="ctl"), doc, max_bytes):
        assert len(raw) <= max_bytes
        page = json.loads(raw)
        assert dumps(page) == raw
        parts.append(page["content"])
        total += len(page["content"].encode())
    assert total <= 131072
    if page.get("budget_exhausted"):
        assert doc.startswith("".join(parts)) and page["truncated"] is True
    else:
        assert "".join(parts) == doc and page["truncated"] is False


def test_pages_fit_on_a_moving_clock() -> None:
    """Served with a moving clock, a page was once 1 byte over max_bytes (131 of 40,091 pages): it was
    sized against a cursor stamped a moment earlier, whose timestamp had another length. This clock's
    readings alternate between a short and a long decimal form at every call."""
    readings = itertools.cycle([1_767_225_600.5, 1_767_225_600.123456789])
    doc = "".join(f'line {i:05d}: é😀 \\ "q"\n' for i in range(6000))
    app = create_app(
        demo=False, control_token="ctl", frozen_clock=False, clock_start=None, clock_source=lambda: next(readings)
    )
    pages = _chain(app, doc, 4096)
    assert len(pages) > 20 and max(len(raw) for raw in pages) <= 4096


def test_a_ticking_frozen_clock_moves_on_every_reading_and_replays() -> None:
    """The suite's bundled target ticks: every reading is a new instant, the same sequence each run."""
    from simulator.clock import Clock

    readings = [
        [c.now() for _ in range(3)]
        for c in (Clock(100.0, frozen=True, tick=1e-6), Clock(100.0, frozen=True, tick=1e-6))
    ]
    clock = Clock(100.0, frozen=True, tick=1e-6)
    first, second, third = clock.now(), clock.now(), clock.now()
    assert first < second < third and first == 100.0
    assert readings[0] == readings[1]
    assert Clock(100.0, frozen=True).now() == Clock(100.0, frozen=True).now()
    with pytest.raises(ValueError, match="negative"):
        Clock(0.0, frozen=True, tick=-1.0)
