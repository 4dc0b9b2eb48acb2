"""Miniatures of authentication and the wire: credentials not required or not
bound to a route, a handler that crashes on bad JSON, a missing header."""

from __future__ import annotations

import json

from starlette.types import Message, Receive, Scope, Send

from simulator.core import Caller, Core
from simulator.errors import ApiError
from simulator.miniatures._asgi import Miniature, Wrapper, read_body, replay
from simulator.miniatures.capabilities import ActsAsFirstIdentity


class AuthOptional(ActsAsFirstIdentity):
    operations = frozenset({"search", "read"})


class RouteUnchecked(Core):
    """The token must still be valid; the workspace it belongs to is never compared."""

    def authenticate(self, authorization: str | None, route: str, *, knowledge_op: bool) -> Caller:
        try:
            return super().authenticate(authorization, route, knowledge_op=knowledge_op)
        except ApiError as err:
            if err.code != "route_not_allowed":
                raise
            ident = self.store.identity((authorization or "").partition(" ")[2].strip())
            assert ident is not None  # route_not_allowed follows a valid token
            return Caller(ident, route)


class CrashOnBadInput(Wrapper):
    """A body that is not JSON raises inside the app: the server's generic 500 answers."""

    operations = frozenset({"search", "read", "turns"})

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        if raw.strip():
            try:
                json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise RuntimeError("unparsed body") from exc
        await self.app(scope, replay(raw), send)


class CacheControlMissing(Wrapper):
    """Every response, Core or control, loses its Cache-Control header."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def strip(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"]
            await send(message)

        await self.app(scope, receive, strip if scope["type"] == "http" else send)


MINIATURES: dict[str, Miniature] = {
    "auth_optional": AuthOptional,
    "route_unchecked": RouteUnchecked,
    "crash_on_bad_input": CrashOnBadInput,
    "cache_control_missing": CacheControlMissing,
}
