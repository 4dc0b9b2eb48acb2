"""The thin wire client of the Core surface under test (the control extension's is conformance.common.control)."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

from conformance.common.config import TargetConfig
from conformance.common.transport import auth_headers

_turns = itertools.count(1)  # unique within a process; the namespace makes a turn identity unique across runs


class CoreWire:
    """Raw requests to the Core, paths and auth header from the target configuration.

    ``namespace`` prefixes every turn identity it makes: the run ID (and xdist worker), so a
    second run, or a concurrent one, against the same Core never replays this run's turns."""

    def __init__(self, http: httpx.Client, cfg: TargetConfig, namespace: str) -> None:
        self.http = http
        self.cfg = cfg
        self.namespace = namespace

    def headers(self, token: str | None) -> dict[str, str]:
        return auth_headers(self.cfg.wire["auth"], token)

    def capabilities(self, token: str | None, route: str) -> httpx.Response:
        return self.http.get(self.cfg.path("capabilities", route), headers=self.headers(token))

    def turn(self, token: str | None, route: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(self.cfg.path("turns", route), headers=self.headers(token), json=body)

    def search(self, token: str | None, route: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(self.cfg.path("search", route), headers=self.headers(token), json=body)

    def read(self, token: str | None, route: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(self.cfg.path("read", route), headers=self.headers(token), json=body)

    def raw(
        self,
        method: str,
        path: str,
        token: str | None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        return self.http.request(method, path, headers={**self.headers(token), **(headers or {})}, content=content)

    def turn_body(
        self, user_input: str, delivery: str | None = "on_demand", *, key: str | None = None
    ) -> dict[str, Any]:
        n = f"{self.namespace}-{key or next(_turns)}"
        body = {
            "client_conversation_id": f"conv-{n}",
            "client_turn_id": f"turn-{n}",
            "user_message_id": f"msg-{n}",
            "user_input": user_input,
        }
        if delivery is not None:
            body["knowledge_delivery"] = delivery
        return body
