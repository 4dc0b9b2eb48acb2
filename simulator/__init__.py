"""A reference Core for the agent knowledge search/read contract.

Correct first, deterministic (injected clock and randomness), controllable
through the test-control extension, and usable as a fake Core by SDK and host
authors: ``create_app()`` gives an ASGI app, ``knowledge-sim serve`` runs it.
"""

from simulator.app import create_app
from simulator.config import SimConfig

__all__ = ["SimConfig", "create_app"]
