"""Per-request costs of the simulator in-process (pytest-benchmark figures, no timed assertions):
search and read on a 10,000-document corpus, searching the index alone, fitting a page into its
byte budget, and signing and verifying a reference. A regression shows in the numbers."""

from __future__ import annotations

from collections.abc import Iterator
from random import Random
from typing import Any

import httpx
import pytest

from conformance.common.transport import InProcessTransport
from simulator import create_app
from simulator.signing import Signer
from simulator.sizing import fit_prefix
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
    yield {"http": http, "auth": auth, "run": run, "ref": ref, "store": core.store}
    http.close()


QUERIES = [
    ("broad", "deploy budget scope"),
    ("selective", "term0700 term1200 term2400"),
    ("x32", " ".join(COMMON + RARE[:19])),  # the contract's longest useful query: 32 words
]


@pytest.mark.parametrize(("kind", "query"), QUERIES)
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


@pytest.mark.parametrize(("kind", "query"), QUERIES)
def test_benchmark_store_search_10k(benchmark: Any, loaded: dict[str, Any], kind: str, query: str) -> None:
    """The store's search alone (index, row numbers, current revisions), without HTTP and the Core's checks."""
    store = loaded["store"]
    found = benchmark(lambda: store.search("bench", query, None, 3))
    assert len(found) == 3


@pytest.mark.parametrize("text", ["plain " * 4000, 'esc"aped\\ \u00e9\U0001f600\n' * 1500], ids=["ascii", "escapes"])
def test_benchmark_page_fitting(benchmark: Any, text: str) -> None:
    """The largest prefix whose JSON-escaped form fits a 16 KB page (the read's page fitting)."""
    kept = benchmark(lambda: fit_prefix(text, 16_384, raw_budget=16_384))
    assert 0 < kept < len(text)


def test_benchmark_reference_signing(benchmark: Any) -> None:
    """Sign a reference and verify it, as a search (sign) and a read (verify) each do per hint."""
    signer = Signer(bytes(range(32)))
    claims = {
        "w": "bench",
        "h": "https://hub",
        "s": "sid",
        "a": "alice",
        "r": "run",
        "i": "doc-1",
        "v": "rev_1",
        "sv": 1,
        "t": 1.0,
    }

    def round_trip() -> dict[str, Any]:
        return signer.verify("ref", signer.sign("ref", claims))

    assert benchmark(round_trip) == claims
