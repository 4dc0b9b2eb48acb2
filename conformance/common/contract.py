"""The suite's own model of the contract's numbers and rules (written from the
seeds, independently of the simulator)."""

from __future__ import annotations

import json
import re
from typing import Any

SEARCH_MAX_HINTS = 3
SEARCH_MAX_BYTES = 4096
READ_DEFAULT_MAX_BYTES = 16384
READ_MIN_MAX_BYTES = 4096
READ_MAX_MAX_BYTES = 32768
REFERENCE_MAX_BYTES = 4096
READ_CHAIN_MAX_BYTES = 131072
REFERENCE_TTL_SECONDS = 300
LIMITS = {
    "search_max_hints": SEARCH_MAX_HINTS,
    "search_max_bytes": SEARCH_MAX_BYTES,
    "read_default_max_bytes": READ_DEFAULT_MAX_BYTES,
    "read_min_max_bytes": READ_MIN_MAX_BYTES,
    "read_max_max_bytes": READ_MAX_MAX_BYTES,
    "reference_max_bytes": REFERENCE_MAX_BYTES,
    "read_chain_max_bytes": READ_CHAIN_MAX_BYTES,
    "reference_ttl_seconds": REFERENCE_TTL_SECONDS,
}
"""The bounded limits by their canonical capabilities names, at the contract's values."""
SEARCH_STATUSES = frozenset({"ok", "disabled", "unavailable", "partial"})
CAPABILITIES_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
KNOWLEDGE_SCHEMA = "bailing.agent-knowledge.v1"
TURN_SCHEMA = "bailing.agent-turn-context.v1"
DELIVERY_MODES = frozenset({"inline", "on_demand"})
REFERENCE_ERROR = re.compile(r"^knowledge_(reference_[a-z0-9_]+|[a-z0-9_]*changed)$")
SAFE_INTEGER_MAX = 2**53 - 1


def utf8_size(text: str) -> int:
    """UTF-8 bytes of ``text``; a lone surrogate (half of an astral character a Core split
    and sent as a JSON escape) counts the 3 bytes it would take, instead of raising."""
    return len(text.encode("utf-8", "surrogatepass"))


def json_pointer(doc: Any, pointer: str) -> Any:
    """Resolve an RFC 6901 pointer; ``None`` when any step is missing."""
    node = doc
    for part in pointer.lstrip("/").split("/") if pointer else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def is_reference_error_code(code: object) -> bool:
    return isinstance(code, str) and bool(REFERENCE_ERROR.match(code))


def strings_in(node: Any) -> list[str]:
    """Every string value anywhere in a JSON document."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings_in(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings_in(v)]
    return []


def canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
