"""What the observe tests share (no test here): a simulator and the observe proxy served on
loopback, a small world made through control, and the traffic the reference client (or a broken
one) sends through the proxy, in sections a variant can pick.

The judge's clock is injected and moved with the simulator's control clock, so a reference read
"301 s later" is that old on both sides without waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

import simulator
from conformance.clients.reference import ReferenceHarness
from conformance.common.config import TargetConfig
from conformance.common.control import Control
from conformance.observe.credentials import Credentials, Identity
from conformance.observe.har import HarRecorder
from conformance.observe.judge import Judge
from conformance.observe.pipeline import Pipeline
from conformance.observe.proxy import ObserveProxy
from conformance.observe.report import Source, build
from conformance.report.results import RunResult
from conformance.server.corpus import MAIN_BASE, SECOND_BASE, Doc
from conformance.server.corpus import build as corpus
from simulator.config import SimConfig

CONTROL = "ctl-7f3a9c2e-sim"
OTHER_HUB = "https://hub-b.example"
DOCS = corpus(seed=7)
"""The suite's own corpus: budget-sized, multibyte and escape-heavy documents."""
KEYS: tuple[str, ...] = ("alpha", "second", "filler0", "filler1", "filler2", "ascii", "big", "unicode", "nospace")
KEYS += ("summarised", "worst1", "worst2", "worst3", "exact", "cuts")


