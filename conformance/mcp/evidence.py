"""The current test's MCP tool calls, as a failure judged on an MCP answer shows them.

Kept apart from the session (no MCP SDK import), so the plugin can empty the ledger before each
test of any run cheaply. Every value the server or the configuration gave is made safe when it is
recorded (``untrusted.shown``: secrets masked, control bytes and CI command prefixes escaped, cut)."""

from __future__ import annotations

import json
from typing import Any

from conformance.common.secrets import clip
from conformance.common.untrusted import shown

KEEP = 4  # the test's last calls a failure shows
ARGUMENTS_KEEP, ANSWER_KEEP, ENDPOINT_KEEP = 600, 400, 300

CALLS: list[dict[str, Any]] = []
"""Newest last; emptied by the plugin before each test."""


def record(transport: str, endpoint: str, tool: str, arguments: dict[str, Any], answer: dict[str, Any]) -> None:
    """One tools/call and what the server answered (``answer``: is_error, protocol_error, text)."""
    CALLS.append(
        {
            "transport": transport,
            "endpoint": _safe(endpoint, ENDPOINT_KEEP),
            "tool": tool,
            "arguments": _safe(json.dumps(arguments, ensure_ascii=False, sort_keys=True), ARGUMENTS_KEEP),
            "is_error": bool(answer.get("is_error")),
            "protocol_error": None if answer.get("protocol_error") is None else _safe(answer["protocol_error"], 200),
            "answer": _safe(answer.get("text", ""), ANSWER_KEEP),
        }
    )
    del CALLS[:-KEEP]


def _safe(value: object, keep: int) -> str:
    """The first ``keep`` characters, made safe (an answer may be megabytes: only the kept part is read)."""
    return shown(clip(str(value), keep))


def clear() -> None:
    CALLS.clear()
