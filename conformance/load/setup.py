"""What every simulated user shares: the target configuration, a provisioned world (workspace,
corpus and a pool of identities of distinct accounts, built with the suite's own
``conformance.server.world.provision`` through the control extension), the board of references
users were issued (for reuse by others), and the process's tally.

Each process provisions its own world (in distributed mode, each worker under its own
namespace), so workers never share identities or workspaces and a run cleans up after itself."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx

from conformance.common.config import TargetConfig
from conformance.common.control import Control
from conformance.common.open import NO_DELAY
from conformance.common.settings import RunSettings
from conformance.load.tally import Tally
from conformance.server import corpus
from conformance.server.leaks import DocumentText
from conformance.server.wire import CoreWire
from conformance.server.world import Who, World, provision

REUSE_WITHIN_SECONDS = 200.0
"""A reference older than this (by this process's clock) is never handed to its owner again:
it must still read, well inside its 300 seconds, whatever the two clocks say."""
BOARD_SIZE = 256


@dataclass(frozen=True)
class Issued:
    """A reference some identity was issued by a search, with the run it is bound to."""

    owner: Who
    run_id: str
    ref: str
    at: float


@dataclass
class Context:
    cfg: TargetConfig
    settings: RunSettings
    route: str
    identities: list[Who]
    docs: dict[str, corpus.Doc]
    queries: list[str]
    text: DocumentText
    tally: Tally = field(default_factory=Tally)
    control: Control | None = None
    setup_http: httpx.Client | None = None
    board: deque[Issued] = field(default_factory=lambda: deque(maxlen=BOARD_SIZE))
    _next: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_identity(self) -> Who:
        """Round robin over the pool: with as many identities as users, each user is its own account."""
        with self._lock:
            return self.identities[next(self._next) % len(self.identities)]

    def world(self, core: CoreWire, who: Who) -> World:
        """The suite's World as ``who`` sees it over ``core`` (one user's HTTP session): the suite's
        page, chain and binding checks run on it unchanged."""
        built = World(self.cfg, core, self.route, who, {}, self.docs, None)
        built.__dict__["_text"] = self.text  # built once for every user: windows of all the seeded text
        return built

    def issue(self, owner: Who, run_id: str, refs: list[str]) -> None:
        now = time.monotonic()
        self.board.extend(Issued(owner, run_id, ref, now) for ref in refs)

    def foreign(self, me: Who, rng: random.Random) -> Issued | None:
        """A recent reference issued to another account than ``me``'s."""
        horizon = time.monotonic() - REUSE_WITHIN_SECONDS
        found = [i for i in list(self.board) if i.owner.account != me.account and i.at >= horizon]
        return rng.choice(found) if found else None

    def close(self) -> list[str]:
        """Delete the workspaces this process created; returns those the control extension kept."""
        kept = self.control.cleanup() if self.control is not None else []
        if self.setup_http is not None:
            self.setup_http.close()
        return kept


def queries_for(cfg: TargetConfig, docs: dict[str, corpus.Doc]) -> list[str]:
    """Every document's own token (long chains: the budget-sized and big ones), the word the
    three worst cases for the search bound share, and the configured probe query."""
    found = [d.token for d in docs.values()]
    if docs:
        found.append(corpus.WORST_WORD)
    return [*found, cfg.probe_query]


def prepare(cfg: TargetConfig, settings: RunSettings, identities: int) -> Context:
    """Provision the world the users share: through control when the target has it (a fresh
    workspace, the suite's corpus and ``identities`` accounts), else the configured identities."""
    http = httpx.Client(
        base_url=cfg.target, transport=httpx.HTTPTransport(socket_options=NO_DELAY), timeout=cfg.timeout_seconds
    )
    core = CoreWire(http, cfg, settings.namespace)
    control = Control(http, cfg.control_url, cfg.control_token) if cfg.control_url and cfg.control_token else None
    world = provision(cfg, core, control)
    pool = [world.primary]
    if control is not None:
        for i in range(1, max(2, identities)):
            minted = control.mint(f"load{i}", world.route)
            pool.append(Who(minted["token"], minted["route"], minted["account"], minted["session_id"]))
    elif "other_account" in world.others:
        pool.append(world.others["other_account"])
    text = world.document_text()
    return Context(
        cfg,
        settings,
        world.route,
        pool,
        world.docs,
        queries_for(cfg, world.docs),
        text,
        control=control,
        setup_http=http,
    )


def context(environment: Any) -> Context:
    """The Context attached to a Locust environment (``attach``)."""
    found = getattr(environment, "kc_context", None)
    if not isinstance(found, Context):
        raise RuntimeError(
            "no knowledge-conformance context on this Locust environment: see conformance.load.setup.attach"
        )
    return found


def attach(environment: Any, ctx: Context) -> None:
    environment.kc_context = ctx
