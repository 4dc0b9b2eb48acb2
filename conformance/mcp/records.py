"""The plain records of the MCP surface: where a server is, what a tool call answered, that a
server did not serve, and the cap on one message. Kept apart from the client (``session``), which
needs the ``mcp`` SDK: a run whose tests never open an MCP session (a scoped run, a run without
MCP, a worker whose share holds no MCP test) then never imports it, some 0.4 s a process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MESSAGE_CAP = 4 * 1024 * 1024
"""The most one MCP message may take (the contract's answers are tens of kilobytes)."""


@dataclass(frozen=True)
class Endpoint:
    """Where an MCP path is: a command to spawn (stdio) or a streamable-HTTP URL with its bearer token."""

    transport: str  # "stdio" or "http"
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    token: str = ""
    path: str = "agent"  # "agent" (the Agent Session path) or "jobs" (the Fixed Client Token path): see session.PATHS

    def describe(self) -> str:
        return (
            f"stdio: {self.argv[0].rsplit('/', 1)[-1]} …"
            if self.transport == "stdio"
            else f"streamable HTTP: {self.url}"
        )


@dataclass(frozen=True)
class ToolResult:
    """A tools/call result as the server sent it."""

    is_error: bool
    structured: Any  # None when the result carries no structuredContent
    has_structured: bool
    texts: tuple[str, ...]
    protocol_error: str | None = None  # a JSON-RPC error instead of a tool result: the server's answer, judged as such

    def text_json(self) -> Any:
        """The first text block parsed as JSON, or None when there is none or it is not JSON."""
        for text in self.texts:
            try:
                return json.loads(text)
            except ValueError:
                continue
        return None


class NotServing(Exception):
    """The server under test did not answer ``initialize``: it exited, closed the stream, refused
    the session, answered something that is not JSON-RPC or timed out. That is the implementation's
    failure, judged against the rule of its path (not a harness error); a command that cannot be
    started at all (not found, not executable) is a configuration error, raised as it is, and a
    URL nothing listens on a harness error."""
