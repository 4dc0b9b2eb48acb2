import json
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
SCHEMAS = next(p for p in (ROOT / "spec" / "schemas", ROOT.parents[2] / "schemas") if p.is_dir())  # spec/ where it was written, the project's schemas/ here


class Client:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None, token=None, raw=None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
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