class Clock:
    """The judge's clock: real time plus what the test moved the simulator's clock by."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on a free loopback port, adding no header of uvicorn's own (the proxy's answers are the upstream's)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="auto", server_header=False, date_header=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


@dataclass
class World:
    """Routes and connections made through control; tokens only in memory."""

    control: Control
    run: str
    routes: dict[str, str] = field(default_factory=dict)
    connections: dict[str, dict[str, Any]] = field(default_factory=dict)
    identities: dict[str, Identity] = field(default_factory=dict)

    def connect(self, key: str, account: str, on: str, *, hub: str | None = None, session: str | None = None) -> None:
        minted = self.control.mint(account, self.routes[on], hub=hub, session_id=session)
        self.connections[key] = {
            "key": key,
            "route": self.routes[on],
            "token": minted["token"],
            "binding": {
                "hubUrl": minted["hub"],
                "clientAppId": "observe",
                "workspace": self.routes[on],
                "sessionId": minted["session_id"],
            },
        }
        self.identities[minted["token"]] = Identity(key, account, minted["session_id"], minted["hub"])

    def session(self, key: str) -> str:
        return str(self.connections[key]["binding"]["sessionId"])


def _bases(keys: Sequence[str]) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = {MAIN_BASE: [], SECOND_BASE: []}
    for key in keys:
        doc: Doc = DOCS[key]
        grouped[doc.base].append(doc.as_item())
    return [{"id": base, "name": base, "items": items} for base, items in grouped.items() if items]


def build_world(control: Control, run: str, keys: Sequence[str] = KEYS) -> World:
    world = World(control, run)
    for name, mode, seeded in (
        ("main", "normal", keys),
        ("away", "normal", ("alpha", "second")),
        ("down", "unavailable", ("alpha",)),
        ("old", "legacy", ("alpha",)),
        ("off", "normal", ("alpha",)),
        ("pin", "normal", ("alpha",)),
    ):
        route = f"ob{run}-{name}"
        world.routes[name] = route
        control.create_workspace(route)
        control.replace_corpus(route, _bases(seeded))
        if mode == "legacy":
            control.set_mode(route, "legacy", 404)
        elif mode != "normal":
            control.set_mode(route, mode)
    world.connect("main", "alice", "main")
    main_session = world.session("main")
    world.connect("session2", "alice", "main")  # another Agent Session of the same account
    world.connect("hub2", "alice", "main", hub=OTHER_HUB, session=main_session)  # another Hub, the same session
    world.connect("away", "alice", "away", session=main_session)  # the same session on another route
    world.connect("other", "bob", "main", session=main_session)  # another account in the same session: REF-009 alone
    world.connect("fresh", "alice", "main")
    for key in ("down", "old", "off", "pin"):
        world.connect(key, "alice", key)
    return world


class Driver:
    """Harness commands to the client under test, in process: its answer, never an exception."""

    def __init__(self, harness: ReferenceHarness, world: World, core_url: str, clock: Clock) -> None:
        self.harness, self.world, self.clock = harness, world, clock
        self._ids = 0
        self._turns = 0
        self.call("start", connections=list(world.connections.values()), core_url=core_url, timeout_seconds=30)

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        self._ids += 1
        return self.harness.answer({"id": self._ids, "cmd": cmd, **fields})

    def ids(self, label: str) -> dict[str, str]:
        self._turns += 1
        return {
            "client_conversation_id": f"ob-{self.world.run}-{label}",
            "client_turn_id": f"t{self._turns}",
            "user_message_id": f"m{self._turns}",
        }

    def turn(
        self,
        connection: str,
        delivery: str = "negotiate",
        ids: dict[str, str] | None = None,
        text: str = "homepage binding",
    ) -> str | None:
        answer = self.call(
            "turn", connection=connection, input=text, ids=ids or self.ids(connection), delivery=delivery
        )
        return str(answer["value"]["run_id"]) if answer.get("ok") else None

    def search(self, connection: str, query: str, run: str | None) -> list[dict[str, Any]]:
        answer = self.call("search", connection=connection, input={"query": query, "runId": run, "limit": 3})
        return list(answer["value"].get("hints") or []) if answer.get("ok") else []

    def ref(self, connection: str, key: str, run: str | None) -> str | None:
        """A reference to the corpus document ``key``, found by its token."""
        hints = self.search(connection, DOCS[key].token, run)
        found = [h for h in hints if str(h.get("title", "")).startswith(DOCS[key].token)] or hints
        return str(found[0]["ref"]) if found else None

    def read(self, connection: str, ref: str | None, run: str | None, **extra: Any) -> dict[str, Any]:
        if ref is None:
            return {}
        return self.call("read", connection=connection, input={"ref": ref, "runId": run, **extra})

    def read_all(self, connection: str, ref: str | None, run: str | None, max_bytes: int | None = None) -> None:
        if ref is not None:
            data: dict[str, Any] = {"ref": ref, "runId": run}
            if max_bytes is not None:
                data["maxBytes"] = max_bytes
            self.call("read_all", connection=connection, input=data)

    def advance(self, seconds: float) -> None:
        self.world.control.advance(seconds)
        self.clock.shift += seconds


# ------------------------------------------------------------------ sections
def negotiation(d: Driver) -> None:
    """Capabilities, a negotiated on_demand turn, its retry, and the same turn asked again inline."""
    d.call("capabilities", connection="main")
    ids = d.ids("pinned")
    d.turn("main", "negotiate", ids)
    d.turn("main", "negotiate", ids)
    d.turn("main", "inline", ids)
    d.turn("fresh", "negotiate")


def search_and_read(d: Driver) -> None:
    """Searches that fill hints (the worst-case titles too), find nothing, and pages and chains of every kind."""
    d.turn("main", "on_demand", text="worstcase")  # the worst-case titles as a turn's hints
    summarised = (
        d.call("turn", connection="main", input="summariseddoc", ids=d.ids("main"), delivery="on_demand").get("value")
        or {}
    )
    hints = (summarised.get("context") or {}).get("knowledge_delivery", {}).get("hints") or []
    for hint in [h for h in hints if str(h.get("title", "")).startswith(DOCS["summarised"].token)][:1]:
        d.read("main", str(hint["ref"]), str(summarised["run_id"]))  # the turn's own hint of a short document
    run = d.turn("main")
    d.search("main", "homepage binding", run)
    d.search("main", "worstcase", run)
    d.search("main", "zzqqxxyy", run)
    d.read("main", d.ref("main", "alpha", run), run)
    d.read("main", d.ref("main", "summarised", run), run)
    d.read_all("main", d.ref("main", "ascii", run), run, 4096)
    d.read_all("main", d.ref("main", "unicode", run), run)
    d.read_all("main", d.ref("main", "nospace", run), run, 32768)
    cuts = d.ref("main", "cuts", run)
    d.read_all("main", cuts, run)
    d.read_all("main", cuts, run, 4096)


def budget(d: Driver) -> None:
    """Chains past the 131072-byte budget, and of exactly it."""
    run = d.turn("main")
    d.read_all("main", d.ref("main", "big", run), run, 32768)
    d.read_all("main", d.ref("main", "exact", run), run, 32768)


def bindings(d: Driver) -> None:
    """A reference presented under a later run, and by another session, Hub and route of the same
    account (each refused, then the caller searches again)."""
    run = d.turn("main")
    ref = d.ref("main", "alpha", run)
    later = d.turn("main")
    d.read("main", ref, later)
    d.search("main", "homepage binding", later)
    for stranger in ("session2", "hub2", "away"):
        own = d.turn(stranger)
        d.read(stranger, ref, own)
        d.search(stranger, "homepage binding", own)


def accounts(d: Driver) -> None:
    """The main account and another one search for the same documents; each reads what it found."""
    mine = d.turn("main", "inline")
    theirs = d.turn("other", "inline")
    d.search("main", "homepage binding", mine)
    hints = d.search("other", "homepage binding", theirs)
    if hints:
        d.read("other", str(hints[0]["ref"]), theirs)


def states(d: Driver) -> None:
    """An unavailable route, a legacy one, and one disabled while a reference of it is held."""
    d.call("capabilities", connection="down")
    run = d.turn("down", "on_demand")
    d.search("down", "homepage binding", run)
    d.call("capabilities", connection="old")
    d.turn("old", "negotiate")
    run = d.turn("off", "negotiate")
    ref = d.ref("off", "alpha", run)
    d.world.control.set_mode(d.world.routes["off"], "disabled")
    d.call("capabilities", connection="off")
    d.turn("off", "on_demand")
    d.read("off", ref, run)
    d.search("off", "homepage binding", run)


def revisions(d: Driver) -> None:
    """A reference and a chain mid-way when their document gets a new revision."""
    run = d.turn("main")
    ref = d.ref("main", "filler2", run)
    d.read("main", ref, run)
    chain = d.ref("main", "nospace", run)
    first = d.read("main", chain, run, maxBytes=4096)
    route = d.world.routes["main"]
    d.world.control.publish(route, DOCS["filler2"].item_id, DOCS["filler2"].content + " revised")
    d.world.control.publish(route, DOCS["nospace"].item_id, DOCS["nospace"].content + " revised")
    d.read("main", ref, run)
    d.search("main", "homepage binding", run)
    cursor = (first.get("value") or {}).get("next_cursor")
    if cursor:
        d.read("main", chain, run, maxBytes=4096, cursor=cursor)
        d.search("main", "homepage binding", run)


def expiry(d: Driver) -> None:
    """References read at 120 s (valid), then at 301 s (expired): one read at 120 s, one first read
    at 301 s, and a chain continued at 120 s and again at 301 s; each refusal is followed by a search."""
    run = d.turn("main")
    early = d.ref("main", "alpha", run)
    untouched = d.ref("main", "filler1", run)
    chain = d.ref("main", "ascii", run)
    first = d.read("main", chain, run, maxBytes=4096)
    d.advance(120)
    d.read("main", early, run)
    cursor = (first.get("value") or {}).get("next_cursor")
    second = d.read("main", chain, run, maxBytes=4096, cursor=cursor) if cursor else {}
    d.advance(181)
    for ref, extra in (
        (early, {}),
        (untouched, {}),
        (chain, {"maxBytes": 4096, "cursor": (second.get("value") or {}).get("next_cursor")}),
    ):
        if "cursor" in extra and not extra["cursor"]:
            continue
        d.read("main", ref, run, **extra)
        d.search("main", "homepage binding", run)


def retries(d: Driver) -> None:
    """A turn whose first two attempts get a 503 before the Core: the client retries it. Then a
    negotiated turn whose every attempt gets a 503, retried by its caller once the route's
    capabilities answer an old endpoint's 404 (a route of its own: no other endpoint of it works)."""
    busy = {"error": "unavailable", "message": "busy"}
    d.world.control.respond_next(d.world.routes["main"], "turns", 503, busy)
    d.world.control.respond_next(d.world.routes["main"], "turns", 503, busy)
    d.turn("main", "on_demand")
    pin, ids = d.world.routes["pin"], d.ids("pin")
    for _ in range(3):  # every attempt of the reference client's own retries
        d.world.control.respond_next(pin, "turns", 503, busy)
    d.turn("pin", "negotiate", ids)
    d.world.control.respond_next(pin, "capabilities", 404, {"error": "not_found", "message": "no such path"})
    d.turn("pin", "negotiate", ids)


