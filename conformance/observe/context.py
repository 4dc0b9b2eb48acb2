"""What every rule of observe reads besides the exchange: the configuration, what the traffic so
far showed, the credentials' identities, and the judge's tolerances."""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.observe.credentials import Credentials
from conformance.observe.traffic import Traffic

EXPIRY_MARGIN = 1.0
"""Seconds an expiry judgement leaves on each side of 300, beyond the configured clock skew: the
proxy's clock is not the Core's, and the Core stamps a reference between its request's send and
its answer (both of which the proxy sees)."""
AVAILABILITY_WINDOW = 10.0
"""Seconds within which a search and an on_demand turn on one route must agree about availability
(a workspace's state may change between two that are further apart)."""


@dataclass
class Context:
    cfg: TargetConfig
    credentials: Credentials
    traffic: Traffic = field(default_factory=Traffic)
    negotiating: bool = False  # the host says every on_demand turn is a negotiated one (NEG-004)
    margin: float = EXPIRY_MARGIN

    @property
    def ttl(self) -> float:
        return float(C.REFERENCE_TTL_SECONDS)

    @property
    def tolerance(self) -> float:
        return self.margin + self.cfg.clock_skew_seconds
