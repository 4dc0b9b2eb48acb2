"""The current test's MCP tool calls, as a failure judged on an MCP answer shows them.

Kept apart from the session (no MCP SDK import), so the plugin can empty the ledger before each
test of any run cheaply. Every value the server or the configuration gave is made safe when it is
read (``untrusted.shown``: secrets masked, control bytes and CI command prefixes escaped, cut);
a run makes thousands of calls and a failure shows a few, so only those are made safe."""

from __future__ import annotations

import json
from typing import Any

from conformance.common.secrets import clip
from conformance.common.untrusted import shown

KEEP = 4  # the test's last calls a failure shows
ARGUMENTS_KEEP, ANSWER_KEEP, ENDPOINT_KEEP = 600, 400, 300

_CALLS: list[tuple[str, str, str, str, dict[str, Any]]] = []
"""Newest last, as given; emptied by the plugin before each test."""


def record(transport: str, endpoint: str, tool: str, arguments: dict[str, Any], answer: dict[str, Any]) -> None:
    """One tools/call and what the server answered (``answer``: is_error, protocol_error, text)."""
    _CALLS.append((transport, endpoint, tool, json.dumps(arguments, ensure_ascii=False, sort_keys=True), answer))
    del _CALLS[:-KEEP]


def calls() -> list[dict[str, Any]]:
    """The test's last calls, made safe."""
    return [
        {
            "transport": transport,
            "endpoint": _safe(endpoint, ENDPOINT_KEEP),
            "tool": tool,
            "arguments": _safe(arguments, ARGUMENTS_KEEP),
            "is_error": bool(answer.get("is_error")),
            "protocol_error": None if answer.get("protocol_error") is None else _safe(answer["protocol_error"], 200),
            "answer": _safe(answer.get("text", ""), ANSWER_KEEP),
        }
        for transport, endpoint, tool, arguments, answer in _CALLS
    ]


def _safe(value: object, keep: int) -> str:
    """The first ``keep`` characters, made safe (an answer may be megabytes: only the kept part is read)."""
    return shown(clip(str(value), keep))


def clear() -> None:
    _CALLS.clear()
