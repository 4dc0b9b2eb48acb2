"""Seed 003 search_knowledge: the tool over the Agent Session MCP path, its states and control."""
import json

import pytest

from conftest import Mcp, doc

R = "acme"
SK_ROUTE = f"/agent-api/v1/workspaces/{R}/knowledge-service/search-knowledge"

CORPUS = [
    {"id": "ops", "name": "Operations", "items": [
        doc("runbook", "Deployment runbook", "Deploy the service with the release pipeline. "
            "Roll back a bad deploy within five minutes. " * 4),
        doc("auto", "Automobile care", "Service the automobile engine every spring; check the vehicle tyres."),
        doc("carwash", "Car wash", "The car wash opens at nine. A car is washed in ten minutes."),
        doc("window", "Windows", "a\U0001F600b\u0301c" + "x" * 20),
    ]},
    {"id": "hr", "name": "People", "items": [
        doc("leave", "Holiday policy", "Every employee gets twenty days of paid vacation a year."),
    ]},
]


def setup(c, account="alice"):
    assert c.ctl("POST", "/workspaces", {"route": R}).status == 201
    receipt = c.ctl("PUT", f"/workspaces/{R}/corpus", {"bases": CORPUS}).json["items"]
    ident = c.identity(account, R)
    return Mcp(c, R, ident["token"]), receipt, ident


def call(m, validate=None, **args):
    res = m.tool("search_knowledge", **args)
    sc = res["structuredContent"]
    if validate is not None and not res["isError"]:
        validate("search-knowledge-search-result" if sc["type"] == "knowledge_search"
                 else "search-knowledge-read-result", sc)
    return res["isError"], sc


def code_of(m, **args):
    is_error, sc = call(m, **args)
    assert is_error, sc
    assert sc["code"] == sc["feedback"]["code"]
    assert "results" not in sc and "content" not in sc
    return sc["code"]


def ids(sc):
    return [r["knowledge_item_id"] for r in sc["results"]]


# ------------------------------------------------------------------ shapes
def test_query_and_addressed_read_shapes(c, validate):
    m, receipt, _ = setup(c)
    for args in ({"query": "deployment runbook", "knowledge_base_id": "ops", "mode": "hybrid",
                  "alpha": 0.5, "max_results": 10},
                 {"knowledge_item_id": "runbook", "offset": 0, "limit_chars": 4000}):
        validate("search-knowledge-input", args)
    err, sc = call(m, validate, query="deployment runbook", knowledge_base_id="ops", mode="hybrid",
                   alpha=0.5, max_results=10)
    assert not err and sc["type"] == "knowledge_search" and ids(sc)[0] == "runbook"
    hit = sc["results"][0]
    assert hit["knowledge_revision_id"] == receipt["runbook"]
    assert set(hit["scores"]) >= {"lexical", "semantic", "hybrid", "final"}
    assert "audit" not in sc and "audit_event" not in sc
    err, sc = call(m, validate, knowledge_item_id="runbook")
    assert not err and sc["type"] == "knowledge"
    assert sc["owner"] == "alice" and sc["knowledge_base_id"] == "ops"
    assert sc["content_offset"] == 0 and sc["content_limit"] == 4000           # the defaults
    assert sc["content_total_chars"] == len(CORPUS[0]["items"][0]["content"])
    assert sc["content_truncated"] is False
    # knowledge_base_id validates an addressed item and narrows a query
    assert code_of(m, knowledge_item_id="runbook", knowledge_base_id="hr") == "knowledge_resource_unavailable"
    err, sc = call(m, query="vacation deploy", knowledge_base_id="hr")
    assert not err and ids(sc) == ["leave"]
    assert code_of(m, query="deploy", knowledge_base_id="nope") == "knowledge_resource_unavailable"


