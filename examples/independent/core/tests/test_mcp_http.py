"""The Agent Session MCP path over streamable HTTP: transport, route scoping and tools."""
import json

from conftest import Mcp, doc

R = "acme"
DOCS = [doc("home", "Homepage binding", "The homepage binding ties a workspace to its domain. " * 400,
            "How the homepage binds to a workspace"),
        doc("bill", "Billing", "Invoices are sent monthly.")]
TOOLS = {"start_business_turn", "search_business_knowledge", "read_business_knowledge"}


def setup(c, mode=None):
    c.workspace(R, DOCS, mode=mode)
    ident = c.identity("alice", R)
    return Mcp(c, R, ident["token"]), ident


def test_transport_basics(c):
    m, _ = setup(c)
    for version in ("2025-06-18", "2025-03-26"):
        r = m.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": {},
                               "clientInfo": {"name": "t", "version": "1"}}})
        assert r.status == 200 and r.headers["Content-Type"] == "application/json"
        assert r.headers.get("Mcp-Session-Id") is None                          # stateless
        assert r.json["result"]["protocolVersion"] == version
        assert r.json["result"]["capabilities"]["tools"] == {"listChanged": False}
    r = m.post({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}})
    assert r.json["result"]["protocolVersion"] == "2025-06-18"
    r = m.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert r.status == 202 and r.body == b""
    assert m.rpc("ping")["result"] == {}
    assert m.rpc("no/such")["error"]["code"] == -32601
    assert m.rpc("tools/call", {"name": "nope", "arguments": {}})["error"]["code"] == -32602
    r = m.post(None, raw=b"{not json")
    assert r.status == 400 and r.json["error"]["code"] == -32700
    r = m.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers={"MCP-Protocol-Version": "1999-01-01"})
    assert r.status == 400
    r = m.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers={"MCP-Protocol-Version": "2025-03-26"})
    assert r.status == 200
    r = m.post([{"jsonrpc": "2.0", "id": 7, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"}])
    assert r.status == 200 and r.json == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
    for method in ("GET", "DELETE", "PUT"):
        r = c.call(method, m.path, token=m.token)
        assert r.status == 405 and r.headers["Allow"] == "POST" and r.json == {"error": "method_not_allowed"}
    assert r.headers["Cache-Control"] == "no-store"


def test_auth_route_scope_and_origin(c):
    m, _ = setup(c)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = c.call("POST", m.path, ping)
    assert r.status == 401 and r.json == {"error": "unauthorized"} and r.headers["WWW-Authenticate"] == "Bearer"
    assert m.post(ping, token="bha_" + "x" * 40).status == 401
    # a token of another workspace is refused on this route (and vice versa)
    c.workspace("other", [doc("o", "Other", "other text")])
    other = c.identity("bob", "other")["token"]
    r = m.post(ping, token=other)
    assert r.status == 403 and r.json == {"error": "route_not_allowed"}
    r = Mcp(c, "other", m.token).post(ping)
    assert r.status == 403 and r.json == {"error": "route_not_allowed"}
    assert Mcp(c, "nowhere", m.token).post(ping).status == 403
    assert Mcp(c, "auto", m.token).post(ping).status == 400
    # Origin: none or loopback is fine, a foreign one is refused (DNS rebinding)
    assert m.post(ping, headers={"Origin": "http://127.0.0.1:3000"}).status == 200
    assert m.post(ping, headers={"Origin": "http://localhost"}).status == 200
    for origin in ("http://evil.example", "null", "http://127.0.0.1.evil.example", "file://"):
        r = m.post(ping, headers={"Origin": origin})
        assert r.status == 403 and r.json == {"error": "origin_not_allowed"}, origin
    assert m.post(ping, headers={"Accept": "text/event-stream"}).status == 406


def test_tools_list(c):
    m, _ = setup(c)
    tools = {t["name"]: t for t in m.rpc("tools/list")["result"]["tools"]}
    assert set(tools) == TOOLS                          # search_knowledge is hidden but callable
    for t in tools.values():
        props = set(t["inputSchema"]["properties"])
        assert not props & {"run_id", "route", "token", "workspace", "connection", "connectionKey",
                            "knowledge_delivery", "account", "session_id"}
        assert t["outputSchema"]["properties"]["dispatch"] == {"const": "not_dispatched"}
    hidden = m.rpc("tools/list", {"_meta": {"blindcore/include_hidden": True}})["result"]["tools"]
    sk = next(t for t in hidden if t["name"] == "search_knowledge")
    assert sk["_meta"]["catalog"] == {"surface": "advanced", "min_tier": "free", "hidden_but_callable": True}


def test_turn_search_read_bind_the_current_run(c, validate):
    m, ident = setup(c)
    res = m.tool("search_business_knowledge", query="homepage")
    assert res["isError"] is True
    validate("mcp-error-result", res["structuredContent"])
    fbk = res["structuredContent"]["feedback"]
    assert fbk["code"] == "knowledge_run_required" and fbk["next_action"] == "start_business_turn"
    turn = m.tool("start_business_turn", user_input="homepage binding")
    assert turn["isError"] is False
    validate("mcp-turn-result", turn["structuredContent"])
    run_id = turn["structuredContent"]["run_id"]
    validate("knowledge-delivery", turn["structuredContent"]["knowledge_delivery"])
    sent = [e for e in c.ctl("GET", "/transcript").json["requests"] if e["path"].endswith("/turns")]
    assert sent[-1]["body"]["knowledge_delivery"] == "on_demand"
    found = m.tool("search_business_knowledge", query="homepage binding", limit=2)
    sc = found["structuredContent"]
    validate("mcp-search-result", sc)
    assert sc["status"] == "ok" and sc["dispatch"] == "not_dispatched" and sc["business_operation_performed"] is False
    ref = sc["hints"][0]["ref"]
    # MCP pages are the HTTP pages of the same document at the same max_bytes
    mcp_pages, cursor = [], None
    while True:
        args = {"ref": ref, "max_bytes": 4096}
        if cursor:
            args["cursor"] = cursor
        page = m.tool("read_business_knowledge", **args)["structuredContent"]
        validate("mcp-read-result", page)
        mcp_pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    http_ref = c.search(R, ident["token"], "homepage binding", run_id).json["hints"][0]["ref"]
    http_pages, cursor = [], None
    while True:
        kw = {"max_bytes": 4096}
        if cursor:
            kw["cursor"] = cursor
        page = c.read(R, ident["token"], http_ref, run_id, **kw).json
        http_pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [p["content"] for p in mcp_pages] == [p["content"] for p in http_pages]
    assert len(mcp_pages) > 1 and mcp_pages[-1]["truncated"] is False
    # model arguments cannot choose a run, a route or an identity: they are ignored
    sneaky = m.tool("search_business_knowledge", query="homepage", run_id="00000000-0000-4000-8000-000000000000",
                    route="other", token="bha_x", workspace="other")
    assert sneaky["isError"] is False
    assert m.tool("read_business_knowledge", ref=ref, run_id="00000000-0000-4000-8000-000000000000")["isError"] is False
    # a second token of the same Agent Session shares the run; another session has none
    same = Mcp(c, R, c.identity("alice", R, session_id=ident["session_id"])["token"])
    assert same.tool("read_business_knowledge", ref=ref)["isError"] is False
    other = Mcp(c, R, c.identity("alice", R)["token"])
    assert other.tool("read_business_knowledge", ref=ref)["structuredContent"]["feedback"]["code"] == \
        "knowledge_run_required"
    # a new turn becomes the current run: the old run's reference no longer binds
    m.tool("start_business_turn", user_input="billing")
    res = m.tool("read_business_knowledge", ref=ref)
    assert res["isError"] is True
    validate("mcp-error-result", res["structuredContent"])
    assert res["structuredContent"]["feedback"]["next_action"] == "search_knowledge"
    validate("reference-error", res["structuredContent"]["error"])


def test_reference_errors_and_bad_arguments(c, validate):
    m, _ = setup(c)
    m.tool("start_business_turn", user_input="homepage")
    ref = m.tool("search_business_knowledge", query="homepage")["structuredContent"]["hints"][0]["ref"]
    c.ctl("POST", "/clock/advance", {"seconds": 301})
    res = m.tool("read_business_knowledge", ref=ref)
    sc = res["structuredContent"]
    assert res["isError"] and sc["feedback"]["code"] == "knowledge_reference_expired"
    assert sc["feedback"]["next_action"] == "search_knowledge" and sc["feedback"]["retryable"] is True
    assert "content" not in sc
    validate("mcp-error-result", sc)
    validate("feedback", sc["feedback"])
    for name, args in (("search_business_knowledge", {"query": 5}), ("read_business_knowledge", {}),
                       ("start_business_turn", {"user_input": ""}), ("search_business_knowledge", {"query": "x", "limit": "3"})):
        res = m.tool(name, **args)
        assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "invalid_arguments", name
        validate("mcp-error-result", res["structuredContent"])
    # bounds are the Core's: limit 4 is refused there (Core choice 2)
    res = m.tool("search_business_knowledge", query="homepage", limit=4)
    assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "invalid_request"
    assert res["structuredContent"]["feedback"]["origin"] == "core"
    r = m.rpc("tools/call", {"name": "start_business_turn", "arguments": [1]})
    assert r["result"]["isError"] is True


def test_legacy_core_keeps_tools_listed(c, validate):
    m, _ = setup(c, mode="legacy")
    assert {t["name"] for t in m.rpc("tools/list")["result"]["tools"]} == TOOLS
    turn = m.tool("start_business_turn", user_input="homepage binding")
    sc = turn["structuredContent"]
    assert turn["isError"] is False and sc["knowledge_protocol"] == "unsupported"
    validate("mcp-turn-result", sc)
    assert sc["knowledge"] and sc["knowledge"][0]["title"] == "Homepage binding"   # inline body retained
    sent = [e for e in c.ctl("GET", "/transcript").json["requests"] if e["path"].endswith("/turns")]
    assert "knowledge_delivery" not in sent[-1]["body"]
    for name, args in (("search_business_knowledge", {"query": "homepage"}),
                       ("read_business_knowledge", {"ref": "kr_x"})):
        res = m.tool(name, **args)
        assert res["isError"] is True
        validate("mcp-error-result", res["structuredContent"])
        assert res["structuredContent"]["feedback"]["code"] == "knowledge_protocol_unsupported"
    # an old Core's capabilities status alone decides (here a 405 before a normal Core)
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "normal"})
    c.ctl("POST", "/faults", {"kind": "respond_next", "endpoint": "capabilities", "status": 405})
    assert m.tool("start_business_turn", user_input="homepage")["structuredContent"]["knowledge_protocol"] == "unsupported"
    res = m.tool("search_business_knowledge", query="homepage")
    assert res["structuredContent"]["feedback"]["code"] == "knowledge_protocol_unsupported"
    # a turn started on a supporting Core, then the Core answers like an old one
    m.tool("start_business_turn", user_input="homepage")
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "legacy", "legacy_status": 404})
    res = m.tool("search_business_knowledge", query="homepage")
    assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "knowledge_protocol_unsupported"


