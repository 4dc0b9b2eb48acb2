"""The settings of one run, frozen: built once from the command line (and the loaded target
configuration) before anything connects, then handed to what needs them."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from conformance.common.config import ConfigError

SIM_CLOCK_TICK = 1e-6
"""The bundled simulator's clock is replayable (frozen) but moves a microsecond each time it is
read, so the suite's page checks run on a moving clock: a Core that sizes a page with one
reading of the clock and stamps its cursor with another sends pages over their bound. Such a
clock never shows a reference exactly 300 s old; ``--sim-clock-tick 0`` does."""
RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
"""What a run ID may be: it names workspaces and turn identities on the target."""


class RunIdError(ConfigError):
    """A ``--run-id`` the target's names cannot carry: a usage error of every command."""


def new_run_id() -> str:
    """A fresh random run ID, for a run not given one."""
    return secrets.token_hex(4)


def checked_run_id(run_id: str | None) -> str:
    """The run's ID: the one given, checked, or (none given) a fresh random one."""
    if run_id is not None and not run_id.strip():  # an unset variable: a fresh ID would lose the replay asked for
        raise RunIdError("--run-id is empty (an unset variable?): give 1-32 lowercase letters, digits and hyphens")
    run_id = run_id or new_run_id()
    if not RUN_ID.match(run_id):
        raise RunIdError(f"--run-id {run_id!r}: use 1-32 lowercase letters, digits and hyphens")
    return run_id


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
    """Seconds the bundled simulator's frozen clock moves per reading (conformance.common.open)."""
    realtime: bool = False
    """Wait real seconds for expiry when there is no control."""
    rate_limit: float = 0.0
    """At most this many requests per second to the target (0: no limit)."""
    no_control: bool = False
    """Tests do not use the control extension (worlds are still provisioned through it)."""
    scope: str | None = None
    """The declared scope (``--scope``, conformance.common.scope), already checked; None: none declared."""

    @classmethod
    def from_options(
        cls,
        *,
        run_id: str | None,
        worker: str = "",
        sim_quirks: Iterable[str] = (),
        sim_seed: int = 0,
        sim_clock_tick: float | None = None,
        realtime: bool = False,
        rate_limit: float = 0.0,
        no_control: bool = False,
        scope: str | None = None,
    ) -> RunSettings:
        """The one way a command builds its run's settings from its options (each already checked
        by its command but the run ID, checked here: :func:`checked_run_id`, a ``RunIdError``).
        ``sim_clock_tick`` None is the default tick."""
        return cls(
            run_id=checked_run_id(run_id),
            worker=worker,
            sim_quirks=tuple(sim_quirks),
            sim_seed=sim_seed,
            sim_clock_tick=SIM_CLOCK_TICK if sim_clock_tick is None else sim_clock_tick,
            realtime=realtime,
            rate_limit=rate_limit,
            no_control=no_control,
            scope=scope,
        )

    @property
    def namespace(self) -> str:
        """Prefix of every name this process creates on the target (workspaces, turn identities)."""
        return f"{self.run_id}-{self.worker}" if self.worker else self.run_id