def test_validation_codes_and_boundaries(c):
    m, _, _ = setup(c)
    assert code_of(m, query="deploy", knowledge_item_id="runbook") == "knowledge_invalid_request"
    assert code_of(m, query="deploy", knowledge_item_id="runbook", knowledge_revision_id="1") == \
        "knowledge_invalid_request"
    assert code_of(m, knowledge_revision_id="1") == "knowledge_item_required"
    assert code_of(m, query="deploy", knowledge_revision_id="1") == "knowledge_item_required"   # choice
    assert code_of(m) == "knowledge_query_required"
    assert code_of(m, query="   ") == "knowledge_query_required"
    # limit_chars 0 / 1 / 10000 / 10001
    assert code_of(m, knowledge_item_id="runbook", limit_chars=0) == "knowledge_invalid_request"
    assert call(m, knowledge_item_id="runbook", limit_chars=1)[1]["content"] == "D"
    err, sc = call(m, knowledge_item_id="runbook", limit_chars=10000)
    assert not err and sc["content_limit"] == 10000
    assert code_of(m, knowledge_item_id="runbook", limit_chars=10001) == "knowledge_invalid_request"
    # a bound is checked whatever the shape
    assert code_of(m, query="deploy", limit_chars=10001) == "knowledge_invalid_request"
    # max_results 0 / 1 / 50 / 51
    assert code_of(m, query="the", max_results=0) == "knowledge_invalid_request"
    assert len(call(m, query="the car", max_results=1)[1]["results"]) == 1
    assert not call(m, query="the car", max_results=50)[0]
    assert code_of(m, query="the", max_results=51) == "knowledge_invalid_request"
    # offset negative; malformed values; an oversized query
    assert code_of(m, knowledge_item_id="runbook", offset=-1) == "knowledge_invalid_request"
    for bad in ({"limit_chars": "10"}, {"limit_chars": 2.5}, {"offset": True}, {"alpha": "high"},
                {"query": 7}, {"mode": 3}):
        assert code_of(m, **dict({"knowledge_item_id": "runbook"}, **bad)) == "knowledge_invalid_request", bad
    assert code_of(m, query="x" * 1001) == "knowledge_invalid_request"
    assert not call(m, query="car " * 250)[0]                     # 1000 characters
    # choice: null means the default; an integral float is an integer
    err, sc = call(m, knowledge_item_id="runbook", limit_chars=None, offset=2.0)
    assert not err and sc["content_limit"] == 4000 and sc["content_offset"] == 2


def test_undeclared_arguments_are_ignored(c):
    m, _, _ = setup(c)
    plain = call(m, query="vacation")[1]
    sneaky = call(m, query="vacation", owner="mallory", scope="everything", team="x", route="other",
                  account="root", knowledge_scope="all")[1]
    assert plain == sneaky and ids(plain) == ["leave"]


def test_windows_count_code_points(c, validate):
    m, _, _ = setup(c)
    content = "a\U0001F600b\u0301c" + "x" * 20
    err, sc = call(m, validate, knowledge_item_id="window", offset=1, limit_chars=1)
    assert sc["content"] == "\U0001F600" and sc["content_total_chars"] == len(content) == 25
    assert sc["content_truncated"] is True
    # a combining mark is its own code point: a window may end between base and mark
    assert call(m, knowledge_item_id="window", offset=2, limit_chars=1)[1]["content"] == "b"
    assert call(m, knowledge_item_id="window", offset=3, limit_chars=2)[1]["content"] == "\u0301c"
    pages, offset = [], 0
    while True:
        sc = call(m, validate, knowledge_item_id="window", offset=offset, limit_chars=4)[1]
        pages.append(sc["content"])
        offset += len(sc["content"])
        if not sc["content_truncated"]:
            break
    assert "".join(pages) == content
    # offset == total: an empty last window; past the end: refused (choice)
    sc = call(m, validate, knowledge_item_id="window", offset=25)[1]
    assert sc["content"] == "" and sc["content_truncated"] is False
    assert code_of(m, knowledge_item_id="window", offset=26) == "knowledge_invalid_request"


# ------------------------------------------------------------------ ranking
def test_semantic_finds_meaning_without_shared_terms(c):
    m, _, _ = setup(c)
    lex = ids(call(m, query="car", mode="lexical")[1])
    sem = ids(call(m, query="car", mode="semantic")[1])
    assert "auto" not in lex and lex[0] == "carwash"
    assert "auto" in sem[:2]                   # "automobile", "vehicle": no term in common with "car"
    sem = ids(call(m, query="time off for staff", mode="semantic")[1])
    assert sem[0] == "leave"


def test_alpha_is_the_lexical_weight_and_is_clamped(c):
    m, _, _ = setup(c)
    q = "car automobile"
    lex = ids(call(m, query=q, mode="lexical", max_results=50)[1])
    sem = ids(call(m, query=q, mode="semantic", max_results=50)[1])
    assert lex != sem
    one = call(m, query=q, alpha=1, max_results=50)[1]
    zero = call(m, query=q, alpha=0, max_results=50)[1]
    assert ids(one) == lex and ids(zero) == sem
    assert call(m, query=q, alpha=7.5, max_results=50)[1]["results"] == one["results"]
    assert call(m, query=q, alpha=-3, max_results=50)[1]["results"] == zero["results"]
    assert call(m, query=q, alpha=-3)[1]["alpha"] == 0.0
    half = call(m, query=q, max_results=50)[1]                   # default alpha 0.5
    assert half["alpha"] == 0.5
    for r in half["results"]:
        s = r["scores"]
        assert s["hybrid"] == pytest.approx(0.5 * s["lexical"] / (1 + s["lexical"]) + 0.5 * s["semantic"])


