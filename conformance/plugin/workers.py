"""How many tests run at once when ``--concurrency`` is not given.

One for the bundled simulator and for a Core on this machine or next to it: there a round trip
costs nothing and every pytest-xdist worker costs a process start. Four for a Core a network
away: each request then waits a round trip, and four in flight take a run 50 ms away from some
93 s to about a third of that (``benchmarks/latency.py``). Eight for a Core whose handshake takes
20 ms or more (another region): there round trips outweigh the workers' starts, and eight took a
control run with MCP 50 ms away from 99 s on four to 68 s. Twelve for one whose handshake takes
60 ms or more (30 ms each way, across a continent or an ocean): in one invocation of the scoped
gate, twelve took 13.7 s 50 ms away against 16.1 s on eight, while 25 ms away the two were even
(11.2 s and 11.9 s) and 10 ms away eight was faster (9.7 s and 11.1 s). Only the target's
address and one TCP handshake decide it, so a loopback Core is never run concurrently by
surprise; a Core that answers 429 is waited on (conformance.common.transport.Backoff)."""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

AUTO_WORKERS = 4
FAR_SECONDS = 0.002
"""A TCP handshake slower than this: the Core is a network away (a LAN answers in well under it)."""
FARTHER_WORKERS = 8
FARTHER_SECONDS = 0.020
"""A TCP handshake slower than this: the Core is a region away (10 ms each way or more)."""
FARTHEST_WORKERS = 12
FARTHEST_SECONDS = 0.060
"""A TCP handshake slower than this: the Core is a continent or an ocean away (30 ms each way or more)."""
HANDSHAKE_TIMEOUT = 2.0

Connect = Callable[[tuple[str, int], float], Any]


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def handshake_seconds(
    url: str,
    *,
    connect: Connect = socket.create_connection,
    clock: Callable[[], float] = time.perf_counter,
) -> float | None:
    """How long one TCP handshake with the Core at ``url`` took (name lookup included); None for a
    Core on this machine, which is never dialled, and for one that cannot be reached (the run's
    preflight says why)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or _loopback(parts.hostname):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    started = clock()
    try:
        connect((parts.hostname, port), HANDSHAKE_TIMEOUT).close()
    except (OSError, UnicodeError):
        return None
    return clock() - started


def workers_for(seconds: float | None) -> int:
    """The worker count for a handshake of ``seconds`` (None: never dialled, or unreachable)."""
    if seconds is None or seconds < FAR_SECONDS:
        return 1
    if seconds >= FARTHEST_SECONDS:
        return FARTHEST_WORKERS
    return FARTHER_WORKERS if seconds >= FARTHER_SECONDS else AUTO_WORKERS


def default_workers(
    target_config: str | None,
    target: str | None,
    *,
    connect: Connect = socket.create_connection,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """The worker count for a run that named none (a bad configuration: 1, the preflight reports it)."""
    from conformance.common.config import ConfigError, load_config

    try:
        cfg = load_config(target_config, target=target)
    except (ConfigError, OSError):
        return 1
    if cfg.is_sim:
        return 1
    return workers_for(handshake_seconds(cfg.target, connect=connect, clock=clock))


def preloads(target_config: str | None, target: str | None, mcp_target: str | None) -> tuple[str, ...]:
    """What this run's forked workers will import besides the suite's usual libraries: the MCP
    SDK's client where MCP sessions will be opened, and the bundled simulator's libraries where each
    worker serves one (conformance.plugin.warm); nothing where the configuration cannot be read."""
    from conformance.common.config import ConfigError, load_config
    from conformance.plugin.warm import BUNDLED_PRELOAD, MCP_PRELOAD

    try:
        cfg = load_config(target_config, target=target)
    except (ConfigError, OSError):
        return ()
    chosen = (mcp_target or "").strip().lower()
    if chosen == "none":
        return BUNDLED_PRELOAD if cfg.is_sim else ()
    if cfg.is_sim:
        return (*MCP_PRELOAD, *BUNDLED_PRELOAD)
    return MCP_PRELOAD if chosen or cfg.mcp.get("url") or cfg.mcp.get("command") else ()
