"""Streamable HTTP transport of the Agent Session MCP path.

``POST /agent-api/v1/workspaces/{route}/mcp`` with ``Authorization: Bearer <Agent
Session token>``.  Answers are ``application/json`` bodies (no SSE); the server is
stateless (no ``Mcp-Session-Id``); ``GET`` (and every other method) is 405.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .agent_tools import AgentTools, IdentityFailure, SessionContext
from .core_client import CoreClient
from .mcp_protocol import PROTOCOL_VERSIONS, McpServer, RpcError, error_response, parse_error, INVALID_REQUEST

PATH_RE = re.compile(r"/agent-api/v1/workspaces/([^/]+)/mcp/?")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
ACCEPTABLE = ("application/json", "application/*", "*/*")

Answer = tuple[int, dict[str, str], bytes]


def match(path: str) -> str | None:
    """The route of an MCP endpoint path, or None."""
    m = PATH_RE.fullmatch(path.partition("?")[0])
    return unquote(m.group(1)) if m else None


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def origin_allowed(origin: str | None, extra: tuple[str, ...]) -> bool:
    """DNS-rebinding guard: no Origin, a loopback Origin or a configured one."""
    if origin is None:
        return True
    origin = origin.strip()
    if origin.rstrip("/") in extra:
        return True
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname in LOOPBACK_HOSTS


def acceptable(accept: str | None) -> bool:
    if not accept:
        return True
    kinds = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return any(k in ACCEPTABLE for k in kinds)


@dataclass
class McpHttpEndpoint:
    tools: AgentTools
    server: McpServer
    allowed_origins: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def for_core(cls, core_url: str, allowed_origins: tuple[str, ...] = ()) -> "McpHttpEndpoint":
        tools = AgentTools(CoreClient(core_url))
        return cls(tools=tools, server=McpServer(tools=tools, name="blindcore-agent-session"),
                   allowed_origins=tuple(o.rstrip("/") for o in allowed_origins))

    def handle(self, method: str, route: str, headers: dict[str, str], raw: bytes) -> Answer:
        if method != "POST":
            return 405, {"Allow": "POST"}, dumps({"error": "method_not_allowed"})
        if not origin_allowed(headers.get("origin"), self.allowed_origins):
            return 403, {}, dumps({"error": "origin_not_allowed"})
        if not acceptable(headers.get("accept")):
            return 406, {}, dumps({"error": "not_acceptable"})
        token = bearer(headers.get("authorization"))
        if token is None:
            return 401, {"WWW-Authenticate": "Bearer"}, dumps({"error": "unauthorized"})
        found = self.tools.identify(token, route)
        if isinstance(found, IdentityFailure):
            extra = {"WWW-Authenticate": "Bearer"} if found.status == 401 else {}
            return found.status, extra, dumps({"error": found.code})
        version = headers.get("mcp-protocol-version")
        if version is not None and version.strip() not in PROTOCOL_VERSIONS:
            return 400, {}, dumps(error_response(None, RpcError(
                INVALID_REQUEST, "unsupported MCP-Protocol-Version", {"supported": list(PROTOCOL_VERSIONS)})))
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return 400, {}, dumps(parse_error())
        context = SessionContext(token=token, route=route, identity=found)
        answer = self.server.handle_payload(payload, context)
        if answer is None:
            return 202, {}, b""
        if isinstance(answer, dict) and "error" in answer and answer.get("id") is None:
            return 400, {}, dumps(answer)           # not a valid JSON-RPC request at all
        return 200, {}, dumps(answer)


def bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
