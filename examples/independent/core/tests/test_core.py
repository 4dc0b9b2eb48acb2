"""Main behaviours of blindcore against its own HTTP server."""
import json

from conftest import CONTROL, doc

R = "acme"
CAPS = f"/agent-api/v1/workspaces/{R}/knowledge/capabilities"


def setup_primary(c, docs=None, **kw):
    c.workspace(R, docs or [
        doc("home", "Homepage binding", "The homepage binding ties a workspace to its domain. " * 120,
            "How the homepage binds to a workspace"),
        doc("bill", "Billing", "Invoices are sent monthly."),
    ], **kw)
    ident = c.identity("alice", R)
    return ident["token"], ident


# ------------------------------------------------------------------ capabilities
def test_capabilities(c, validate):
    tok, _ = setup_primary(c)
    r = c.call("GET", CAPS, token=tok)
    assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
    validate("capabilities-response", r.json)
    assert r.json["route"] == R and r.json["enabled"] is True
    assert r.json["delivery_modes"] == ["inline", "on_demand"]
    assert r.json["limits"]["read_chain_max_bytes"] == 131072
    assert c.call("GET", CAPS).status == 401
    assert c.call("GET", CAPS, token="bha_" + "x" * 40).status == 401
    assert c.call("POST", CAPS, token=tok).status == 405          # choice: 405
    # a token of another workspace learns nothing
    c.workspace("other", [doc("o", "Other", "other text")])
    other = c.identity("bob", "other")["token"]
    r = c.call("GET", CAPS, token=other)
    assert r.status == 404 and r.json == {"error": "route_unavailable"}
    # disabled
    assert c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "disabled"}).status == 200
    r = c.call("GET", CAPS, token=tok)
    assert r.status == 200 and r.json["enabled"] is False
    validate("capabilities-response", r.json)


# ------------------------------------------------------------------ turns
def test_turn_on_demand_replay_conflict_and_lost_response(c, validate):
    tok, _ = setup_primary(c)
    r = c.turn(R, tok, ids="one")
    assert r.status == 200
    validate("turn-response", r.json)
    ctx = r.json["context"]
    assert ctx["knowledge"] == [] and ctx["knowledge_refs"] == []
    kd = ctx["knowledge_delivery"]
    validate("knowledge-delivery", kd)
    assert kd["mode"] == "on_demand" and kd["status"] == "ok" and 1 <= len(kd["hints"]) <= 3
    assert "ties a workspace" not in json.dumps(kd)
    # replay: identical frozen response
    again = c.turn(R, tok, ids="one")
    assert again.status == 200 and again.body == r.body
    # same identity, other payload: 409 turn_conflict
    assert c.turn(R, tok, ids="one", delivery="inline").json == {"error": "turn_conflict"}
    # choice: member order is part of the fingerprint, so a reordered replay is refused
    body = {"user_input": "homepage binding", "client_conversation_id": "c-one",
            "client_turn_id": "t-one", "user_message_id": "m-one", "knowledge_delivery": "on_demand"}
    assert c.call("POST", f"/agent-api/v1/workspaces/{R}/turns", body, token=tok).status == 409
    # inline turn carries the bodies
    r2 = c.turn(R, tok, ids="two", delivery=None)
    assert r2.json["context"]["knowledge"][0]["title"] == "Homepage binding"
    assert "knowledge_delivery" not in r2.json["context"]
    # unknown field
    bad = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m",
           "user_input": "x", "model_delivery": "on_demand"}
    assert c.call("POST", f"/agent-api/v1/workspaces/{R}/turns", bad, token=tok).status == 400
    # lost response: committed, withheld, retry replays it
    assert c.ctl("POST", "/faults", {"kind": "lose_next_turn_response", "route": R}).status == 201
    lost = c.turn(R, tok, ids="three")
    assert lost.status == 502
    withheld = c.ctl("GET", f"/faults/lost?route={R}").json["responses"]
    assert len(withheld) == 1 and withheld[0]["status"] == 200
    retry = c.turn(R, tok, ids="three")
    assert retry.status == 200 and retry.json == withheld[0]["body"]
    assert retry.json["context"]["knowledge_delivery"]["mode"] == "on_demand"


