"""Miniatures of capabilities and negotiation: a wrong advertisement, a missing
endpoint, an unauthenticated answer, a legacy Core that crashes."""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send

from simulator.core import Caller, Core
from simulator.errors import ApiError
from simulator.miniatures._asgi import Miniature, Wrapper, capture, with_header
from simulator.sizing import dumps
from simulator.store import Run


class EndpointMissing(Wrapper):
    """An operation this Core does not have: the token is still checked first (401 before
    route matching, vendor convention), then every answer becomes an unknown path's 404."""

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        answer = await capture(self.app, scope, receive)
        if answer.status != 401:
            missing = ApiError(404, "not_found", "unknown path")
            answer.status, answer.body = missing.status, dumps(missing.body())
        await answer.send_to(send)


class CapabilitiesMissing(EndpointMissing):
    operations = frozenset({"capabilities"})


class ActsAsFirstIdentity(Wrapper):
    """A request without credentials is served as the workspace's first identity."""

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        first = self.core.store.first_identity(route)
        if first is not None and not any(k.lower() == b"authorization" for k, _ in scope["headers"]):
            scope = with_header(scope, b"authorization", f"Bearer {first.token}".encode())
        await self.app(scope, receive, send)


class CapabilitiesUnauthenticated(ActsAsFirstIdentity):
    operations = frozenset({"capabilities"})


class CapabilitiesWrongSchema(Core):
    def capabilities(self, caller: Caller) -> dict[str, Any]:
        return {**super().capabilities(caller), "knowledge_schema_version": "bailing.agent-knowledge.v2"}


class CapabilitiesWrongRoute(Core):
    def capabilities(self, caller: Caller) -> dict[str, Any]:
        return {**super().capabilities(caller), "route": "other-route"}


class CapabilitiesInlineOnly(Core):
    def capabilities(self, caller: Caller) -> dict[str, Any]:
        return {**super().capabilities(caller), "delivery_modes": ["inline"]}


class CapabilitiesLooseLimits(Core):
    def capabilities(self, caller: Caller) -> dict[str, Any]:
        body = super().capabilities(caller)
        return {**body, "limits": {**body["limits"], "search_max_hints": 5, "read_chain_max_bytes": 262144}}


class DisabledStillEnabled(Core):
    """Capabilities and the search endpoint behave as if the workspace were not disabled
    (a turn's hints and read still see the mode)."""

    def capabilities(self, caller: Caller) -> dict[str, Any]:
        return {**super().capabilities(caller), "enabled": True}

    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        if endpoint and mode == "disabled":
            mode = "normal"
        return super()._search_hints(caller, run, query, limit, mode, endpoint=endpoint)


MINIATURES: dict[str, Miniature] = {
    "capabilities_missing": CapabilitiesMissing,
    "capabilities_wrong_schema": CapabilitiesWrongSchema,
    "capabilities_wrong_route": CapabilitiesWrongRoute,
    "capabilities_inline_only": CapabilitiesInlineOnly,
    "capabilities_loose_limits": CapabilitiesLooseLimits,
    "disabled_still_enabled": DisabledStillEnabled,
    "capabilities_unauthenticated": CapabilitiesUnauthenticated,
}
