"""Reference and cursor expiry waited out in real time (``--realtime``, no control clock).

Every reference and cursor the expiry checks need is issued first, then all of them are
probed in one wait around 300 s, each at its own age: just before (still valid), at the edge,
and just after (expired). Each probe keeps the age it measured, as bounds: the reference was
issued somewhere between the start of the request that issued it and the end of the last one
(``issued``), and the Core answered the probe between its send and its answer, so its age at
the Core lies between ``sent - issued[1]`` and ``answered - issued[0]``. A probe meant to be
younger than 300 s whose upper bound reaches 300 s says nothing and is not verified.

Time is injected (:class:`Clock`): the plugin passes the real one, and the project's own tests a
clock that moves the simulator's control clock, so the realtime path runs without the wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from conformance.common import contract as C
from conformance.common.aside import aside
from conformance.common.outcomes import ContractViolation, HarnessError, NotVerified
from conformance.server.world import World

STEP = 0.1  # seconds either side of the edge: a Core that rounds or truncates ages to whole seconds is off by more
KINDS = ("before", "edge", "after")
WHATS = ("ref", "cursor")


class Clock(Protocol):
    """Seconds on a monotonic scale, and a wait of some of them."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def ages(skew: float) -> dict[str, float]:
    """The age each kind of probe is sent at."""
    return {
        "before": C.REFERENCE_TTL_SECONDS - STEP - skew,
        "edge": float(C.REFERENCE_TTL_SECONDS),
        "after": C.REFERENCE_TTL_SECONDS + STEP + skew,
    }


@dataclass
class Probe:
    """One reference (or cursor) issued early and read once at its age."""

    kind: str
    what: str
    run_id: str = ""
    ref: str = ""
    first: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    issued: tuple[float, float] = (0.0, 0.0)
    response: httpx.Response | None = None
    age: tuple[float, float] = (0.0, 0.0)
    problem: Exception | None = None  # what stopped it being issued or read (re-raised by its test)
    clock: str = "in real time"

    @property
    def answer(self) -> httpx.Response:
        if self.response is None:
            raise HarnessError(f"the {self.kind} probe of a {self.what} was never read")
        return self.response

    @property
    def measured(self) -> str:
        low, high = self.age
        span = f"{low:.3f} s" if low == high else f"{low:.3f}-{high:.3f} s"
        return f"measured age {span} {self.clock}"

    @property
    def timing(self) -> dict[str, Any]:
        """The probe's age interval, as results.json keeps it."""
        status = self.response.status_code if self.response is not None else None
        return {"kind": self.kind, "what": self.what, "clock": self.clock, "age": list(self.age), "status": status}

    def due(self, skew: float) -> float:
        """When to send: an upper-bounded probe from the earliest issue, a lower-bounded one from the latest."""
        start = self.issued[0] if self.kind == "before" else self.issued[1]
        return start + ages(skew)[self.kind]


class ExpiryProbes:
    """The six expiry probes of one world, issued and read together on the first request for any of them."""

    def __init__(self, world: World, clock: Clock, wall: Clock | None = None) -> None:
        self.world = world
        self.clock = clock
        self.wall = wall if wall is not None else RealClock()  # real seconds, for probes on the control clock
        self.probes: dict[tuple[str, str], Probe] | None = None
        self.waited = 0.0
        self.timings: list[dict[str, Any]] = []  # every probe's age interval, for the run's results
        self._background: threading.Thread | None = None
        self._outcome: dict[tuple[str, str], Probe] | BaseException | None = None

    def start(self) -> None:
        """Issue the probes and wait in a thread of its own: the run's other tests go on meanwhile
        (their requests and checks set aside, see conformance.common.aside), and the first test
        that asks for a probe waits only for what is left of the five minutes."""
        if self._background is None and self.probes is None:
            self._background = threading.Thread(target=self._run_aside, name="kc-expiry-wait", daemon=True)
            self._background.start()

    def _run_aside(self) -> None:
        with aside():
            try:
                self._outcome = self._run()
            except BaseException as exc:  # judged by the test that asks, in its own thread
                self._outcome = exc

    def get(self, kind: str, what: str) -> Probe:
        if self.probes is None and self._background is not None:
            self._background.join()
            if isinstance(self._outcome, BaseException):
                raise self._outcome
            self.probes = self._outcome
        if self.probes is None:
            self.probes = self._run()
        probe = self.probes[(kind, what)]
        if probe.problem is not None:
            raise probe.problem
        self.timings.append(probe.timing)
        return probe

    def _issue(self, probe: Probe) -> None:
        world, clock = self.world, self.clock
        probe.run_id = world.start_run()
        start = clock.now()
        probe.ref = world.ref_for(probe.run_id, world.docs.get("unicode"))
        probe.first = world.page(probe.ref, probe.run_id, C.READ_MIN_MAX_BYTES)
        probe.issued = (start, clock.now())
        if probe.what == "cursor":
            if probe.first["next_cursor"] is None:
                raise NotVerified("not verified: the probe document fits one page, so there is no cursor")
            probe.extra = {"cursor": probe.first["next_cursor"]}

    def _run(self) -> dict[tuple[str, str], Probe]:
        probes = {(kind, what): Probe(kind, what) for kind in KINDS for what in WHATS}
        for probe in probes.values():
            try:
                self._issue(probe)
            except Exception as exc:  # kept for its own test: one probe's problem is not the others'
                probe.problem = exc
        skew = self.world.cfg.clock_skew_seconds
        began = self.clock.now()
        for probe in sorted((p for p in probes.values() if p.problem is None), key=lambda p: p.due(skew)):
            wait = probe.due(skew) - self.clock.now()
            if wait > 0:
                self.clock.sleep(wait)
            sent = self.clock.now()
            try:
                probe.response = self.world.read(probe.ref, probe.run_id, **probe.extra)
            except Exception as exc:
                probe.problem = exc
            probe.age = (sent - probe.issued[1], self.clock.now() - probe.issued[0])
        self.waited = self.clock.now() - began
        return probes


class ControlClock:
    """For the project's own tests only: a clock that is the served simulator's control clock,
    so a wait moves the simulator's time instead of taking it (KNOWLEDGE_CONFORMANCE_TEST_CLOCK)."""

    moves_the_core = True  # a wait here ages every reference of the run, not only the probes'

    def __init__(self, url: str, token: str) -> None:
        self._http = httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=10)

    def now(self) -> float:
        return float(self._http.get("/clock").raise_for_status().json()["now"])

    def sleep(self, seconds: float) -> None:
        self._http.post("/clock/advance", json={"seconds": seconds}).raise_for_status()


@contextmanager
def aged(measured: str) -> Iterator[None]:
    """Every expiry failure says the age it was measured at."""
    try:
        yield
    except ContractViolation as exc:
        message = str(exc).removeprefix(f"[{exc.requirement}] ")
        raise ContractViolation(exc.requirement, f"{message} ({measured})") from exc