def test_capabilities_failures_are_not_legacy(c):
    m, _ = setup(c)
    for status, body in ((503, {"error": "knowledge_unavailable"}), (404, {"error": "route_unavailable"}),
                         (200, {"schema_version": "bailing.agent-knowledge-capabilities.v9"})):
        c.ctl("POST", "/faults", {"kind": "respond_next", "endpoint": "capabilities", "status": status,
                                 "body": body})
        res = m.tool("start_business_turn", user_input="homepage")
        assert res["isError"] is True, status
        assert res["structuredContent"]["feedback"]["code"] != "knowledge_protocol_unsupported"


def test_disabled_and_lost_turn_response(c, validate):
    m, _ = setup(c, mode="disabled")
    turn = m.tool("start_business_turn", user_input="homepage")       # a plain turn (choice)
    assert turn["isError"] is False and "knowledge_delivery" not in turn["structuredContent"]
    res = m.tool("search_business_knowledge", query="homepage")
    assert res["isError"] is False and res["structuredContent"]["status"] == "disabled"
    validate("mcp-search-result", res["structuredContent"])
    # a lost turn response is retried with the same ids and the same delivery choice
    c.ctl("PUT", f"/workspaces/{R}/mode", {"mode": "normal"})
    c.ctl("POST", "/faults", {"kind": "lose_next_turn_response", "route": R})
    turn = m.tool("start_business_turn", user_input="homepage")
    assert turn["isError"] is False
    lost = c.ctl("GET", f"/faults/lost?route={R}").json["responses"]
    assert lost[0]["body"]["run_id"] == turn["structuredContent"]["run_id"]
    sent = [e["body"] for e in c.ctl("GET", "/transcript").json["requests"] if e["path"].endswith("/turns")]
    assert sent[-1] == sent[-2] and sent[-1]["knowledge_delivery"] == "on_demand"


def test_search_knowledge_over_http_mcp_needs_no_turn(c, validate):
    m, _ = setup(c)
    res = m.tool("search_knowledge", query="homepage binding")
    assert res["isError"] is False
    validate("search-knowledge-search-result", res["structuredContent"])
    assert res["structuredContent"]["results"][0]["knowledge_item_id"] == "home"
    text = json.loads(res["content"][0]["text"])
    assert text["type"] == "knowledge_search"
