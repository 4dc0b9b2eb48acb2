"""The two stdio runners: `python -m blindcore mcp` and `python -m blindcore jobs`."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, doc

R = "acme"


class Stdio:
    def __init__(self, argv, env=None):
        full_env = dict(os.environ, PYTHONPATH=str(ROOT))
        full_env.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "blindcore"] + argv, cwd=str(ROOT),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=full_env)
        self.next_id = 0

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def line(self):
        out = self.proc.stdout.readline()
        assert out, self.proc.stderr.read().decode()
        return json.loads(out)

    def rpc(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        answer = self.line()
        assert answer["id"] == self.next_id
        return answer

    def tool(self, name, **arguments):
        result = self.rpc("tools/call", {"name": name, "arguments": arguments})["result"]
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        return result

    def initialize(self):
        r = self.rpc("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                    "clientInfo": {"name": "pytest", "version": "1"}})
        assert r["result"]["protocolVersion"] == "2025-03-26"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=10) == 0
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture()
def runner():
    started = []

    def start(argv, env=None):
        s = Stdio(argv, env)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def test_agent_session_stdio(c, runner, validate):
    c.workspace(R, [doc("home", "Homepage binding", "The homepage binding ties a workspace to its domain.")])
    token = c.identity("alice", R)["token"]
    s = runner(["mcp", "--core-url", c.base, "--route", R], {"KC_AGENT_TOKEN": token})
    s.initialize()
    assert s.rpc("ping")["result"] == {}
    names = {t["name"] for t in s.rpc("tools/list")["result"]["tools"]}
    assert names == {"start_business_turn", "search_business_knowledge", "read_business_knowledge"}
    assert s.tool("search_business_knowledge", query="homepage")["structuredContent"]["feedback"]["code"] == \
        "knowledge_run_required"
    turn = s.tool("start_business_turn", user_input="homepage binding")
    validate("mcp-turn-result", turn["structuredContent"])
    found = s.tool("search_business_knowledge", query="homepage")["structuredContent"]
    validate("mcp-search-result", found)
    page = s.tool("read_business_knowledge", ref=found["hints"][0]["ref"])["structuredContent"]
    validate("mcp-read-result", page)
    assert page["content"].startswith("The homepage binding")
    sk = s.tool("search_knowledge", knowledge_item_id="home", limit_chars=3)["structuredContent"]
    validate("search-knowledge-read-result", sk)
    assert sk["content"] == "The"
    s.proc.stdin.write(b"{not json\n")
    s.proc.stdin.flush()
    assert s.line()["error"]["code"] == -32700
    s.send("a JSON string")
    assert s.line()["error"]["code"] == -32600
    s.close()


def test_agent_session_stdio_is_route_scoped(c, runner):
    c.workspace(R, [doc("home", "Homepage", "text")])
    c.workspace("other", [doc("o", "Other", "text")])
    token = c.identity("bob", "other")["token"]
    s = runner(["mcp", "--core-url", c.base, "--route", R], {"KC_AGENT_TOKEN": token})
    s.initialize()
    res = s.tool("start_business_turn", user_input="homepage")
    assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "route_not_allowed"
    res = s.tool("search_knowledge", query="homepage")
    assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "route_not_allowed"
    s.close()
    # without --route (or with an unexpanded {route}): KC_ROUTE, else the token's own workspace
    for argv, env in ((["mcp", "--core-url", c.base], {}), (["mcp", "--core-url", c.base, "--route", "{route}"], {}),
                      (["mcp", "--core-url", c.base], {"KC_ROUTE": R})):
        s = runner(argv, dict(env, KC_AGENT_TOKEN=token))
        res = s.tool("start_business_turn", user_input="other")
        if env:
            assert res["structuredContent"]["feedback"]["code"] == "route_not_allowed"
        else:
            assert res["isError"] is False
        s.close()
    s = runner(["mcp", "--core-url", c.base, "--route", R], {"KC_AGENT_TOKEN": ""})
    res = s.tool("start_business_turn", user_input="homepage")
    assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "unauthorized"
    s.close()


def test_jobs_stdio(runner, validate):
    s = runner(["jobs", "--job-seconds", "0.3"])
    s.initialize()
    tools = s.rpc("tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["submit_governed_job", "get_governed_job", "wait_for_governed_job"]
    wait_schema = tools[2]["inputSchema"]["properties"]["max_wait_seconds"]
    assert (wait_schema["minimum"], wait_schema["maximum"], wait_schema["default"]) == (1, 60, 20)
    job = s.tool("submit_governed_job", request_id="req-1", input="one two three")["structuredContent"]
    validate("mcp-job-result", job)
    assert job["status"] == "pending"
    assert s.tool("get_governed_job", job_id=job["job_id"])["structuredContent"]["status"] == "pending"
    again = s.tool("submit_governed_job", request_id="req-1", input="one two three")["structuredContent"]
    assert again["job_id"] == job["job_id"]
    conflict = s.tool("submit_governed_job", request_id="req-1", input="other")
    assert conflict["isError"] and conflict["structuredContent"]["feedback"]["code"] == "job_conflict"
    done = s.tool("wait_for_governed_job", job_id=job["job_id"], max_wait_seconds=5)["structuredContent"]
    validate("mcp-job-result", done)
    assert done["status"] == "done" and done["timed_out"] is False and "3 words" in done["output"]
    for args in ({"max_wait_seconds": 0}, {"max_wait_seconds": 61}, {"max_wait_seconds": "5"}):
        res = s.tool("wait_for_governed_job", job_id=job["job_id"], **args)
        assert res["isError"] and res["structuredContent"]["feedback"]["code"] == "invalid_arguments", args
    for args in ({"request_id": "-bad", "input": "x"}, {"request_id": "ok", "input": "x" * 64001},
                 {"request_id": "ok"}):
        assert s.tool("submit_governed_job", **args)["isError"], args
    assert s.tool("get_governed_job", job_id="x" * 129)["isError"]
    missing = s.tool("get_governed_job", job_id="job-nope")
    assert missing["structuredContent"]["feedback"]["code"] == "job_not_found"
    validate("feedback", missing["structuredContent"]["feedback"])
    assert s.rpc("tools/call", {"name": "search_business_knowledge", "arguments": {"query": "x"}})["error"]
    s.close()


def test_jobs_wait_times_out(runner, validate):
    s = runner(["jobs", "--job-seconds", "30"])
    s.initialize()
    job = s.tool("submit_governed_job", request_id="slow", input="")["structuredContent"]
    waited = s.tool("wait_for_governed_job", job_id=job["job_id"], max_wait_seconds=1)["structuredContent"]
    validate("mcp-job-result", waited)
    assert waited["status"] == "pending" and waited["timed_out"] is True
    s.close()
