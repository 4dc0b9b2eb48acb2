"""Process groups: a client harness and a stdio MCP server run in their own, so that a child
they leave behind (a double fork) ends with them."""

from __future__ import annotations

import os


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group (0: only ask whether it is there); False when none of it is left."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