def test_turn_modes(c):
    tok, _ = setup_primary(c)
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "disabled"})
    r = c.turn(R, tok)
    assert r.status == 403 and r.json == {"error": "knowledge_disabled"}   # choice
    r = c.turn(R, tok, delivery=None)
    assert r.status == 200 and r.json["context"]["knowledge"] == []
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "unavailable"})
    kd = c.turn(R, tok).json["context"]["knowledge_delivery"]
    assert kd["status"] == "unavailable" and kd["hints"] == []


# ------------------------------------------------------------------ search
def test_search_bound_hints_and_statuses(c, validate):
    long_title = "Homepage binding \u00e9\u00e8\U0001F600 " * 100
    docs = [doc(f"d{i}", long_title, "homepage binding body " * 50 + "\u20ac" * 500,
                "summary \u00e9\U0001F600 homepage " * 300) for i in range(6)]
    docs.append(doc("short", "Tiny", "homepage"))
    tok, _ = setup_primary(c, docs)
    run = c.turn(R, tok, text="hello", delivery=None).json["run_id"]
    r = c.search(R, tok, "homepage binding", run, limit=3)
    assert r.status == 200 and len(r.body) <= 4096
    validate("search-response", r.json)
    assert r.json["status"] == "ok" and len(r.json["hints"]) == 3
    assert r.json["trust"] == "reference_only"
    for h in r.json["hints"]:
        assert all(len(h[k].encode()) <= 4096 for k in ("title", "summary", "ref"))
    # a short document's hint never carries its whole body
    r = c.search(R, tok, "tiny", run)
    assert r.json["hints"] and "homepage" not in json.dumps(r.json["hints"])
    # choice: limit > 3 is refused
    assert c.search(R, tok, "homepage", run, limit=4).status == 400
    assert c.search(R, tok, "homepage", run, limit=0).status == 400
    assert c.search(R, tok, "homepage", run, runId=run).status == 400
    # unknown / foreign run
    assert c.search(R, tok, "homepage", "3f2a1c9e-8b7d-4e6f-a5c4-1b2d3e4f5a6b").json == {"error": "run_not_found"}
    other = c.identity("alice", R)["token"]          # another session of the same account
    assert c.search(R, other, "homepage", run).status == 404
    # injected unavailability, partial, disabled
    c.ctl("POST", "/faults", {"kind": "fail_next_search_unavailable"})
    assert c.search(R, tok, "homepage", run).json["status"] == "unavailable"
    assert c.search(R, tok, "homepage", run).json["status"] == "ok"
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "partial"})
    assert c.search(R, tok, "homepage", run).json["status"] == "partial"
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "disabled"})
    r = c.search(R, tok, "homepage", run)
    assert r.json["status"] == "disabled" and r.json["hints"] == []
    # malformed input is a 4xx envelope
    bad = c.call("POST", f"/agent-api/v1/workspaces/{R}/knowledge/search", raw=b"{nope", token=tok)
    assert bad.status == 400 and bad.json == {"error": "invalid_request"}


# ------------------------------------------------------------------ read
def read_chain(c, tok, ref, run, **kw):
    pages, cursor = [], None
    while True:
        extra = dict(kw)
        if cursor:
            extra["cursor"] = cursor
        r = c.read(R, tok, ref, run, **extra)
        assert r.status == 200, r.body
        pages.append(r)
        cursor = r.json["next_cursor"]
        if cursor is None:
            return pages


def first_ref(c, tok, run, query="homepage"):
    return c.search(R, tok, query, run).json["hints"][0]["ref"]


def test_read_pages_cursors_and_clamp(c, validate):
    content = ("Line \u00e9\"\\\n\t\x01 \U0001F600 \u0301 " * 3000)
    tok, _ = setup_primary(c, [doc("big", "Homepage", content)])
    run = c.turn(R, tok).json["run_id"]
    ref = first_ref(c, tok, run)
    for mb, bound in ((4096, 4096), (None, 16384), (32768, 32768), (10, 4096), (10 ** 9, 32768)):
        kw = {} if mb is None else {"max_bytes": mb}
        pages = read_chain(c, tok, ref, run, **kw)
        text = "".join(p.json["content"] for p in pages)
        assert text == content
        for p in pages:
            assert len(p.body) <= bound
            assert p.json["ref"] == ref and p.json["revision"] == pages[0].json["revision"]
            validate("read-response", p.json)
        assert all(p.json["truncated"] for p in pages[:-1]) and pages[-1].json["truncated"] is False
        assert pages[0].json["total_content_bytes"] == len(content.encode())
    assert c.read(R, tok, ref, run, max_bytes="4096").status == 400


