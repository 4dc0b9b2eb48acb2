import json
import os
import pathlib
import sys
import urllib.error
import urllib.request
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from blindcore.core import Core  # noqa: E402
from blindcore.server import serve_in_thread  # noqa: E402

CONTROL = "test-control-token-0123456789"
_SCHEMA_CANDIDATES = [pathlib.Path(p) for p in [os.environ.get("BLINDCORE_SCHEMAS", "")] if p] + [
    ROOT / "spec" / "schemas",            # a spec/ folder inside the project
    ROOT.parent / "spec" / "schemas",     # spec/ beside the project (where it was written)
    ROOT.parents[1] / "schemas",          # the project's schemas/ when nested in its repository
    ROOT.parents[2] / "schemas",
]
SCHEMAS = next((p for p in _SCHEMA_CANDIDATES if p.is_dir()), None)


class Client:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None, token=None, raw=None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", "Bearer " + token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req) as r:
                status, payload, hdrs = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, payload, hdrs = e.code, e.read(), e.headers
        return Resp(status, payload, hdrs)

    # control helpers
    def ctl(self, method, path, body=None):
        return self.call(method, "/_control/v1" + path, body, token=CONTROL)

    def workspace(self, route, docs, mode=None, bases=None):
        body = {"route": route}
        if mode:
            body["mode"] = mode
        assert self.ctl("POST", "/workspaces", body).status == 201
        corpus = {"bases": bases or [{"id": "kb", "items": docs}]}
        r = self.ctl("PUT", f"/workspaces/{route}/corpus", corpus)
        assert r.status == 200, r.body
        return r.json

    def identity(self, account, route, **kw):
        r = self.ctl("POST", "/identities", dict(account=account, route=route, **kw))
        assert r.status == 201, r.body
        return r.json

    # agent helpers
    def turn(self, route, token, text="homepage binding", delivery="on_demand", ids=None):
        ids = ids or uuid.uuid4().hex[:8]
        body = {"client_conversation_id": "c-" + ids, "client_turn_id": "t-" + ids,
                "user_message_id": "m-" + ids, "user_input": text}
        if delivery:
            body["knowledge_delivery"] = delivery
        return self.call("POST", f"/agent-api/v1/workspaces/{route}/turns", body, token=token)

    def search(self, route, token, query, run_id, **kw):
        return self.call("POST", f"/agent-api/v1/workspaces/{route}/knowledge/search",
                         dict(query=query, run_id=run_id, **kw), token=token)

    def read(self, route, token, ref, run_id, **kw):
        return self.call("POST", f"/agent-api/v1/workspaces/{route}/knowledge/read",
                         dict(ref=ref, run_id=run_id, **kw), token=token)


class Resp:
    def __init__(self, status, body, headers):
        self.status, self.body, self.headers = status, body, headers

    @property
    def json(self):
        return json.loads(self.body) if self.body else None


@pytest.fixture(scope="session")
def server():
    core = Core(control_token=CONTROL)
    srv, _ = serve_in_thread(core)
    yield Client("http://127.0.0.1:%d" % srv.server_address[1])
    srv.shutdown()


@pytest.fixture()
def c(server):
    assert server.ctl("POST", "/reset").status == 204
    return server


@pytest.fixture(scope="session")
def validate():
    if SCHEMAS is None:
        pytest.skip("no schemas/ folder found (set BLINDCORE_SCHEMAS)")
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    resources = []
    for p in SCHEMAS.glob("*.schema.json"):
        doc = json.loads(p.read_text())
        resources.append((doc["$id"], referencing.Resource.from_contents(doc)))
    registry = referencing.Registry().with_resources(resources)

    def check(name, instance):
        doc = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        jsonschema.Draft202012Validator(doc, registry=registry).validate(instance)

    return check


def doc(i, title, content, summary=None):
    d = {"id": i, "title": title, "content": content}
    if summary is not None:
        d["summary"] = summary
    return d


# ------------------------------------------------------------------ MCP helpers
class Mcp:
    """A JSON-RPC client of the Agent Session MCP endpoint (streamable HTTP, JSON answers)."""

    def __init__(self, client, route, token, version="2025-06-18"):
        self.client, self.route, self.token, self.version = client, route, token, version
        self.path = f"/agent-api/v1/workspaces/{route}/mcp"
        self.next_id = 0

    def post(self, payload, headers=None, token=None, raw=None):
        hdrs = {"Accept": "application/json, text/event-stream"}
        hdrs.update(headers or {})
        return self.client.call("POST", self.path, payload, token=token or self.token, headers=hdrs, raw=raw)

    def rpc(self, method, params=None, headers=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        r = self.post(msg, headers=headers)
        assert r.status == 200, (r.status, r.body)
        assert r.json["id"] == self.next_id
        return r.json

    def tool(self, name, **arguments):
        answer = self.rpc("tools/call", {"name": name, "arguments": arguments})
        result = answer["result"]
        # one JSON text block that says what structuredContent says
        assert [b["type"] for b in result["content"]] == ["text"]
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        return result


def sk_args_ok(validate, args):
    """Arguments a schema-abiding client would send validate against the input schema."""
    validate("search-knowledge-input", args)