def test_rrf_fuses_the_servers_own_orders(c):
    m, _, _ = setup(c)
    q = "car automobile deploy"
    lex = ids(call(m, query=q, mode="lexical", max_results=50)[1])
    sem = ids(call(m, query=q, mode="semantic", max_results=50)[1])
    rrf = call(m, query=q, mode="rrf", max_results=50)[1]["results"]
    expected = {}
    for order in (lex, sem):
        for rank, key in enumerate(order, start=1):
            expected[key] = expected.get(key, 0.0) + 1.0 / (60 + rank)
    assert {r["knowledge_item_id"]: r["scores"]["rrf"] for r in rrf} == pytest.approx(expected)
    finals = [r["scores"]["final"] for r in rrf]
    assert finals == sorted(finals, reverse=True)


def test_mode_normalisation(c):
    m, _, _ = setup(c)
    hybrid = call(m, query="car")[1]
    for mode in ("fuzzy", "", "LEXICAL", " lexical"):            # choice: exact names only
        sc = call(m, query="car", mode=mode)[1]
        assert sc["mode"] == "hybrid" and sc["results"] == hybrid["results"], mode
    assert call(m, query="car", mode="lexical")[1]["mode"] == "lexical"


# ------------------------------------------------------------------ states, scopes, audit
def test_current_revisions_and_immutable_history(c, validate):
    m, receipt, _ = setup(c)
    old = receipt["carwash"]
    r = c.ctl("POST", f"/workspaces/{R}/knowledge/items/carwash/revisions",
              {"title": "Car wash", "content": "The car wash now also polishes bicycles."})
    assert r.status == 201
    new = r.json["revision_id"]
    assert new != old
    hit = next(h for h in call(m, query="car wash")[1]["results"] if h["knowledge_item_id"] == "carwash")
    assert hit["knowledge_revision_id"] == new and "bicycles" in hit["excerpt"]
    assert not call(m, query="opens nine", mode="lexical")[1]["results"]     # the old text is not searched
    err, sc = call(m, validate, knowledge_item_id="carwash", knowledge_revision_id=old)
    assert not err and sc["knowledge_revision_id"] == old and "opens at nine" in sc["content"]
    assert sc["current"] is False
    assert call(m, knowledge_item_id="carwash")[1]["knowledge_revision_id"] == new
    # another item's revision is unavailable
    assert code_of(m, knowledge_item_id="auto", knowledge_revision_id=old) == "knowledge_resource_unavailable"


def test_inactive_unpublished_and_unauthorized_look_absent(c):
    m, _, _ = setup(c)
    absent = call(m, knowledge_item_id="ghost")[1]

    def same_as_absent(**args):
        assert call(m, **args)[1] == absent          # the whole refusal, byte for byte

    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/items/carwash/state", {"active": False}).status == 204
    same_as_absent(knowledge_item_id="carwash")
    assert "carwash" not in ids(call(m, query="car wash")[1])
    c.ctl("PUT", f"/workspaces/{R}/knowledge/items/carwash/state", {"active": True})
    assert not call(m, knowledge_item_id="carwash")[0]
    c.ctl("PUT", f"/workspaces/{R}/knowledge/items/carwash/state", {"published": False})
    same_as_absent(knowledge_item_id="carwash")
    assert "carwash" not in ids(call(m, query="car wash")[1])
    # a new revision through the Knowledge service publishes the item again
    c.ctl("POST", f"/workspaces/{R}/knowledge/items/carwash/revisions", {"content": "car wash again"})
    assert not call(m, knowledge_item_id="carwash")[0]
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/bases/hr/state", {"active": False}).status == 204
    same_as_absent(knowledge_item_id="leave")
    assert "leave" not in ids(call(m, query="vacation")[1])
    c.ctl("PUT", f"/workspaces/{R}/knowledge/bases/hr/state", {"active": True})
    # a base outside the account's scope
    c.ctl("PUT", f"/workspaces/{R}/scopes/alice", {"bases": ["ops"]})
    same_as_absent(knowledge_item_id="leave")
    same_as_absent(query="vacation", knowledge_base_id="hr")
    assert "leave" not in ids(call(m, query="vacation")[1])
    # control validation
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/items/carwash/state", {}).status == 400
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/items/nope/state", {"active": False}).status == 404
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/bases/hr/state", {"active": "no"}).status == 400


