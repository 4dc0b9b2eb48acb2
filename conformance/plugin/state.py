"""Keys under which the plugin keeps a session's state on the pytest config and items, and
that state: the run's settings (built once, before any test), and what the session gathers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from conformance.common.rules import Ledger

if TYPE_CHECKING:
    from pathlib import Path

    from conformance.clients.protocol import Harness
    from conformance.clients.session import Session
    from conformance.clients.world import World
    from conformance.common.config import TargetConfig
    from conformance.common.control import Control
    from conformance.common.served import ServedSimulator
    from conformance.common.settings import RunSettings
    from conformance.common.transport import Recorder
    from conformance.report.results import RunResult, TestResult, Waiver

MARKER = "requirement"


def is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker (it reports to the main process, which writes the reports)."""
    return hasattr(config, "workerinput")


@dataclass(frozen=True)
class ClientInfo:
    """What a client run checks: the harness's own account of the client, its surfaces and gate."""

    target: str
    surfaces: list[dict[str, Any]]
    gate: tuple[str, ...]


@dataclass
class ClientRun:
    """What a client run started (each kept as soon as it runs, so the end of the session stops it)."""

    served: ServedSimulator | None = None
    control: Control | None = None
    world: World | None = None
    harness: Harness | None = None
    session: Session | None = None


@dataclass
class SessionState:
    """One suite session: its configuration and settings, then what its tests and hooks gather."""

    started: float
    config: TargetConfig
    settings: RunSettings
    waivers: list[Waiver] = field(default_factory=list)
    pending: list[TestResult] = field(default_factory=list)  # every result so far, in the order reported
    recorder: Recorder | None = None  # counts this process's requests, keeps the current test's exchanges
    base_url: str = ""  # the target's, for the curl lines of a failure's exchanges
    worker_requests: dict[str, int] = field(default_factory=dict)  # xdist: requests each worker counted
    worker_refusals: dict[str, tuple[int, float]] = field(default_factory=dict)  # xdist: each worker's 429s, paused s
    kept_workspaces: list[str] = field(default_factory=list)  # those the control extension could not delete
    client: ClientInfo | None = None  # a client run: what its harness wraps
    client_run: ClientRun = field(default_factory=ClientRun)
    harness_failed: str | None = None  # a client run: why the harness did not start
    paths: dict[str, Path] = field(default_factory=dict)  # the reports written
    write_error: str | None = None
    keyboard_interrupted: bool = False  # Ctrl-C: the verdict is interrupted, whatever else happened
    run: RunResult | None = None  # the run's results, once aggregated


STATE = pytest.StashKey[SessionState]()
LEDGER = pytest.StashKey[Ledger]()  # the rules whose checks passed in a test's call phase