def test_read_chain_budget(c):
    exact = "a" * 131072
    over = "b" * 131071 + "\u20ac" + "tail"   # the euro sign would pass the budget
    tok, _ = setup_primary(c, [doc("exact", "Exact budget", exact), doc("over", "Over budget", over)])
    run = c.turn(R, tok).json["run_id"]
    pages = read_chain(c, tok, first_ref(c, tok, run, "exact"), run, max_bytes=32768)
    assert "".join(p.json["content"] for p in pages) == exact
    assert not any(p.json.get("budget_exhausted") for p in pages)
    pages = read_chain(c, tok, first_ref(c, tok, run, "over"), run, max_bytes=32768)
    last = pages[-1].json
    assert last["budget_exhausted"] is True and last["truncated"] is True and last["next_cursor"] is None
    assert last["content"] != ""            # on the page where it applies, never a later empty page
    assert "".join(p.json["content"] for p in pages) == "b" * 131071


# ------------------------------------------------------------------ references
def test_reference_expiry(c):
    tok, _ = setup_primary(c)
    run = c.turn(R, tok).json["run_id"]
    ref = first_ref(c, tok, run)
    page = c.read(R, tok, ref, run, max_bytes=4096).json
    cursor = page["next_cursor"]
    assert cursor
    c.ctl("POST", "/clock/advance", {"seconds": 300, "routes": [R]})
    assert c.read(R, tok, ref, run).status == 200                 # choice: valid at exactly 300 s
    assert c.read(R, tok, ref, run, cursor=cursor).status == 200
    c.ctl("POST", "/clock/advance", {"seconds": 0.001})
    r = c.read(R, tok, ref, run)
    assert r.status == 410 and r.json["error"] == "knowledge_reference_expired"
    assert r.json["feedback"]["next_action"] == "search_knowledge"
    assert "content" not in r.json
    assert c.read(R, tok, ref, run, cursor=cursor).status == 410


def test_reference_binding(c, validate):
    tok, ident = setup_primary(c, [doc("home", "Homepage binding", "homepage text " * 2000),
                                   doc("guide", "Homepage guide", "guide text " * 10)])
    run = c.turn(R, tok).json["run_id"]
    ref = first_ref(c, tok, run)
    # same session, second token: allowed
    same = c.identity("alice", R, session_id=ident["session_id"])["token"]
    assert c.read(R, same, ref, run).status == 200
    # other session / account / hub with their own run: refused with a reference error
    for other in (c.identity("alice", R), c.identity("mallory", R),
                  c.identity("alice", R, hub="https://hub.other.example", session_id=ident["session_id"])):
        orun = c.turn(R, other["token"]).json["run_id"]
        r = c.read(R, other["token"], ref, orun)
        assert r.status == 404 and r.json["error"] == "knowledge_reference_not_found"  # choice
        validate("reference-error", r.json)
    # other run of the same session
    run2 = c.turn(R, tok).json["run_id"]
    assert c.read(R, tok, ref, run2).json["error"] == "knowledge_reference_not_found"
    # tampered, oversize (bytes, not characters), exactly 4096 bytes
    tampered = ref[:-1] + ("A" if ref[-1] != "A" else "B")
    assert c.read(R, tok, tampered, run).json["error"] == "knowledge_reference_invalid"
    assert c.read(R, tok, "\u00e9" * 2049, run).json["error"] == "knowledge_reference_invalid"
    a, b = c.read(R, tok, ref + "x" * (4095 - len(ref)), run), c.read(R, tok, ref + "x" * (4096 - len(ref)), run)
    assert (a.status, a.json["error"]) == (b.status, b.json["error"])
    # choice: a cursor names its own chain, whatever valid ref is sent beside it
    page = c.read(R, tok, ref, run, max_bytes=4096).json
    guide = c.search(R, tok, "guide", run).json["hints"][0]["ref"]
    nxt = c.read(R, tok, guide, run, cursor=page["next_cursor"], max_bytes=4096).json
    same_chain = c.read(R, tok, ref, run, cursor=page["next_cursor"], max_bytes=4096).json
    assert nxt["ref"] == ref and nxt["content"] == same_chain["content"]
    # scope change
    c.ctl("PUT", f"/workspaces/{R}/scopes/alice", {"bases": ["kb"]})
    r = c.read(R, tok, ref, run, cursor=page["next_cursor"])
    assert r.status == 409 and r.json["error"] == "knowledge_scope_changed"
    # revision change, on a ref and on a cursor
    ref = first_ref(c, tok, run)
    page = c.read(R, tok, ref, run, max_bytes=4096).json
    assert c.ctl("POST", f"/workspaces/{R}/items/home/revisions", {"content": "new text"}).status == 201
    for kw in ({}, {"cursor": page["next_cursor"]}):
        r = c.read(R, tok, ref, run, **kw)
        assert r.status == 409 and r.json["error"] == "knowledge_revision_changed"
        validate("reference-error", r.json)


