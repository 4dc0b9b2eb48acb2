"""What closing MCP sessions leaves behind, collected at once (conformance.mcp.session says why).

Apart from the session module so that callers that close sessions need not import the MCP SDK."""

from __future__ import annotations

import gc


def collect_closed() -> None:
    """Collect the garbage of the sessions just closed, then freeze what survives out of later
    collections' reach. A full collection walks every unfrozen object: what a test's lazy imports
    (the MCP SDK, the simulator) and earlier tests left alive, some 70,000 objects, 50-80 ms each
    time, again after every session. What survives one is nearly all long-lived; the price is
    that a cycle among the frozen objects that dies later is never collected (the run's memory
    grows by that, bounded by what was alive at the freezes)."""
    gc.collect()
    gc.freeze()
