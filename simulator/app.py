"""The ASGI application: Core routes, optional control routes, middleware.

``create_app(quirks=[...])`` builds the same clean app around a Core with the
named miniatures (``simulator.miniatures``) composed in: none of them is a
branch in here or in the Core.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from random import Random
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulator.clock import CURRENT_ROUTE, Clock, workspace_of
from simulator.config import SimConfig
from simulator.control import control_routes
from simulator.core import Caller, Core
from simulator.corpus import seed_demo
from simulator.errors import ApiError
from simulator.http import SchemaCheck, error_response, in_store_thread, receive_json, schema_check, validate
from simulator.mcp.server import MCP_PATH, mount, transport_security
from simulator.miniatures import compose
from simulator.miniatures.mcp import agent_class, security_for
from simulator.miniatures.search_knowledge import sk_class
from simulator.quirks import parse_quirks
from simulator.search_knowledge.ranking import embedder_for
from simulator.search_knowledge.routes import control_routes as sk_control_routes
from simulator.search_knowledge.routes import tool_route
from simulator.search_knowledge.store import SkState
from simulator.sizing import dumps
from simulator.store import Moved, Store, WouldBlock
from simulator.transcript import Transcript
from simulator.wire_names import WireNames

log = logging.getLogger("knowledge_sim")
BASE = "/agent-api/v1/workspaces/{route}"
T = TypeVar("T")
TRANSCRIPT_BODY_BYTES = 65536


def no_store(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers with exactly one Cache-Control, ``no-store``: a route's own (the MCP SDK's SSE
    stream sends ``no-cache, no-transform``) is replaced, keeping ``no-transform`` (a proxy must not
    buffer an event stream to compress it)."""
    kept: list[tuple[bytes, bytes]] = []
    transform = False
    for name, value in headers:
        if name.lower() == b"cache-control":
            transform = transform or b"no-transform" in value.lower()
        else:
            kept.append((name, value))
    kept.append((b"cache-control", b"no-store, no-transform" if transform else b"no-store"))
    return kept


class NoStore:
    """Exactly one Cache-Control, ``no-store``, on every response (vendor convention), and the
    request's clock the one of the workspace its path names (``simulator.clock.CURRENT_ROUTE``):
    one layer, as every layer of middleware costs every request.

    ``direct``: the Core's endpoints (path pattern, methods, endpoint), the first routes of the
    app: a request that is one of theirs goes straight to it, as the router would send it (a
    Core endpoint sends its own ``no-store``), without the router and the exception layer in
    between. A ``root_path`` (the router would strip it first) takes the router's way."""

    def __init__(
        self, app: ASGIApp, direct: Sequence[tuple[re.Pattern[str], Collection[str], CoreEndpoint]] = ()
    ) -> None:
        self.app = app
        self.direct = tuple(direct)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            token = CURRENT_ROUTE.set(None)
            try:
                await self.app(scope, receive, send)
            finally:
                CURRENT_ROUTE.reset(token)
            return

        path: str = scope["path"]
        if not scope.get("root_path"):
            for pattern, methods, endpoint in self.direct:
                found = pattern.match(path)
                if found is not None:
                    if scope["method"] not in methods:
                        break  # the router's 405
                    route = found["route"]  # the path's first workspace: workspace_of(path)
                    token = CURRENT_ROUTE.set(route)
                    try:
                        await endpoint.serve(scope, receive, send, route)
                    finally:
                        CURRENT_ROUTE.reset(token)
                    return

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = no_store(message.get("headers", []))
            await send(message)

        token = CURRENT_ROUTE.set(workspace_of(path))
        try:
            await self.app(scope, receive, wrapped)
        finally:
            CURRENT_ROUTE.reset(token)