def test_runtime_switch_scope_and_audit(c):
    m, _, _ = setup(c)
    before = c.ctl("GET", f"/workspaces/{R}/knowledge/audit").json["events"]
    for args in ({"query": "car"}, {"knowledge_item_id": "auto"}, {"query": "x", "knowledge_item_id": "y"}):
        call(m, **args)
    assert c.ctl("GET", f"/workspaces/{R}/knowledge/audit").json["events"] == before     # read-only
    # runtime off: a knowledge_unavailable envelope, never results
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/runtime", {"enabled": False}).json == {"enabled": False}
    err, sc = call(m, query="car")
    assert err and sc["type"] == "knowledge_unavailable" and sc["code"] == "knowledge_runtime_disabled"
    assert "results" not in sc
    c.ctl("PUT", f"/workspaces/{R}/knowledge/runtime", {"enabled": True})
    # scopes: every account reads until control sets its scopes
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/scopes/alice", {"scopes": ["knowledge:write"]}).status == 200
    assert code_of(m, query="car") == "knowledge_scope_missing"
    assert code_of(m, knowledge_item_id="auto") == "knowledge_scope_missing"
    bob = Mcp(c, R, c.identity("bob", R)["token"])
    assert not call(bob, query="car")[0]
    c.ctl("PUT", f"/workspaces/{R}/knowledge/scopes/alice", {"scopes": ["knowledge:read"]})
    assert not call(m, query="car")[0]
    actions = [e["action"] for e in c.ctl("GET", f"/workspaces/{R}/knowledge/audit").json["events"]]
    assert actions[-4:] == ["knowledge.runtime.disabled", "knowledge.runtime.enabled",
                            "knowledge.scopes.set", "knowledge.scopes.set"]
    assert c.ctl("GET", "/workspaces/zzz/knowledge/audit").status == 404


def test_core_route_answers_directly(c):
    _, _, ident = setup(c)
    r = c.call("POST", SK_ROUTE, {"query": "car", "max_results": 2}, token=ident["token"])
    assert r.status == 200 and r.json["type"] == "knowledge_search" and len(r.json["results"]) == 2
    r = c.call("POST", SK_ROUTE, {"knowledge_item_id": "ghost"}, token=ident["token"])
    assert r.status == 404 and r.json["error"] == "knowledge_resource_unavailable"
    assert c.call("POST", SK_ROUTE, raw=b"[1", token=ident["token"]).json["error"] == "knowledge_invalid_request"
    assert c.call("POST", SK_ROUTE, {"query": "car"}).status == 401
    other = c.identity("bob", R)   # same workspace, other account: fine
    assert c.call("POST", SK_ROUTE, {"query": "car"}, token=other["token"]).status == 200
    body = json.dumps(c.call("POST", SK_ROUTE, {"query": "car"}, token=ident["token"]).json)
    assert "audit" not in body


def test_states_reach_the_seed_000_surface(c, validate):
    _, _, ident = setup(c)
    tok = ident["token"]
    run = c.turn(R, tok, text="car").json["run_id"]
    hints = c.search(R, tok, "car wash", run).json["hints"]
    ref = next(h["ref"] for h in hints if h["title"] == "Car wash")
    assert c.read(R, tok, ref, run).status == 200
    c.ctl("PUT", f"/workspaces/{R}/knowledge/items/carwash/state", {"published": False})
    assert all(h["title"] != "Car wash" for h in c.search(R, tok, "car wash", run).json["hints"])
    r = c.read(R, tok, ref, run)
    assert r.status == 409 and r.json["error"] == "knowledge_revision_changed"
    validate("reference-error", r.json)
    # the seed-000 modes do not touch the Knowledge service; only its runtime switch does
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "legacy"})
    assert c.call("POST", SK_ROUTE, {"query": "car"}, token=tok).status == 200
    r = c.call("GET", f"/agent-api/v1/workspaces/{R}/bootstrap", token=tok)
    assert r.status == 200 and r.json["route"] == R and r.json["account"] == "alice"
    assert c.call("GET", "/agent-api/v1/session", token=tok).json == r.json
