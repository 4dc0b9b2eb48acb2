"""The simulator's ``search_knowledge`` tool (seed 003): ranking arithmetic worked by hand,
window arithmetic in code points, the errors of the seed, and the states control drives."""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
import httpx
import pytest
from starlette.testclient import TestClient

from simulator import create_app
from simulator.mcp.tools import AgentTools, CoreHttp, Session
from simulator.search_knowledge.ranking import (
    RRF_K,
    Doc,
    HashedNgrams,
    Scored,
    bm25,
    cosine,
    embedder_for,
    fuse,
    rank,
    tokens,
)
from simulator.search_knowledge.routes import TOOL_PATH
from simulator.search_knowledge.tool import UNAVAILABLE

CONTROL = {"authorization": "Bearer control"}


# ----------------------------------------------------------------- ranking arithmetic
def test_bm25_matches_the_formula_worked_by_hand() -> None:
    docs = [Doc("a", "apple apple pear"), Doc("b", "pear plum"), Doc("c", "plum plum plum plum")]
    scores = bm25("apple", docs)
    n, having, avg, tf, length = 3, 1, 9 / 3, 2, 3
    idf = math.log(1 + (n - having + 0.5) / (having + 0.5))
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))
    assert scores["a"] == pytest.approx(expected)
    assert scores["b"] == scores["c"] == 0.0


def test_bm25_statistics_come_from_every_document_given() -> None:
    """A rarer term in the workspace weighs more, whoever asks: the idf counts all documents."""
    few = bm25("pear", [Doc("a", "pear x"), Doc("b", "y z")])["a"]
    many = bm25("pear", [Doc("a", "pear x"), Doc("b", "pear z")])["a"]
    assert few > many > 0


def test_tokens_are_casefolded_words() -> None:
    assert tokens("Straße, DEPLOY-ing 42") == ["strasse", "deploy", "ing", "42"]


def test_the_default_embedding_is_deterministic_and_offline() -> None:
    first, again = HashedNgrams().embed("deployment runbook"), HashedNgrams().embed("deployment runbook")
    assert first == again and len(first) == 256 and sum(first) > 0
    assert cosine(first, HashedNgrams().embed("deploying")) > cosine(first, HashedNgrams().embed("catering menu"))
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0


def test_rrf_sums_reciprocal_ranks_with_k_60_from_rank_1() -> None:
    rows = {
        i: _scored(i, lex, sem) for i, lex, sem in (("a", 3.0, 0.1), ("b", 2.0, 0.9), ("c", 1.0, 0.5), ("d", 0.0, 0.8))
    }
    fused = fuse(rows)
    # lexical: a1 b2 c3; semantic: b1 d2 c3 a4
    expected = {"a": 1 / 61 + 1 / 64, "b": 1 / 62 + 1 / 61, "c": 2 / 63, "d": 1 / 62}
    assert RRF_K == 60
    assert {s.item_id: s.final for s in fused} == pytest.approx(expected)
    assert [s.item_id for s in fused] == ["b", "a", "c", "d"]
    assert fused[0].ranks == {"lexical": 2, "semantic": 1}


def test_rrf_ties_go_to_the_better_single_rank_then_the_item() -> None:
    # x: lexical 1, semantic 2; y: lexical 2, semantic 1 -> equal sums; same best rank -> item ID.
    fused = fuse({"y": _scored("y", 1.0, 0.9), "x": _scored("x", 2.0, 0.5)})
    assert fused[0].final == fused[1].final and [s.item_id for s in fused] == ["x", "y"]


def test_hybrid_alpha_is_the_lexical_weight_over_max_normalised_scores() -> None:
    docs = [Doc("lex", "deploying " + "filler " * 40), Doc("sem", "deploy deployed deployment deploys")]
    emb = HashedNgrams()
    lexical = [s.item_id for s in rank("lexical", "deploying", docs, {"lex", "sem"}, emb)]
    semantic = [s.item_id for s in rank("semantic", "deploying", docs, {"lex", "sem"}, emb)]
    assert lexical == ["lex"] and semantic[0] == "sem"
    assert [s.item_id for s in rank("hybrid", "deploying", docs, {"lex", "sem"}, emb, 1.0)] == ["lex", "sem"]
    assert [s.item_id for s in rank("hybrid", "deploying", docs, {"lex", "sem"}, emb, 0.0)] == ["sem", "lex"]
    mixed = {s.item_id: s for s in rank("hybrid", "deploying", docs, {"lex", "sem"}, emb, 0.25)}
    top_sem = max(mixed["lex"].semantic, mixed["sem"].semantic)
    assert mixed["lex"].final == pytest.approx(0.25 * 1.0 + 0.75 * mixed["lex"].semantic / top_sem)
    assert mixed["sem"].final == pytest.approx(0.75 * mixed["sem"].semantic / top_sem)


def _scored(item: str, lexical: float, semantic: float) -> Scored:
    return Scored(item, lexical, semantic)


