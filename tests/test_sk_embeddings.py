"""search_knowledge's optional real embedding model (the ``embeddings`` extra): WordLlama, whose
weights and tokenizer ship in its wheel, loads and embeds with every network call refused, ranks
a paraphrase the default character n-grams cannot see, and leaves the host's logging alone.
Without the extra, choosing it is a usage error that names the extra."""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import pytest
from starlette.testclient import TestClient

from simulator import create_app
from simulator.search_knowledge.ranking import HashedNgrams, cosine, embedder_for
from simulator.search_knowledge.routes import TOOL_PATH

CONTROL = {"authorization": "Bearer control"}
QUERY = "how do we roll out software to production"
CORPUS = {
    "deploy": "Release rollout checklist: ship the new build to the live servers",
    "cake": "Chocolate cake recipe with butter, sugar and flour",
}


@pytest.fixture(scope="module")
def wordllama() -> Any:
    """The real model, loaded with every HTTP request refused: nothing may come from a model hub."""
    pytest.importorskip("wordllama", reason="the embeddings extra is not installed")
    requests = importlib.import_module("requests")

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the wordllama embedder reached for the network: {args[:2]}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(requests.Session, "request", refused)
        patch.setattr(requests, "get", refused)
        return embedder_for("wordllama")


def test_the_model_embeds_offline_deterministically_and_semantically(wordllama: Any) -> None:
    query, deploy, cake = (wordllama.embed(t) for t in (QUERY, CORPUS["deploy"], CORPUS["cake"]))
    assert len(query) == 256 and query == wordllama.embed(QUERY)
    assert cosine(query, deploy) > cosine(query, cake) + 0.1
    hashed = HashedNgrams()  # the default sees the words, not the meaning: no such margin
    assert cosine(hashed.embed(QUERY), hashed.embed(CORPUS["deploy"])) - cosine(
        hashed.embed(QUERY), hashed.embed(CORPUS["cake"])
    ) < cosine(query, deploy) - cosine(query, cake)


def test_the_tool_ranks_a_paraphrase_with_the_model(wordllama: Any) -> None:
    client = TestClient(create_app(seed=2, demo=False, control_token="control", embedder="wordllama"))
    client.post("/_control/v1/workspaces", json={"route": "ws"}, headers=CONTROL)
    items = [{"id": i, "title": i, "content": text} for i, text in CORPUS.items()]
    client.put("/_control/v1/workspaces/ws/corpus", json={"bases": [{"id": "kb", "items": items}]}, headers=CONTROL)
    token = client.post("/_control/v1/identities", json={"account": "a", "route": "ws"}, headers=CONTROL).json()[
        "token"
    ]
    body = client.post(
        TOOL_PATH.format(route="ws"),
        json={"query": QUERY, "mode": "semantic"},
        headers={"authorization": f"Bearer {token}"},
    ).json()
    assert body["results"] and body["results"][0]["knowledge_item_id"] == "deploy"


def test_loading_the_model_leaves_the_hosts_logging_alone(wordllama: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """wordllama configures the root logger when first imported (where the root has no handler yet)."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    for name in [n for n in sys.modules if n == "wordllama" or n.startswith("wordllama.")]:
        monkeypatch.delitem(sys.modules, name)
    embedder_for("wordllama")
    assert (root.handlers, root.level) == ([], logging.WARNING)


def test_without_the_extra_the_choice_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def missing(name: str, *args: Any) -> Any:
        if name == "wordllama":
            raise ImportError("No module named 'wordllama'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ValueError, match=r"knowledge-conformance\[embeddings\]"):
        create_app(demo=False, embedder="wordllama")