class Observe:
    """Keeps the request transcript and logs one JSON line per request, as the client saw it.

    Each only when something reads it: the transcript when the control extension (its only
    reader) is served, the log line when the log takes INFO lines. A served simulator without
    either (``knowledge-sim serve --no-control``, the default log level) spent some 7% of its CPU
    time keeping and writing what nobody read."""

    def __init__(self, app: ASGIApp, core: Core, transcript: Transcript | None) -> None:
        self.app, self.core, self.transcript = app, core, transcript

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.transcript is None and not log.isEnabledFor(logging.INFO)):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}
        chunks: list[bytes] = []

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        try:
            await self.app(scope, reading, wrapped)
        finally:
            path = scope["path"]
            if self.transcript is not None and not path.startswith("/_control/"):
                self.transcript.append(self._entry(scope, path, status["code"], b"".join(chunks)))
            log.info(
                json.dumps(
                    {
                        "event": "request",
                        "method": scope["method"],
                        "path": path,
                        "status": status["code"],
                        "ms": round((time.perf_counter() - started) * 1000, 2),
                    }
                )
            )

    def _entry(self, scope: Scope, path: str, status: int, raw: bytes) -> dict[str, Any]:
        """What reached the wire: method, path, status, the JSON body, and whose token it carried
        (account and session, never the token), so a client check can read the wire."""
        entry: dict[str, Any] = {"method": scope["method"], "path": path, "status": status, "at": self.core.clock.now()}
        if raw:  # kept up to 64 KiB: the transcript holds 10,000 requests, and a Core suite sends oversized bodies on purpose
            try:
                entry["body"] = (
                    json.loads(raw, parse_constant=_not_json, parse_float=_finite)
                    if len(raw) <= TRANSCRIPT_BODY_BYTES
                    else None
                )
            except (
                ValueError,
                RecursionError,
            ):  # not JSON, or nested deeper than the parser goes: recorded without its body
                entry["body"] = None
        auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        ident = self.core.store.identity(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if ident is not None:
            entry["account"], entry["session_id"] = ident.account, ident.session_id
        return entry


def _not_json(constant: str) -> Any:
    """``NaN`` and ``Infinity``, which Python's parser takes and RFC 8259 does not: a body holding
    one is recorded without it, like any other body that is not JSON, so the transcript stays JSON
    every reader can parse (a suite's hostile requests send them on purpose)."""
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    """A number such as ``1e999`` is JSON, but Python reads it as infinity and would write it back
    as ``Infinity``: such a body is recorded without it too."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past a float's range")
    return value


_NO_STORE = (b"cache-control", b"no-store")
_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"
Reply = tuple[int, bytes]
"""A Core endpoint's answer: status and JSON body."""


class Call:
    """What a Core endpoint reads of its request: the body's messages and three headers (each
    header's first value, as Starlette's ``Headers.get``), found in one pass."""

    __slots__ = ("authorization", "content_length", "content_type", "receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.receive = receive
        self.authorization = self.content_type = self.content_length = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                if self.authorization is None:
                    self.authorization = value.decode("latin-1")
            elif name == b"content-type":
                if self.content_type is None:
                    self.content_type = value.decode("latin-1")
            elif name == b"content-length" and self.content_length is None:
                self.content_length = value.decode("latin-1")

    async def json(self, core: Core, check: SchemaCheck) -> dict[str, Any]:
        body = await receive_json(
            self.receive, self.content_type, self.content_length, max_bytes=core.config.max_body_bytes
        )
        return validate(body, check)


Handler = Callable[["CoreEndpoint", Call, Caller], Awaitable[Reply]]


async def _respond(send: Send, status: int, body: bytes, media: bytes = _JSON) -> None:
    """The response Starlette's ``Response`` would send (its content-length and content-type), with
    the one Cache-Control ``NoStore`` gives every response, sent as two ASGI messages."""
    headers = [] if status < 200 or status in (204, 304) else [(b"content-length", str(len(body)).encode("latin-1"))]
    headers += [(b"content-type", media), _NO_STORE]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class CoreEndpoint:
    """One Core endpoint as a plain ASGI app: token and route first, then its handler.

    Reached two ways with the same effect: ``NoStore`` calls ``serve`` directly for a request
    whose path and method are the endpoint's own, and Starlette's router (the route is still
    registered, so another method of its path is a 405 with its Allow header) calls the app. The
    direct way skips the router's matching of each route, Starlette's request and response
    objects and its exception layer, which cost a served read about as much as its own work.
    ``state`` is the app's (its turn lock, store threads and wire names), set once the app exists."""

    def __init__(self, core: Core, handler: Handler, *, knowledge: bool, name: str, stem: str | None = None) -> None:
        self.core, self.handler, self.knowledge, self.name = core, handler, knowledge, name
        self.check = schema_check(stem) if stem is not None else None
        self.state: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.serve(scope, receive, send, scope["path_params"]["route"])

    async def serve(self, scope: Scope, receive: Receive, send: Send, route: str) -> None:
        core = self.core
        canned = core.take_canned(self.name, route)
        if canned is not None:  # an armed respond_next fault (control): the answer a client check needs
            await _drain(receive)  # read, so the transcript records what the client sent
            if canned.text is not None:
                await _respond(send, canned.status, canned.text.encode("utf-8"), _TEXT)
            else:
                await _respond(send, canned.status, dumps(canned.body))
            return
        call = Call(scope, receive)
        try:
            caller, refusal = _looked_up(core.store, lambda: self._admit(call.authorization, route))
            if refusal is not None:
                raise refusal
            status, body = await self.handler(self, call, caller)
        except ApiError as err:
            status, body = err.status, dumps(err.body())
        await _respond(send, status, body)

    def _admit(self, authorization: str | None, route: str) -> tuple[Caller, ApiError | None]:
        core = self.core
        caller = core.authenticate(authorization, route, knowledge_op=self.knowledge)
        return caller, core.legacy_refusal(route) if self.knowledge else None

    def names(self) -> WireNames:
        names: WireNames = self.state.wire_names
        return names


async def _drain(receive: Receive) -> None:
    """Read the request body to its end (Starlette's ``Request.body``, disconnect included)."""
    while True:
        message = await receive()
        if message["type"] == "http.request":
            if not message.get("more_body", False):
                return
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


async def _store_work(endpoint: CoreEndpoint, work: Callable[[], T], *, serial: bool = False) -> T:
    """Run ``work`` (searches, reads, turns: the Core's store work) from one snapshot of the store.

    A concurrent store (``knowledge-sim serve``) runs a search or a read right here on the event
    loop, its lookups answered from memory, unless it turns out long: a search whose ranking is
    neither remembered nor short raises ``WouldBlock`` before ranking (nothing done until then
    has any effect), and the work runs again on a store thread with that thread's own connection,
    so a long search never holds up the event loop or the other requests. Handing every request
    to a thread cost more than a short search itself (some 15% of the CPU time of a search or a
    read served). ``serial`` work (turns, which write) always runs on a store thread and takes the
    app's turn lock first: a turn's replay check and its commit must not interleave with another
    turn's, or two identical turns sent at once could both commit. The single-connection store
    (the in-process simulator) runs everything right here, in request order."""
    store = endpoint.core.store
    if not store.concurrent:
        with store.snapshot():
            return work()
    if not serial:
        try:
            return _looked_up(store, work, inline=True)
        except WouldBlock:
            pass
    turn_lock: threading.Lock = endpoint.state.turn_lock

    def in_snapshot() -> T:
        if serial:
            with turn_lock, store.snapshot():  # the lock first: the snapshot must see the turn before
                return work()
        with store.snapshot():
            return work()

    return await in_store_thread(endpoint.state, in_snapshot)


def _looked_up(store: Store, work: Callable[[], T], *, inline: bool = False) -> T:
    """``work`` right here, in an optimistic snapshot (its lookups from memory, no SQLite at all
    when they are all remembered), again in a plain one if the store moved under it (``Moved``:
    nothing before a snapshot's first read has any effect). ``inline``: a long search raises
    ``WouldBlock`` (simulator.store)."""
    try:
        with store.snapshot(optimistic=True, inline=inline):
            return work()
    except Moved:
        pass
    with store.snapshot(inline=inline):
        return work()


async def _capabilities(endpoint: CoreEndpoint, call: Call, caller: Caller) -> Reply:
    core = endpoint.core
    answer = _looked_up(core.store, lambda: core.capabilities(caller))
    return 200, dumps(endpoint.names().capabilities(answer))


async def _turn(endpoint: CoreEndpoint, call: Call, caller: Caller) -> Reply:
    core = endpoint.core
    assert endpoint.check is not None
    body = await call.json(core, endpoint.check)
    status, raw = await _store_work(endpoint, lambda: core.start_turn(caller, body), serial=True)
    return status, endpoint.names().turn(raw)


async def _search(endpoint: CoreEndpoint, call: Call, caller: Caller) -> Reply:
    core = endpoint.core
    assert endpoint.check is not None
    body = await call.json(core, endpoint.check)
    return 200, dumps(await _store_work(endpoint, lambda: core.search(caller, body)))


async def _read(endpoint: CoreEndpoint, call: Call, caller: Caller) -> Reply:
    core = endpoint.core
    assert endpoint.check is not None
    body = await call.json(core, endpoint.check)
    return 200, dumps(await _store_work(endpoint, lambda: core.read(caller, body)))


async def _not_found(request: Request, exc: Exception) -> Response:
    """An unknown path is 404; a known path asked with another method is 405 with its Allow header
    (a GET of search or read says which method to use instead of "unknown path")."""
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        response = error_response(ApiError(405, "method_not_allowed", f"use {allow or 'another method'}"))
        if allow:
            response.headers["Allow"] = allow
        return response
    return error_response(ApiError(404, "not_found", "unknown path"))


async def _internal(request: Request, exc: Exception) -> Response:
    log.exception("unexpected failure", exc_info=exc)
    return error_response(ApiError(500, "internal_error", "unexpected failure"))


def create_app(config: SimConfig | None = None, **options: Any) -> Starlette:
    """A fresh simulator. ``options`` override fields of ``SimConfig`` (``quirks`` may be any iterable):
    the clean Core and app, with each named quirk's miniature composed around them; ``wire_names``,
    the ``[names.*]`` tables, serves other member names."""
    if "quirks" in options:
        options["quirks"] = parse_quirks(list(options["quirks"]))
    config = SimConfig(**{**(config.__dict__ if config else {}), **options})
    parse_quirks(list(config.quirks))
    wire_names = WireNames(config.wire_names)
    # A seed makes the whole instance reproducible (IDs, tokens, signing key); without one, IDs come
    # from a random seed and the signing key from the operating system's secret source.
    rng = Random(config.seed if config.seed is not None else secrets.randbits(64))
    key_source = (
        None
        if config.seed is None
        else (lambda: hashlib.sha256(f"knowledge-sim signing key {config.seed}".encode()).digest())
    )
    clock = Clock(
        config.clock_start,
        frozen=config.frozen_clock,
        tick=config.clock_tick,
        **({"source": config.clock_source} if config.clock_source else {}),
    )
    store = Store(config.database, rng, key_source=key_source, concurrent=config.concurrent)
    core_class, wrappers = compose(config.quirks)
    core = core_class(config, store, clock)
    transcript = Transcript() if config.control_enabled else None
    if config.demo and not store.routes():
        seed_demo(core)
    endpoints = [
        CoreEndpoint(core, _capabilities, knowledge=True, name="capabilities"),
        CoreEndpoint(core, _search, knowledge=True, name="search", stem="search-request"),
        CoreEndpoint(core, _read, knowledge=True, name="read", stem="read-request"),
        CoreEndpoint(core, _turn, knowledge=False, name="turns", stem="turn-request"),
    ]
    core_routes = [
        Route(f"{BASE}/knowledge/capabilities", endpoints[0], methods=["GET"]),
        Route(f"{BASE}/knowledge/search", endpoints[1], methods=["POST"]),
        Route(f"{BASE}/knowledge/read", endpoints[2], methods=["POST"]),
        Route(f"{BASE}/turns", endpoints[3], methods=["POST"]),
    ]
    routes: list[Route | Mount] = list(core_routes)
    # The search_knowledge tool of seed 003: its Knowledge service route, called by the MCP path.
    sk_tool = sk_class(config.quirks)(store, SkState(embedder_for(config.embedder)))
    routes.append(tool_route(core, sk_tool))
    holder: dict[str, Starlette] = {}
    # The Agent Session MCP path (streamable HTTP) beside the Core API: its Core requests come back through this app.
    security = security_for(config.quirks, transport_security(config.mcp_allowed_hosts, config.mcp_allowed_origins))
    routes.append(Route(MCP_PATH, mount(lambda: holder["app"], agent_class(config.quirks), security)))
    if config.control_enabled:
        routes.extend(sk_control_routes(core, sk_tool))
        assert transcript is not None
        routes.append(Mount("/_control/v1", routes=control_routes(core, transcript, on_corpus=sk_tool.state.forget)))
    observed = transcript is not None or log.isEnabledFor(logging.INFO)
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _not_found, Exception: _internal},
        # Miniatures sit between the transcript (what the client saw) and the clean app.
        # Observe only when it has something to do (no transcript nor request log: nothing to observe).
        middleware=[
            *([Middleware(Observe, core=core, transcript=transcript)] if observed else []),
            *(Middleware(w, core=core) for w in wrappers),
            Middleware(
                NoStore,
                direct=[(r.path_regex, r.methods or set(), e) for r, e in zip(core_routes, endpoints, strict=True)],
            ),
        ],
    )
    app.state.core = core
    app.state.turn_lock = threading.Lock()
    app.state.store_threads = config.store_threads
    app.state.wire_names = wire_names
    app.state.search_knowledge = sk_tool
    for endpoint in endpoints:
        endpoint.state = app.state
    holder["app"] = app
    return app
