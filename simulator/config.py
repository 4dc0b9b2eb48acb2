"""Start-up settings of a simulator instance."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimConfig:
    seed: int | None = 0  # None: IDs and tokens from a random seed, the signing key from a secret source
    database: str = ":memory:"
    # knowledge-sim serve: a store connection per thread, turns and long searches in a thread pool,
    # short searches and reads on the event loop (simulator.app._store_work); off, every request runs
    # on the event loop in order (the in-process simulator: reproducible).
    concurrent: bool = False
    store_threads: int = (
        8  # threads serving store work when concurrent; more than a few a core only contend for the GIL
    )
    quirks: frozenset[str] = field(default_factory=frozenset)
    control_enabled: bool = True
    control_token: str = "sim-control-token"
    hub: str = "https://hub.knowledge-sim.example"
    clock_start: float | None = 1_767_225_600.0  # 2026-01-01T00:00:00Z; None follows the host clock
    frozen_clock: bool = True
    clock_tick: float = 0.0  # seconds a frozen clock moves each time it is read (0: it moves only when told)
    clock_source: Callable[[], float] | None = None  # the time a moving clock follows (default: the host's)
    demo: bool = True
    demo_route: str = "demo"
    max_body_bytes: int = 1 << 20
    # Member names served instead of the canonical ones: [names.*] tables of wire-defaults.toml.
    wire_names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The MCP endpoint's DNS-rebinding protection (the mcp SDK's transport security): Host and Origin
    # headers it accepts beyond the loopback ones (simulator.mcp.server.LOOPBACK_HOSTS, LOOPBACK_ORIGINS);
    # "host:*" allows any port of a host. knowledge-sim serve --allow-host / --allow-origin.
    mcp_allowed_hosts: tuple[str, ...] = ()
    mcp_allowed_origins: tuple[str, ...] = ()
    embedder: str = (
        "hashed"  # search_knowledge's semantic embedding: a name of simulator.search_knowledge.ranking.EMBEDDERS
    )