NEEDS = {
    "negotiation": ("alpha", "filler0", "filler1"),
    "search_and_read": (
        *("alpha", "filler0", "filler1", "filler2", "summarised", "ascii", "unicode", "nospace", "cuts"),
        *("worst1", "worst2", "worst3"),
    ),
    "budget": ("big", "exact"),
    "bindings": ("alpha",),
    "accounts": ("alpha", "second"),
    "states": ("alpha",),
    "revisions": ("filler2", "nospace"),
    "retries": ("alpha",),
    "expiry": ("alpha", "filler1", "ascii"),
}
"""The corpus documents each section reads: a variant seeds only what its sections need."""

SECTIONS: dict[str, Callable[[Driver], None]] = {
    "negotiation": negotiation,
    "search_and_read": search_and_read,
    "budget": budget,
    "bindings": bindings,
    "accounts": accounts,
    "states": states,
    "revisions": revisions,
    "retries": retries,
    "expiry": expiry,  # last: it moves the clock
}


@dataclass
class Observation:
    run: RunResult
    judge: Judge
    world: World
    har: Path | None


def cfg(strict: bool = False) -> TargetConfig:
    """The judge's configuration; ``strict``: ``[wire] codes.strict``, as the active suite's strict runs."""
    config = TargetConfig()
    config.wire["codes"] = {**config.wire["codes"], "strict": strict}
    return config


