"""The settings of one run, frozen: built once from the command line (and the loaded target
configuration) before anything connects, then handed to what needs them."""

from __future__ import annotations

from dataclasses import dataclass

SIM_CLOCK_TICK = 1e-6
"""The bundled simulator's clock is replayable (frozen) but moves a microsecond each time it is
read, so the suite's page checks run on a moving clock: a Core that sizes a page with one
reading of the clock and stamps its cursor with another sends pages over their bound. Such a
clock never shows a reference exactly 300 s old; ``--sim-clock-tick 0`` does."""


@dataclass(frozen=True)
class RunSettings:
    run_id: str = "local"
    """Namespace of every workspace and turn identity the run creates on the target."""
    worker: str = ""
    """The pytest-xdist worker (or Locust worker) ID, "" in a serial run."""
    sim_quirks: tuple[str, ...] = ()
    """Deliberate deviations of the bundled simulator (its targets only)."""
    sim_seed: int = 0
    sim_clock_tick: float = SIM_CLOCK_TICK
    """Seconds the bundled simulator's frozen clock moves per reading (conformance.target.open)."""
    realtime: bool = False
    """Wait real seconds for expiry when there is no control."""
    rate_limit: float = 0.0
    """At most this many requests per second to the target (0: no limit)."""
    no_control: bool = False
    """Tests do not use the control extension (worlds are still provisioned through it)."""
    scope: str | None = None
    """The declared scope (``--scope``, conformance.target.scope), already checked; None: none declared."""

    @property
    def namespace(self) -> str:
        """Prefix of every name this process creates on the target (workspaces, turn identities)."""
        return f"{self.run_id}-{self.worker}" if self.worker else self.run_id
