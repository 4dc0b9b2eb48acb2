"""The ASGI half of the miniatures: middleware that sits between the transcript
and the clean app and rewrites one operation's request or response.

A wrapper sees the wire only (method, path, headers, body), like a faulty proxy
in front of a correct Core; it never reaches into the Core's logic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulator.core import Core
from simulator.mcp.jobs import JobTools
from simulator.mcp.tools import AgentTools

_PATH = re.compile(r"^/agent-api/v1/workspaces/(?P<route>[^/]+)/(?P<tail>knowledge/[a-z]+|turns)$")
_OPERATIONS = {
    ("GET", "knowledge/capabilities"): "capabilities",
    ("POST", "knowledge/search"): "search",
    ("POST", "knowledge/read"): "read",
    ("POST", "turns"): "turns",
}


def operation(scope: Scope) -> tuple[str, str] | None:
    """``(operation, route)`` of a Core request (capabilities, search, read, turns), else None."""
    found = _PATH.match(scope["path"]) if scope["type"] == "http" else None
    name = _OPERATIONS.get((scope["method"], found["tail"])) if found else None
    return (name, found["route"]) if name and found else None


@dataclass
class Captured:
    """A whole response of the inner app, to rewrite before it is sent."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    async def send_to(self, send: Send) -> None:
        headers = [(k, v) for k, v in self.headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(self.body)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes) -> Receive:
    """A ``receive`` that hands the app ``body`` once, then a disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def with_header(scope: Scope, name: bytes, value: bytes) -> Scope:
    """A copy of ``scope`` whose header ``name`` is ``value`` (replacing any)."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != name]
    return {**scope, "headers": [*headers, (name, value)]}


async def capture(app: ASGIApp, scope: Scope, receive: Receive) -> Captured:
    out = Captured(500, [], b"")
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            out.status, out.headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    out.body = b"".join(chunks)
    return out


class Wrapper:
    """Middleware that leaves every request alone except those of ``operations``,
    which ``handle`` serves by calling the clean app (``self.app``) its own way."""

    operations: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, app: ASGIApp, core: Core) -> None:
        self.app, self.core = app, core

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = operation(scope)
        if found is None or found[0] not in self.operations:
            await self.app(scope, receive, send)
            return
        await self.handle(found[1], scope, receive, send)

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class BodyRewrite(Wrapper):
    """Rewrites a JSON request body before the clean app reads it; other bodies pass unchanged."""

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict):
            rewritten = self.rewrite(dict(body))
            if rewritten != body:  # ASCII escapes keep lone surrogates as the client sent them
                raw = json.dumps(rewritten).encode("ascii")
                scope = with_header(scope, b"content-length", str(len(raw)).encode())
        await self.app(scope, replay(raw), send)

    def rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


# A miniature: a Core subclass overriding one behaviour, a Wrapper around the clean app, or a
# subclass of the clean MCP tools (simulator.miniatures.mcp).
Miniature = type[Core] | type[Wrapper] | type[AgentTools] | type[JobTools]
