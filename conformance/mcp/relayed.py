"""The Core's answers as the Agent Session tools relay them, judged by the Core's own rules.

A search or a page that reaches a model over MCP is the same search or page the seed bounds:
at most three hints, never a full document, 4096 bytes of search JSON, honest chain flags. The
checks are :mod:`conformance.server.checks`' own, run on the members the Core's answer has (the
two MCP flags and anything else an adapter adds are left out of sizes, so no adapter is held
to more than a Core); a violation names the seed's rule and says it was seen over MCP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from conformance.common.outcomes import ContractViolation
from conformance.common.rules import Rule
from conformance.server import checks
from knowledge_schemas import load_registry

SEARCH_STEM, PAGE_STEM = "search-response", "read-response"


@cache
def _members(stem: str) -> frozenset[str]:
    """The members the Core's answer of ``stem`` may have (its schema's properties)."""
    return frozenset(load_registry().contents[f"{stem}.schema.json"].get("properties", {}))


def core_part(body: dict[str, Any], stem: str) -> dict[str, Any]:
    """What of a tool's result is the Core's answer: the members its schema names."""
    known = _members(stem)
    return {k: v for k, v in body.items() if k in known}


def size(part: dict[str, Any]) -> int:
    """Its bytes at their fewest (compact JSON, UTF-8): no spelling of the same members is shorter,
    so a bound judged on it never asks more than the seed."""
    return len(json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@contextmanager
def over_mcp(transport: str, tool: str) -> Iterator[None]:
    """A violation raised inside is labelled as seen over MCP, and its evidence is the tool calls
    (no HTTP exchange showed it)."""
    try:
        yield
    except ContractViolation as exc:
        message = str(exc).removeprefix(f"[{exc.requirement}] ")
        exc.args = (f"[{exc.requirement}] over MCP ({transport}), {tool}: {message}",)
        exc.via = "mcp"
        raise


def search(body: dict[str, Any], transport: str, tool: str) -> None:
    """A search result: the Core's search rules (hints, status, trust when present, 4096 bytes)."""
    part = core_part(body, SEARCH_STEM)
    with over_mcp(transport, tool):
        checks.search_body(part, size(part), relayed=True)


def page(body: dict[str, Any], transport: str, tool: str, *, ref: str, max_bytes: int | None, bound: Rule) -> None:
    """A read result: the Core's page rules (members, flags, cursor size, the page bound as ``bound``)."""
    part = core_part(body, PAGE_STEM)
    with over_mcp(transport, tool):
        checks.page_body(part, size(part), ref=ref, max_bytes=max_bytes, requirement_bound=bound, relayed=True)
