"""The world of a client run: workspaces in each state a scenario needs, and the
connections the harness gets at ``start`` (one per scenario role), built through control.

Every route is named under the run ID, so runs never meet on a shared Core.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx

from conformance.clients.core import API
from conformance.common.control import Control
from conformance.common.outcomes import HarnessError

CLIENT_APP = "knowledge-conformance"
BAD_TOKEN = "bha_" + "0" * 44  # well-formed, never minted: the Core answers 401
HOMEPAGE = ("Homepage binding", "How a homepage binding is set up and checked before a release. " * 12)
ARCHIVE = (
    "Archive ledger",
    "".join(f"Archive ledger entry {i}: quarterly figures were reconciled and filed. " for i in range(700)),
)
GLACIER = (
    "Glacier survey",
    "".join(f"Glacier survey station {i} measured ice depth, melt rate and snow cover. " for i in range(2900)),
)
BILLING = ("Billing homepage binding", "Billing notes for the homepage binding of the second account. " * 10)
OTHER_HUB = "https://hub-b.example"  # a second Hub's Agent Session on the same Core and route
QUERIES = {
    "homepage": "homepage binding",
    "archive": "archive ledger reconciled",
    "glacier": "glacier survey ice depth",
}

# name -> (mode, legacy status)
WORKSPACES: dict[str, tuple[str, int | None]] = {
    "main": ("normal", None),
    "legacy404": ("legacy", 404),
    "legacy405": ("legacy", 405),
    "legacy501": ("legacy", 501),
    "canned": ("normal", None),
    "unavailable": ("unavailable", None),
    "flaky": ("normal", None),
    "partial": ("partial", None),
    "expiry": ("normal", None),
    "host": ("normal", None),
    "elsewhere": ("normal", None),
}


@dataclass
class World:
    run: str
    core_url: str
    routes: dict[str, str]
    connections: dict[str, dict[str, Any]]
    accounts: dict[str, str]
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _direct: dict[str, DirectClient] = field(default_factory=dict)

    def turn_ids(self, label: str) -> dict[str, str]:
        n = next(self._ids)
        return {
            "client_conversation_id": f"hc-{self.run}-{label}",
            "client_turn_id": f"t{n}",
            "user_message_id": f"m{n}",
        }

    def route(self, connection: str) -> str:
        return str(self.connections[connection]["route"])

    def direct(self, connection: str) -> DirectClient:
        if connection not in self._direct:
            conn = self.connections[connection]
            self._direct[connection] = DirectClient(self.core_url, conn["route"], conn["token"], self)
        return self._direct[connection]

    def close(self) -> None:
        for client in self._direct.values():
            client.close()


class DirectClient:
    """The runner's own requests (never the client's): a run and references to hand the client,
    or the wire's answer to compare the client's with. They are on the transcript too, so a
    check takes its mark after them."""

    def __init__(self, core_url: str, route: str, token: str, world: World) -> None:
        self.http = httpx.Client(base_url=core_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self.base = API.format(route=route)
        self.world = world

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(self.base + path, json=body)
        if response.status_code != 200:
            raise HarnessError(f"the runner's own POST {path} answered {response.status_code}: {response.text[:200]}")
        return dict(response.json())

    def turn(
        self, ids: dict[str, str] | None = None, delivery: str | None = None, text: str = "homepage binding"
    ) -> dict[str, Any]:
        body: dict[str, Any] = {**(ids or self.world.turn_ids("direct")), "user_input": text}
        if delivery is not None:
            body["knowledge_delivery"] = delivery
        return self._post("/turns", body)

    def ref(self, run_id: str, doc: str) -> str:
        """A reference to ``doc`` (homepage, archive, glacier) found for ``run_id``."""
        hints = self._post("/knowledge/search", {"query": QUERIES[doc], "run_id": run_id, "limit": 3})["hints"]
        title = {"homepage": HOMEPAGE, "archive": ARCHIVE, "glacier": GLACIER}[doc][0]
        for hint in hints:
            if hint["title"] == title:
                return str(hint["ref"])
        if not hints:
            raise HarnessError(f"the Core found nothing for {QUERIES[doc]!r}: cannot hand the client a reference")
        return str(hints[0]["ref"])

    def disarm(self, endpoint: str, times: int = 1) -> None:
        """Take a canned answer the client left armed (it never sent the request a check armed it for):
        the client's failure must not become the next check's answer."""
        for _ in range(times):
            if endpoint == "capabilities":
                self.http.get(self.base + "/knowledge/capabilities")
            else:
                self.http.post(self.base + ("/turns" if endpoint == "turns" else f"/knowledge/{endpoint}"), json={})

    def close(self) -> None:
        self.http.close()


def _corpus(control: Control, route: str) -> None:
    items = [
        {"id": k, "title": t, "content": c, "summary": t}
        for k, (t, c) in (("homepage", HOMEPAGE), ("archive", ARCHIVE), ("glacier", GLACIER))
    ]
    control.replace_corpus(
        route,
        [
            {"id": "kb-a", "items": items},
            {"id": "kb-b", "items": [{"id": "billing", "title": BILLING[0], "content": BILLING[1]}]},
        ],
    )


def build(control: Control, core_url: str, run: str) -> World:
    routes = {name: f"hc{run}-{name}" for name in WORKSPACES}
    for name, (mode, status) in WORKSPACES.items():
        control.create_workspace(routes[name])
        _corpus(control, routes[name])
        if mode != "normal":
            control.set_mode(routes[name], mode, status)
    connections: dict[str, dict[str, Any]] = {}
    accounts: dict[str, str] = {}

    def connect(
        key: str,
        account: str,
        on: str,
        *,
        route: str | None = None,
        token: str | None = None,
        hub: str | None = None,
    ) -> dict[str, Any]:
        ident = control.mint(account, routes[on], hub=hub)
        conn = {
            "key": key,
            "route": route or routes[on],
            "token": token or ident["token"],
            "binding": {
                "hubUrl": ident["hub"],
                "clientAppId": CLIENT_APP,
                "workspace": route or routes[on],
                "sessionId": ident["session_id"],
            },
        }
        connections[key], accounts[key] = conn, account
        return conn

    for name in WORKSPACES:
        if name != "elsewhere":
            connect(name, "alice", name)
    connect("other", "bob", "main")
    control.set_scope(
        routes["main"], "bob", ["kb-b"]
    )  # another account, another scope: it must never see alice's references
    connect("host2", "bob", "host")
    connect("badtoken", "alice", "main", token=BAD_TOKEN)
    connect("wrongroute", "alice", "main", route=routes["elsewhere"])  # a token of another workspace: 403
    connect("noroute", "alice", "main", route=f"hc{run}-absent")  # no workspace there: 404 route_unavailable
    connect("autoroute", "alice", "main", route="auto")  # an invalid route: 400 invalid_route
    # Connections no check asks capabilities on before its own turn: what a client knows of one
    # connection (or of another Hub on the same route) is no negotiation for another.
    connect("fresh", "alice", "main")
    connect("freshlegacy", "alice", "legacy404")
    connect("otherhub", "alice", "main", hub=OTHER_HUB)
    return World(run, core_url.rstrip("/"), routes, connections, accounts)