# ------------------------------------------------------------------ control
def test_control_extension(c):
    assert c.call("POST", "/_control/v1/reset").status == 401
    tok, _ = setup_primary(c)
    assert c.call("POST", "/_control/v1/reset", token=tok).status == 401   # never an Agent token
    # legacy: the three knowledge endpoints answer 501 (choice), turns stay inline
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "legacy"})
    run = c.turn(R, tok).json
    assert run["context"]["knowledge"] and "knowledge_delivery" not in run["context"]
    assert c.call("GET", CAPS, token=tok).status == 501
    assert c.search(R, tok, "x", run["run_id"]).status == 501
    assert c.read(R, tok, "x", run["run_id"]).status == 501
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "legacy", "legacy_status": 404})
    r = c.call("GET", CAPS, token=tok)
    assert r.status == 404 and r.json == {"error": "not_found"}
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "normal"})
    # respond_next answers before authentication, once
    c.ctl("POST", "/faults", {"kind": "respond_next", "endpoint": "capabilities", "status": 405,
                             "body": {"error": "legacy"}})
    r = c.call("GET", CAPS)
    assert r.status == 405 and r.json == {"error": "legacy"}
    assert c.call("GET", CAPS).status == 401
    assert c.ctl("POST", "/faults", {"kind": "fail_next_read_unavailable", "status": 500}).status == 400
    # read unavailable fault
    rid = c.turn(R, tok).json["run_id"]
    ref = first_ref(c, tok, rid)
    c.ctl("POST", "/faults", {"kind": "fail_next_read_unavailable"})
    assert c.read(R, tok, ref, rid).json == {"error": "knowledge_unavailable"}
    assert c.read(R, tok, ref, rid).status == 200
    # clock
    now = c.ctl("GET", "/clock").json["now"]
    assert c.ctl("PUT", "/clock", {"now": now + 10}).json["now"] == now + 10
    assert c.ctl("POST", "/clock/advance", {"seconds": 5}).json["now"] == now + 15
    # transcript: bodies and the account, never the token
    tr = c.ctl("GET", "/transcript").json["requests"]
    assert any(e.get("body", {}) and e["body"].get("knowledge_delivery") == "on_demand" for e in tr)
    assert tok not in json.dumps(tr) and CONTROL not in json.dumps(tr)
    assert any(e.get("account") == "alice" for e in tr)
    # seed 003 knowledge control routes exist; the extension stays at release 1.0.0 (no GET /)
    assert c.ctl("PUT", f"/workspaces/{R}/knowledge/runtime", {"enabled": False}).json == {"enabled": False}
    assert c.ctl("GET", "/").status == 404 and c.ctl("GET", "").status == 404
    # duplicate workspace, delete
    assert c.ctl("POST", "/workspaces", {"route": R}).status == 409
    assert c.ctl("POST", "/workspaces", {"route": "auto"}).status == 400
    assert c.ctl("DELETE", f"/workspaces/{R}").status == 204
    assert c.call("GET", CAPS, token=tok).status == 401