# ----------------------------------------------------------------- the tool over HTTP
@pytest.fixture(params=[False, True], ids=["in-order", "concurrent"])  # concurrent: as knowledge-sim serve runs it
def sim(request: pytest.FixtureRequest) -> Any:
    app = create_app(seed=3, demo=False, control_token="control", concurrent=request.param)
    client = TestClient(app)
    client.post("/_control/v1/workspaces", json={"route": "ws"}, headers=CONTROL)
    text = 'a\U0001f600e\u0301中\U0001d11e"z' * 3
    corpus = {
        "bases": [
            {
                "id": "kb",
                "items": [
                    {"id": "doc", "title": "Doc", "content": text},
                    {"id": "runbook", "title": "Runbook", "content": "deployment runbook steps"},
                ],
            },
            {"id": "secret", "items": [{"id": "hidden", "title": "Hidden", "content": "deployment secrets"}]},
        ]
    }
    revisions = client.put("/_control/v1/workspaces/ws/corpus", json=corpus, headers=CONTROL).json()["items"]
    client.put("/_control/v1/workspaces/ws/scopes/alice", json={"bases": ["kb"]}, headers=CONTROL)
    tokens = {
        name: client.post("/_control/v1/identities", json={"account": name, "route": "ws"}, headers=CONTROL).json()[
            "token"
        ]
        for name in ("alice", "bob")
    }

    def ask(arguments: dict[str, Any], who: str = "alice") -> tuple[int, dict[str, Any]]:
        response = client.post(
            TOOL_PATH.format(route="ws"), json=arguments, headers={"authorization": f"Bearer {tokens[who]}"}
        )
        return response.status_code, response.json()

    return client, ask, text, revisions


def test_windows_count_code_points(sim: Any) -> None:
    _, ask, text, _ = sim
    assert len(text) == 24 and len(text.encode()) > 48
    status, body = ask({"knowledge_item_id": "doc", "offset": 1, "limit_chars": 3})
    assert status == 200 and body["content"] == "\U0001f600e\u0301"  # the astral character and a split combining pair
    assert (body["content_offset"], body["content_limit"], body["content_total_chars"], body["content_truncated"]) == (
        1,
        3,
        24,
        True,
    )
    _, last = ask({"knowledge_item_id": "doc", "offset": 20, "limit_chars": 10})
    assert last["content"] == text[20:] and last["content_truncated"] is False
    _, past = ask({"knowledge_item_id": "doc", "offset": 99})
    assert past["content"] == "" and past["content_truncated"] is False
    _, default = ask({"knowledge_item_id": "doc"})
    assert default["content"] == text and default["content_limit"] == 4000


def test_the_seeds_errors(sim: Any) -> None:
    _, ask, _, revisions = sim
    cases = [
        ({"query": "x", "knowledge_item_id": "doc"}, 400, "knowledge_invalid_request"),
        ({"query": "x", "knowledge_revision_id": "r"}, 400, "knowledge_invalid_request"),
        ({}, 400, "knowledge_query_required"),
        ({"query": "   "}, 400, "knowledge_query_required"),
        ({"knowledge_revision_id": "r"}, 400, "knowledge_item_required"),
        ({"query": "x", "max_results": 51}, 400, "knowledge_invalid_request"),
        ({"query": "x", "max_results": 0}, 400, "knowledge_invalid_request"),
        ({"knowledge_item_id": "doc", "limit_chars": 10001}, 400, "knowledge_invalid_request"),
        ({"knowledge_item_id": "doc", "offset": -1}, 400, "knowledge_invalid_request"),
        ({"query": "x", "owner": "bob"}, 400, "knowledge_invalid_request"),
        ({"query": "x", "offset": "1"}, 400, "invalid_arguments"),
        ({"query": "x", "alpha": True}, 400, "invalid_arguments"),
        ({"query": "q" * 2001}, 400, "invalid_arguments"),
    ]
    for arguments, status, code in cases:
        got_status, body = ask(arguments)
        assert (got_status, body["error"], body["type"]) == (status, code, "knowledge_error"), arguments
    for arguments in (
        {"query": "x", "max_results": 50},
        {"query": "x", "max_results": 1},
        {"knowledge_item_id": "doc", "limit_chars": 10000},
        {"knowledge_item_id": "doc", "limit_chars": 1},
        {"query": "x", "alpha": 7},
        {"query": "x", "mode": "nope"},
    ):
        assert ask(arguments)[0] == 200, arguments
    assert revisions["doc"] != revisions["hidden"]


