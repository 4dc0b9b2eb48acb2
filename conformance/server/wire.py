"""Thin wire clients: the Core surface under test, and the optional control extension."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import httpx

from conformance.target.config import TargetConfig
from conformance.target.outcomes import HarnessError
from conformance.target.secrets import SECRETS, clip


class CoreWire:
    """Raw requests to the Core, paths and auth header from the target configuration."""

    namespace: ClassVar[str] = "local"
    """Prefix of every turn identity this process sends: the run ID (and xdist worker), so a
    second run, or a concurrent one, against the same Core never replays this run's turns."""
    _turns: ClassVar[itertools.count[int]] = itertools.count(1)

    def __init__(self, http: httpx.Client, cfg: TargetConfig) -> None:
        self.http = http
        self.cfg = cfg

    def headers(self, token: str | None) -> dict[str, str]:
        if token is None:
            return {}
        auth = self.cfg.wire["auth"]
        return {auth["header"]: f"{auth['scheme']} {token}".strip()}

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

    @staticmethod
    def turn_body(user_input: str, delivery: str | None = "on_demand", *, key: str | None = None) -> dict[str, Any]:
        n = f"{CoreWire.namespace}-{key or next(CoreWire._turns)}"
        body = {
            "client_conversation_id": f"conv-{n}",
            "client_turn_id": f"turn-{n}",
            "user_message_id": f"msg-{n}",
            "user_input": user_input,
        }
        if delivery is not None:
            body["knowledge_delivery"] = delivery
        return body


class ControlError(HarnessError):
    """The control extension refused a setup step: the run cannot verify what needs it."""


class ControlWire:
    """The test-control extension (schemas/control-openapi.yaml)."""

    def __init__(self, http: httpx.Client, base_url: str, token: str) -> None:
        self.http = http
        self.base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self.created: list[str] = []  # workspaces this run made, removed again by cleanup()
        self.published: list[str] = []  # every revision text this run wrote, for leak checks
        SECRETS.add(token)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(
            method, self.base + path, json=body, headers=self._headers, extensions={"kc_control": True}
        )
        if response.status_code >= 300:
            raise ControlError(f"control {method} {path} answered {response.status_code}: {clip(response.text, 300)}")
        return response.json() if response.content else None

    def create_workspace(self, route: str, mode: str = "normal") -> None:
        self._call("POST", "/workspaces", {"route": route, "mode": mode})
        self.created.append(route)

    def cleanup(self) -> list[str]:
        """Delete the workspaces this run created, where the control extension allows it.

        Returns what could not be deleted; a Core whose control extension has no
        delete (404/405/501) keeps them, named by run ID, and nothing fails."""
        kept = []
        for route in reversed(self.created):
            response = self.http.request(
                "DELETE", f"{self.base}/workspaces/{route}", headers=self._headers, extensions={"kc_control": True}
            )
            if response.status_code >= 300 and response.status_code != 404:
                kept.append(route)
        self.created.clear()
        return kept

    def replace_corpus(self, route: str, bases: list[dict[str, Any]]) -> dict[str, str]:
        return dict(self._call("PUT", f"/workspaces/{route}/corpus", {"bases": bases})["items"])

    def publish(self, route: str, item_id: str, content: str) -> str:
        self.published.append(content)
        return str(
            self._call("POST", f"/workspaces/{route}/items/{item_id}/revisions", {"content": content})["revision_id"]
        )

    def set_scope(self, route: str, account: str, bases: list[str]) -> None:
        self._call("PUT", f"/workspaces/{route}/scopes/{account}", {"bases": bases})

    def set_mode(self, route: str, mode: str, legacy_status: int | None = None) -> None:
        body: dict[str, Any] = {"mode": mode}
        if legacy_status is not None:
            body["legacy_status"] = legacy_status
        self._call("PUT", f"/workspaces/{route}/mode", body)

    def now(self) -> float:
        return float(self._call("GET", "/clock")["now"])

    def advance(self, seconds: float) -> float:
        """Move time for this run's workspaces only: another run sharing the Core keeps its own time."""
        return float(
            self._call("POST", "/clock/advance", {"seconds": seconds, "routes": sorted(set(self.created))})["now"]
        )

    def mint(
        self, account: str, route: str, *, hub: str | None = None, session_id: str | None = None
    ) -> dict[str, str]:
        body = {"account": account, "route": route}
        if hub:
            body["hub"] = hub
        if session_id:
            body["session_id"] = session_id
        minted = dict(self._call("POST", "/identities", body))
        SECRETS.add(minted.get("token"))
        return minted

    def fault(self, kind: str, route: str | None = None) -> None:
        self._call("POST", "/faults", {"kind": kind, **({"route": route} if route else {})})

    def lost_responses(self, route: str) -> list[dict[str, Any]] | None:
        """What the lose faults fired on ``route`` withheld (status and body), oldest first; None when
        this control extension does not offer it (404, 405 or 501): then nothing can be compared with it."""
        response = self.http.request(
            "GET",
            f"{self.base}/faults/lost",
            params={"route": route},
            headers=self._headers,
            extensions={"kc_control": True},
        )
        if response.status_code in (404, 405, 501):
            return None
        if response.status_code >= 300:
            raise ControlError(f"control GET /faults/lost answered {response.status_code}: {clip(response.text, 300)}")
        body = response.json()
        found = body.get("responses") if isinstance(body, dict) else None
        if not isinstance(found, list):
            raise ControlError(
                f"control GET /faults/lost answered without a responses list: {clip(response.text, 300)}"
            )
        return [dict(r) for r in found if isinstance(r, dict)]