def observe(
    harness: ReferenceHarness,
    *,
    quirks: Sequence[str] = (),
    sections: Sequence[str] = tuple(SECTIONS),
    har: Path | None = None,
    run: str = "c",
    negotiating: bool = False,
    strict: bool = False,
) -> Observation:
    """The client ``harness`` sends the sections' traffic through the observe proxy to a simulator
    with ``quirks``; what observe judged, as the report's results."""
    app = simulator.create_app(SimConfig(control_token=CONTROL, demo=False, seed=5), quirks=list(quirks))
    clock = Clock()
    with served(app) as core_url:
        control = Control.of_core(core_url, CONTROL)
        try:
            keys = [k for k in KEYS if any(k in NEEDS[name] for name in sections)]
            world = build_world(control, run, keys)
            credentials = Credentials(world.identities)
            judge = Judge(cfg(strict), credentials, base_url=core_url, negotiating=negotiating)
            recorder = HarRecorder(har, core_url) if har is not None else None
            pipeline = Pipeline(judge, size=100_000, record=recorder.add if recorder else None).start()
            proxy = ObserveProxy(core_url, pipeline.submit, credentials, clock=clock)
            with served(proxy) as proxy_url:
                driver = Driver(harness, world, proxy_url, clock)
                try:
                    for name in SECTIONS:
                        if name in sections:
                            SECTIONS[name](driver)
                finally:
                    for connection in harness.connections.values():
                        connection.client.http.close()
            pipeline.close()
            if recorder is not None:
                recorder.close()
        finally:
            control.close()
    result = build(judge.tally.snapshot(), Source("proxy", core_url), sessions=credentials.count)
    return Observation(result, judge, world, har)