def test_unavailable_is_one_answer_for_absent_unauthorized_inactive_and_unpublished(sim: Any) -> None:
    client, ask, _, revisions = sim
    client.post("/_control/v1/workspaces", json={"route": "ws2"}, headers=CONTROL)
    client.put("/_control/v1/workspaces/ws/knowledge/items/runbook/state", json={"published": False}, headers=CONTROL)
    answers = [
        ask(a)
        for a in (
            {"knowledge_item_id": "nope"},
            {"knowledge_item_id": "hidden"},
            {"knowledge_item_id": "runbook"},
            {"knowledge_item_id": "doc", "knowledge_revision_id": revisions["hidden"]},
            {"knowledge_item_id": "doc", "knowledge_revision_id": "rev_nope"},
            {"knowledge_item_id": "doc", "knowledge_base_id": "secret"},
            {"query": "deployment", "knowledge_base_id": "secret"},
        )
    ]
    assert {json.dumps(a, sort_keys=True) for a in answers} == {
        json.dumps(
            (404, {"type": "knowledge_error", "error": "knowledge_resource_unavailable", "message": UNAVAILABLE}),
            sort_keys=True,
        )
    }
    client.put("/_control/v1/workspaces/ws/knowledge/items/doc/state", json={"active": False}, headers=CONTROL)
    assert ask({"knowledge_item_id": "doc"})[1]["error"] == "knowledge_resource_unavailable"
    assert [
        h["knowledge_item_id"] for h in ask({"query": "deployment"})[1]["results"]
    ] == []  # runbook unpublished, hidden unauthorized


def test_query_follows_published_current_revisions_and_reads_pin_old_ones(sim: Any) -> None:
    client, ask, _, revisions = sim
    new = client.post(
        "/_control/v1/workspaces/ws/knowledge/items/runbook/revisions",
        json={"content": "rollback checklist"},
        headers=CONTROL,
    ).json()["revision_id"]
    hits = ask({"query": "rollback", "mode": "lexical"})[1]["results"]
    assert [(h["knowledge_item_id"], h["knowledge_revision_id"]) for h in hits] == [("runbook", new)]
    assert ask({"query": "steps", "mode": "lexical"})[1]["results"] == []  # the first revision is not searched
    old = ask({"knowledge_item_id": "runbook", "knowledge_revision_id": revisions["runbook"]})[1]
    assert (old["knowledge_revision_id"], old["content"]) == (revisions["runbook"], "deployment runbook steps")


def test_scope_runtime_and_audit_through_control(sim: Any) -> None:
    client, ask, _, _ = sim
    audit = "/_control/v1/workspaces/ws/knowledge/audit"
    before = client.get(audit, headers=CONTROL).json()["events"]
    for arguments in ({"query": "deployment"}, {"knowledge_item_id": "doc"}, {"knowledge_item_id": "nope"}):
        ask(arguments)
    assert client.get(audit, headers=CONTROL).json()["events"] == before  # read-only: no audit event
    client.put("/_control/v1/workspaces/ws/knowledge/scopes/bob", json={"scopes": []}, headers=CONTROL)
    assert ask({"query": "deployment"}, who="bob") == (
        403,
        {
            "type": "knowledge_error",
            "error": "insufficient_scope",
            "message": "search_knowledge needs the knowledge:read scope",
        },
    )
    client.put("/_control/v1/workspaces/ws/knowledge/runtime", json={"enabled": False}, headers=CONTROL)
    status, body = ask({"query": "deployment"})
    assert (status, body["type"], body["error"]) == (503, "knowledge_unavailable", "knowledge_runtime_disabled")
    assert [e["action"] for e in client.get(audit, headers=CONTROL).json()["events"]][
        -1
    ] == "knowledge.runtime.disabled"


def test_replacing_the_corpus_forgets_the_states(sim: Any) -> None:
    client, ask, _, _ = sim
    client.put("/_control/v1/workspaces/ws/knowledge/items/doc/state", json={"active": False}, headers=CONTROL)
    corpus = {"bases": [{"id": "kb", "items": [{"id": "doc", "title": "Doc", "content": "fresh"}]}]}
    client.put("/_control/v1/workspaces/ws/corpus", json=corpus, headers=CONTROL)
    assert ask({"knowledge_item_id": "doc"})[1]["content"] == "fresh"


def test_the_mcp_path_hides_and_serves_the_tool() -> None:
    app = create_app(seed=5, demo=True)
    route = app.state.core.store.routes()[0]
    token = app.state.core.store.identities(route)[0].token
    tools = AgentTools(CoreHttp(httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim.local")))
    assert "search_knowledge" not in {t.name for t in tools.tools()}

    async def both() -> tuple[Any, Any]:
        session = Session(token=token, route=route)
        return (
            await tools.call(session, "search_knowledge", {"query": "expense policy"}),
            await tools.call(session, "search_knowledge", {"knowledge_item_id": "no-such-item"}),
        )

    found, refused = anyio.run(both)
    assert (
        not found.is_error
        and found.structured_content["type"] == "knowledge_search"
        and found.structured_content["results"]
    )
    assert refused.is_error and refused.structured_content["error"] == "knowledge_resource_unavailable"


def test_the_embedder_is_chosen_by_name() -> None:
    assert isinstance(embedder_for("hashed"), HashedNgrams)
    with pytest.raises(ValueError, match="known: hashed"):
        create_app(demo=False, embedder="no-such-model")
