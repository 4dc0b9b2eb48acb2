"""A reference Core for the agent knowledge search/read contract.

Correct first, deterministic (injected clock and randomness), controllable
through the test-control extension, and usable as a fake Core by SDK and host
authors: ``create_app()`` gives an ASGI app, ``knowledge-sim serve`` runs it.

The app is imported on first use: the stdio MCP server (``knowledge-sim mcp``) is a
process of its own per session and needs none of it, so it starts in less time.
"""

from typing import TYPE_CHECKING, Any

from simulator.config import SimConfig

if TYPE_CHECKING:
    from simulator.app import create_app

__all__ = ["SimConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from simulator.app import create_app

        return create_app
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
