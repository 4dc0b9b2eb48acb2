"""Search and read latency of the simulator on a 10,000-document corpus (pytest-benchmark figures, no timed assertions)."""

from __future__ import annotations

from collections.abc import Iterator
from random import Random
from typing import Any

import httpx
import pytest

from conformance.target.transport import InProcessTransport
from simulator import create_app
from simulator.store import ItemInput

COMMON = (
    "binding deploy runbook expense policy onboarding homepage release archive budget cursor scope revision".split()
)
RARE = [f"term{i:04d}" for i in range(5000)]  # a long tail: most words are rare, as in real documents


def _words(rng: Random, n: int) -> str:
    return " ".join(
        rng.choice(COMMON) if rng.random() < 0.3 else RARE[int(rng.paretovariate(1.1)) % len(RARE)] for _ in range(n)
    )


@pytest.fixture(scope="module")
def loaded() -> Iterator[dict[str, Any]]:
    rng = Random(3)
    app = create_app(demo=False, control_token="ctl")
    core = app.state.core
    core.store.create_workspace("bench")
    items = [
        ItemInput(f"doc-{i}", f"Document {i} {rng.choice(COMMON)}", _words(rng, rng.randint(50, 400)))
        for i in range(10_000)
    ]
    core.store.replace_corpus("bench", [("kb", "kb", items)], core.clock.now())
    ident = core.store.mint_identity("a", "bench", core.config.hub, None)
    http = httpx.Client(transport=InProcessTransport(app), base_url="http://sim")
    auth = {"Authorization": f"Bearer {ident.token}"}
    turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "x"}
    run = http.post("/agent-api/v1/workspaces/bench/turns", json=turn, headers=auth).json()["run_id"]
    ref = http.post(
        "/agent-api/v1/workspaces/bench/knowledge/search", json={"query": "deploy budget", "run_id": run}, headers=auth
    ).json()["hints"][0]["ref"]
    yield {"http": http, "auth": auth, "run": run, "ref": ref}
    http.close()


@pytest.mark.parametrize(
    ("kind", "query"), [("broad", "deploy budget scope"), ("selective", "term0700 term1200 term2400")]
)
def test_benchmark_search_10k(benchmark: Any, loaded: dict[str, Any], kind: str, query: str) -> None:
    """broad: common words that nearly every document holds; selective: rarer words, as most real queries are."""

    http: httpx.Client = loaded["http"]

    def search() -> httpx.Response:
        return http.post(
            "/agent-api/v1/workspaces/bench/knowledge/search",
            json={"query": query, "run_id": loaded["run"]},
            headers=loaded["auth"],
        )

    response = benchmark(search)
    assert response.status_code == 200 and len(response.json()["hints"]) == 3


def test_benchmark_read_10k(benchmark: Any, loaded: dict[str, Any]) -> None:
    http: httpx.Client = loaded["http"]

    def read() -> httpx.Response:
        return http.post(
            "/agent-api/v1/workspaces/bench/knowledge/read",
            json={"ref": loaded["ref"], "run_id": loaded["run"]},
            headers=loaded["auth"],
        )

    response = benchmark(read)
    assert response.status_code == 200 and response.json()["content"]
