"""Deliberately wrong implementations ("miniatures"), one per quirk, each a small
separate fake around the clean reference: a Core subclass that overrides one
behaviour, or an ASGI wrapper that rewrites a request or a response on the way.

The clean Core and app never ask which quirks are on; ``compose`` builds the
Core class and the wrappers for a set of quirk names, and ``create_app`` uses
them. The names, descriptions and expected suite outcomes are data
(``simulator.quirks``, from ``quirk-outcomes.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from simulator.core import Core
from simulator.miniatures import capabilities, concurrency, mcp, read, references, search, search_knowledge, turns, wire
from simulator.miniatures._asgi import Miniature, Wrapper
from simulator.search_knowledge.tool import SearchKnowledge

MINIATURES: dict[str, Miniature | type[SearchKnowledge]] = {
    **capabilities.MINIATURES,
    **turns.MINIATURES,
    **search.MINIATURES,
    **read.MINIATURES,
    **references.MINIATURES,
    **wire.MINIATURES,
    **mcp.MINIATURES,
    **search_knowledge.MINIATURES,
    **concurrency.MINIATURES,
}


def compose(quirks: Iterable[str]) -> tuple[type[Core], list[type[Wrapper]]]:
    """The Core class with the named Core miniatures mixed in (the clean ``Core`` when
    there are none) and the named wrappers, outermost first; names in a stable order."""
    chosen = [MINIATURES[name] for name in sorted(set(quirks))]  # MCP and search_knowledge miniatures are neither
    cores = tuple(m for m in chosen if issubclass(m, Core))
    return _mixed(cores), [m for m in chosen if issubclass(m, Wrapper)]


@cache
def _mixed(cores: tuple[type[Core], ...]) -> type[Core]:
    """One class per combination, so two apps with the same quirks share their Core class."""
    if not cores:
        return Core
    return type("Core+" + "+".join(c.__name__ for c in cores), (*cores, Core), {})


__all__ = ["MINIATURES", "Miniature", "Wrapper", "compose"]
