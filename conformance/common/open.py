"""Open the target: the bundled simulator in-process or over loopback, or a live URL."""

from __future__ import annotations

import functools
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import httpx

from conformance.common.config import ConfigError, Secret, TargetConfig, redact_url
from conformance.common.secrets import SECRETS
from conformance.common.settings import RunSettings
from conformance.common.transport import (
    Backoff,
    BoundedTransport,
    InFlight,
    InProcessTransport,
    RateLimiter,
    Recorder,
    Watchdog,
)

ENTRY_POINT_GROUP = "knowledge_conformance.targets"
NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
"""Without it, a request written in two segments waits for a delayed ACK: about 40 ms each."""


def _http_client(base_url: str, cfg: TargetConfig, hooks: dict[str, list[Any]], limiter: RateLimiter) -> httpx.Client:
    """Every request bounded in time (``timeout_seconds`` for the whole of it) and memory
    (``max_response_bytes`` of body after decoding): the target may be hostile or broken.
    User-info in the URL is dropped: httpx would turn it into Basic auth and replace the
    configured credential header, and the suite would report the Core's 401 as its failure.
    A 429 is waited out and sent again (``Backoff``), as the Core's rate limit asks."""
    bounded = BoundedTransport(cfg.timeout_seconds, cfg.max_response_bytes, socket_options=NO_DELAY)
    transport = Backoff(InFlight(Watchdog(bounded, cfg.timeout_seconds)), limiter)
    url = httpx.URL(base_url).copy_with(username=None, password=None)
    return httpx.Client(base_url=url, transport=transport, event_hooks=hooks, timeout=cfg.timeout_seconds)


@dataclass
class Target:
    """An open target: one HTTP client for the whole run, optional control, and the settings it was opened with."""

    base_url: str
    http: httpx.Client
    recorder: Recorder
    control_url: str | None
    control_token: Secret | None
    _closers: tuple[Any, ...] = ()
    app: Any = None  # the bundled simulator's ASGI app (sim targets only): its MCP path is served beside it
    settings: RunSettings = field(default_factory=RunSettings)
    _loopback_url: str | None = None

    def loopback_url(self) -> str:
        """The target over loopback HTTP: its own URL, or (in-process) its app served beside it until ``close``."""
        if not self.base_url.startswith("http://sim.local"):
            return self.base_url
        if self._loopback_url is None:
            self._loopback_url, stop = serve_over_loopback(self.app)
            self._closers = (*self._closers, stop)
        return self._loopback_url

    @property
    def has_control(self) -> bool:
        return self.control_url is not None and self.control_token is not None

    def close(self) -> None:
        self.http.close()
        for closer in self._closers:
            closer()


@functools.cache
def factory(name: str = "sim") -> Any:
    """An object the bundled simulator offers through the targets entry point group (never imported
    by name). Looked up once a process: the lookup reads every installed distribution's metadata,
    and a run asks for the MCP endpoints' factory in dozens of tests (3% of a default run)."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise ConfigError(
            f"no target named {name!r} in entry point group {ENTRY_POINT_GROUP}; is the simulator installed?"
        )
    return found[0].load()


def known_quirks(name: str = "sim") -> frozenset[str] | None:
    """The quirk names a bundled target knows (entry point ``<name>.quirks`` of the same group),
    or None when the installed target does not say (then the target itself refuses unknown ones)."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == f"{name}.quirks"]
    if not found:
        return None
    return frozenset(str(q) for q in found[0].load()())


def serve_over_loopback(app: Any) -> tuple[str, Any]:
    """Serve an ASGI app on a free loopback port in a thread; returns its URL and a stop function."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # No WebSocket protocol: nothing here speaks it, and choosing one imports a library each run.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(5)
        sock.close()

    return f"http://127.0.0.1:{port}", stop


def describe(cfg: TargetConfig) -> str:
    """The target as a run's header line and its reports name it (credentials redacted)."""
    if cfg.target == "sim":
        return "bundled simulator (in-process)"
    if cfg.target == "sim+http":
        return "bundled simulator (loopback HTTP)"
    return f"live Core at {redact_url(cfg.target)}"


def open_target(cfg: TargetConfig, settings: RunSettings) -> Target:
    auth = cfg.wire["auth"]
    recorder = Recorder(settings.rate_limit, str(auth["header"]), str(auth["scheme"]), cfg.wire["paths"])

    def on_response(response: httpx.Response) -> None:
        response.read()
        recorder.record(response)

    def hooks() -> dict[str, list[Any]]:
        return {"request": [lambda _r: recorder.throttle()], "response": [on_response]}

    if cfg.is_sim:
        token = Secret(secrets.token_hex(16))
        SECRETS.add(str(token))
        app = factory()(
            quirks=list(settings.sim_quirks),
            seed=settings.sim_seed,
            control_token=str(token),
            demo=False,
            clock_tick=settings.sim_clock_tick,
        )
        if cfg.target == "sim":
            transport = InProcessTransport(app)
            http = httpx.Client(
                transport=transport, base_url="http://sim.local", event_hooks=hooks(), timeout=cfg.timeout_seconds
            )
            return Target(
                "http://sim.local",
                http,
                recorder,
                "http://sim.local" + cfg.wire["paths"]["control_base"],
                token,
                (transport.close,),
                app,
                settings,
            )
        url, stop = serve_over_loopback(app)
        http = _http_client(url, cfg, hooks(), recorder.limiter)
        return Target(
            url,
            http,
            recorder,
            url + cfg.wire["paths"]["control_base"],
            token,
            (stop,),
            app,
            settings,
        )
    http = _http_client(cfg.target, cfg, hooks(), recorder.limiter)
    return Target(cfg.target, http, recorder, cfg.control_url, cfg.control_token, settings=settings)
