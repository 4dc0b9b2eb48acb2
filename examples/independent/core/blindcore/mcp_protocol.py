"""Hand-written JSON-RPC 2.0 and the MCP methods blindcore serves.

Methods: ``initialize``, ``notifications/initialized`` (and any other notification,
ignored), ``ping``, ``tools/list``, ``tools/call``.  The transports (streamable HTTP in
:mod:`blindcore.mcp_http`, stdio in :mod:`blindcore.stdio`) only move messages.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from . import __version__

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26")
LATEST_VERSION = PROTOCOL_VERSIONS[0]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

INCLUDE_HIDDEN_META = "blindcore/include_hidden"

JSON = Any


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: JSON = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def body(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class UnknownTool(Exception):
    pass


class ToolSet(Protocol):
    """What a server offers: its tool definitions and a way to call them."""

    def list_tools(self, include_hidden: bool) -> list[dict[str, JSON]]: ...

    def call(self, name: str, arguments: dict[str, JSON], context: JSON) -> dict[str, JSON]: ...


def text_result(structured: dict[str, JSON], is_error: bool = False) -> dict[str, JSON]:
    """A tool result: one JSON text block and the same object as structuredContent."""
    return {
        "content": [{"type": "text", "text": json.dumps(structured, ensure_ascii=False)}],
        "structuredContent": structured,
        "isError": is_error,
    }


@dataclass
class McpServer:
    tools: ToolSet
    name: str
    instructions: str = ""

    # ------------------------------------------------------------------ entry points
    def handle_payload(self, payload: JSON, context: JSON = None) -> JSON:
        """A decoded message or batch -> the response(s), or None when none is due."""
        if isinstance(payload, list):
            if not payload:
                return error_response(None, RpcError(INVALID_REQUEST, "empty batch"))
            answers = [a for a in (self.handle_message(m, context) for m in payload) if a is not None]
            return answers or None
        return self.handle_message(payload, context)

    def handle_message(self, msg: JSON, context: JSON = None) -> dict[str, JSON] | None:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return error_response(_id_of(msg), RpcError(INVALID_REQUEST, "not a JSON-RPC 2.0 message"))
        if "method" not in msg:
            return None                             # a response from the client: nothing to answer
        method = msg["method"]
        is_request = "id" in msg
        if is_request and not _valid_id(msg["id"]):
            return error_response(None, RpcError(INVALID_REQUEST, "id must be a string or a number"))
        if not isinstance(method, str):
            return error_response(msg.get("id"), RpcError(INVALID_REQUEST, "method must be a string"))
        if not is_request:
            return None                             # notifications/initialized and friends
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            return error_response(msg["id"], RpcError(INVALID_PARAMS, "params must be an object"))
        try:
            result = self.dispatch(method, params or {}, context)
        except RpcError as e:
            return error_response(msg["id"], e)
        except Exception as e:  # an unexpected failure stays a JSON-RPC error
            return error_response(msg["id"], RpcError(INTERNAL_ERROR, "internal error", type(e).__name__))
        return {"jsonrpc": "2.0", "id": msg["id"], "result": result}

    # ------------------------------------------------------------------ methods
    def dispatch(self, method: str, params: dict[str, JSON], context: JSON) -> JSON:
        if method == "initialize":
            return self.initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            meta = params.get("_meta")
            hidden = isinstance(meta, dict) and meta.get(INCLUDE_HIDDEN_META) is True
            return {"tools": self.tools.list_tools(hidden)}
        if method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or not name:
                raise RpcError(INVALID_PARAMS, "tools/call needs a tool name")
            arguments = params.get("arguments", {})
            if arguments is None:
                arguments = {}
            try:
                return self.tools.call(name, arguments, context)
            except UnknownTool:
                raise RpcError(INVALID_PARAMS, f"unknown tool: {name}")
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def initialize(self, params: dict[str, JSON]) -> dict[str, JSON]:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise RpcError(INVALID_PARAMS, "initialize needs protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else LATEST_VERSION
        result: dict[str, JSON] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": __version__},
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result


def _valid_id(value: JSON) -> bool:
    return isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _id_of(msg: JSON) -> JSON:
    if isinstance(msg, dict) and _valid_id(msg.get("id")):
        return msg["id"]
    return None


def error_response(msg_id: JSON, error: RpcError) -> dict[str, JSON]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": error.body()}


def parse_error() -> dict[str, JSON]:
    return error_response(None, RpcError(PARSE_ERROR, "parse error"))
