"""The current test's MCP tool calls, as a failure judged on an MCP answer shows them.

Kept apart from the session (no MCP SDK import), so the plugin can empty the ledger before each
test of any run cheaply. Every value is scrubbed of known secrets when it is recorded."""

from __future__ import annotations

import json
from typing import Any

from conformance.target.secrets import SECRETS, clip

KEEP = 4  # the test's last calls a failure shows
ARGUMENTS_KEEP, ANSWER_KEEP = 600, 400

CALLS: list[dict[str, Any]] = []
"""Newest last; emptied by the plugin before each test."""


def record(transport: str, endpoint: str, tool: str, arguments: dict[str, Any], answer: dict[str, Any]) -> None:
    """One tools/call and what the server answered (``answer``: is_error, protocol_error, text)."""
    CALLS.append(
        {
            "transport": transport,
            "endpoint": SECRETS.text(endpoint),
            "tool": tool,
            "arguments": clip(json.dumps(arguments, ensure_ascii=False, sort_keys=True), ARGUMENTS_KEEP),
            "is_error": bool(answer.get("is_error")),
            "protocol_error": None
            if answer.get("protocol_error") is None
            else clip(str(answer["protocol_error"]), 200),
            "answer": clip(str(answer.get("text", "")), ANSWER_KEEP),
        }
    )
    del CALLS[:-KEEP]


def clear() -> None:
    CALLS.clear()
