"""Pre-flight of a live target, before any test: the base URL answers, and every configured
identity can use its route. What is clearly setup (a token or route the Core refuses, a route it
does not know, a base URL that serves a web page, a probe query that finds nothing) is a usage
error (exit 4) naming the identity and what to fix. A target that accepts the connection and
never answers stops the run as a harness error (exit 7), one line. Anything else a Core
answers is left to the tests, which judge it by the rules: a server's failure is never exit 4."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn

import httpx
import pytest

from conformance.common import fanout
from conformance.common.config import TargetConfig, redact_url
from conformance.common.exits import Exit
from conformance.common.settings import RunSettings
from conformance.common.transport import RateLimiter, auth_headers, bounded_client, broken, sent_while_refused
from conformance.common.untrusted import one_line
from conformance.plugin.preflight import PREFLIGHT, answers_json, plain_http_problem, usage_error

PREFLIGHT_TIMEOUT = 10.0
"""At most this many seconds for each pre-flight request (less when [target].timeout_seconds is less)."""
ROUTE_UNKNOWN = {404: frozenset({"route_unavailable"}), 400: frozenset({"invalid_route"})}
"""Statuses and codes by which a Core says it knows no such route (the vendor's conventions)."""
REFUSED = (401, 403)


def stop(message: str) -> NoReturn:
    """The run stops before any test as a harness error: one line, exit 7."""
    pytest.exit(one_line(f"harness error: {message}"), returncode=Exit.HARNESS_ERROR)


def _looks_like_html(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").lower()
    head = response.content[:512].lstrip().lower()
    return "html" in kind or head.startswith((b"<!doctype", b"<html", b"<"))


def _code(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


class Preflight:
    """The pre-flight requests of one live run: one client, the configured auth header, the
    rate limit honoured, no request recorded in a report."""

    def __init__(self, cfg: TargetConfig, settings: RunSettings) -> None:
        self.cfg = cfg
        self.settings = settings
        self.where = f"--target {redact_url(cfg.target)}"
        url = httpx.URL(cfg.target).copy_with(username=None, password=None)
        self.http = bounded_client(min(cfg.timeout_seconds, PREFLIGHT_TIMEOUT), cfg.max_response_bytes, base_url=url)
        self.limiter = RateLimiter(settings.rate_limit)
        self.base_status = 0
        self._counting = threading.Lock()

    def close(self) -> None:
        self.http.close()
        PREFLIGHT.refusals += self.limiter.refusals
        PREFLIGHT.paused += self.limiter.paused

    def request(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        """One pre-flight request; a 429 is waited out and sent again, as the tests' requests are
        (conformance.common.transport.Backoff)."""
        self.limiter.wait()
        # A 429 still answered is returned: the tests meet the Core's limit then, each not verified.
        return sent_while_refused(lambda: self._send(method, path, token, **kw), self.limiter)[0]

    def _send(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = auth_headers(self.cfg.wire["auth"], token or None)
        with self._counting:
            PREFLIGHT.requests += 1
        try:
            with fanout.in_flight():
                return self.http.request(method, path, headers=headers, **kw)
        except httpx.TimeoutException as exc:
            stop(
                f"{self.where} accepted the connection but {method} {path} got no answer within "
                f"{self.http.timeout.read:g} s ({type(exc).__name__}); is the Core up and answering?"
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            problem = plain_http_problem(self.where, self.http.base_url, exc)
            usage_error(problem or f"{self.where}: cannot reach it ({type(exc).__name__}: {exc})")

    def run(self) -> None:
        base = self.request("GET", "/")
        self.base_status = base.status_code
        if self.cfg.control_url is not None:
            return  # worlds are provisioned and identities minted through control: none configured is used
        html_base = (
            broken(base) is None and not answers_json(base) and base.status_code < 500 and base.status_code != 429
        )
        checks: list[Callable[[], None]] = [
            partial(self.identity, name, who.token, who.route, html_base=html_base)
            for name, who in self.cfg.identities.items()
        ]
        primary = self.cfg.identities.get("primary")
        if primary is not None:
            checks.append(partial(self.target_route, primary, html_base=html_base))
        # Side by side (a Core far away costs a round trip each); a mistake is reported as the
        # first in this order, as one at a time would. The probe (a turn, then a search) only
        # once every identity and the route passed: a turn on a Core set up wrong helps no one,
        # and a Core slow to answer it would hold back the one line that says what to fix.
        fanout.each(lambda check: check(), checks)
        if primary is not None:
            self.probe(primary.token, primary.route)

    def target_route(self, primary: Any, *, html_base: bool) -> None:
        """``[target] route`` checked like an identity's (with the primary token) when no identity
        is on it: the tests use it for the shared world, so a typo there would fail them one by one
        on 404 route_unavailable instead of stopping here."""
        route = self.cfg.route
        if route and route not in {who.route for who in self.cfg.identities.values()}:
            fix = f"[target] route {route!r} (tried with [identities.{primary.name}])"
            self.identity(primary.name, primary.token, route, html_base=html_base, fix=fix, key="[target] route")

    def identity(self, name: str, token: str, route: str, *, html_base: bool, fix: str = "", key: str = "") -> None:
        """One capabilities call with the identity's token on its route: a refusal or an unknown
        route is setup; every other answer (even a wrong one) is for the tests to judge.
        ``fix`` and ``key`` name the setting at fault when it is not the identity's own."""
        response = self.request("GET", self.cfg.path("capabilities", route), token)
        if broken(response) is not None or response.status_code == 429:
            return  # too large, undecodable, or still rate limited: for the tests to judge, not setup
        status, code = response.status_code, _code(response)
        fix = fix or f"[identities.{name}] (route {route!r})"
        if html_base and status < 500 and not answers_json(response):
            what = "a web page (HTML)" if _looks_like_html(response) else "no JSON"
            usage_error(
                f"{self.where}: serves {what}, not the Agent API: GET / answered HTTP {self.base_status} and the "
                f"capabilities endpoint of route {route!r} HTTP {status}, both without JSON; give the Core's base URL, "
                f"below which {self.cfg.path('capabilities', '{route}')} is served"
            )
        if status in REFUSED:
            usage_error(
                f"{fix}: the Core refused this identity's token on its route (HTTP {status}"
                f"{' ' + code if code else ''}); check the token, and that this identity may use route {route!r}"
            )
        if code in ROUTE_UNKNOWN.get(status, frozenset()):
            usage_error(
                f"{fix}: the Core knows no workspace at route {route!r} (HTTP {status} {code}); "
                f"check {key or f'the route in [target] or [identities.{name}]'}"
            )

    def probe(self, token: str, route: str) -> None:
        """The probe query on the primary identity's route: one turn, one search. Finding nothing
        is setup (most checks need a reference to read); a turn or search the Core refuses or
        answers wrongly is left to the tests."""
        n = f"{self.settings.namespace}-preflight"
        body = {
            "client_conversation_id": f"conv-{n}",
            "client_turn_id": f"turn-{n}",
            "user_message_id": f"msg-{n}",
            "user_input": self.cfg.probe_query,
            "knowledge_delivery": "on_demand",
        }
        turn = self.request("POST", self.cfg.path("turns", route), token, json=body)
        started: Any = turn.json() if turn.status_code == 200 and answers_json(turn) else None
        run_id = started.get("run_id") if isinstance(started, dict) else None
        if not isinstance(run_id, str):
            return
        query = self.cfg.probe_query
        found = self.request("POST", self.cfg.path("search", route), token, json={"query": query, "run_id": run_id})
        answer: Any = found.json() if found.status_code == 200 and answers_json(found) else None
        if not isinstance(answer, dict):
            return
        status, hints = answer.get("status"), answer.get("hints")
        if status in ("ok", "partial", "disabled") and hints == []:
            usage_error(
                f"[target].probe_query {query!r} finds nothing on route {route!r} (search status {status!r}, no hints); "
                "set it to a query that finds documents in that workspace"
                + (" (knowledge is disabled there)" if status == "disabled" else "")
            )


def _fingerprint(cfg: TargetConfig) -> tuple[Any, ...]:
    """What a pre-flight's verdict depends on: the same configuration passes the same way."""
    who = tuple(sorted((n, str(i.token), i.route) for n, i in cfg.identities.items()))
    return ("target", cfg.target, cfg.route, cfg.probe_query, cfg.control_url, who)


def check_live_target(cfg: TargetConfig, settings: RunSettings) -> None:
    """The whole pre-flight of a live target (see the module's docstring), once a process: the
    command line runs it before pytest starts (a setup mistake in a second, not after the imports),
    and the session's own call then finds it passed."""
    key = _fingerprint(cfg)
    if key in PREFLIGHT.passed:
        return
    preflight = Preflight(cfg, settings)
    try:
        preflight.run()
    finally:
        preflight.close()
    PREFLIGHT.passed.add(key)


def check_mcp_url(cfg: Any, chosen: str | None) -> None:
    """One ``initialize`` at the streamable-HTTP MCP URL the run will check (``--mcp-target`` or
    ``[mcp] url``, ``{route}`` as the target's route), before any test: a URL that cannot be
    reached or serves a web page is a usage error, one that takes the connection and never
    answers a harness error, each in one line. A URL given by mistake had been judged as an MCP
    server that broke MCP-001, MCP-012 and SK-009, or held the run ten minutes. Whatever else
    it answers (a refusal without a token, a JSON-RPC error) is left to the tests to judge."""
    from conformance.mcp import raw
    from conformance.mcp.endpoints import on_route, skipped

    if skipped(chosen):
        return
    given = chosen if chosen and chosen.startswith(("http://", "https://")) else None
    template = given or (None if chosen else cfg.mcp.get("url"))
    if not template:
        return
    url = on_route(str(template), cfg.route)
    key = ("mcp", url)
    if key in PREFLIGHT.passed:
        return
    where = f"{'--mcp-target' if given else '[mcp] url'} {redact_url(url)}"
    seconds = cfg.timeout_seconds  # the tests' own bound: a slow but conformant server is never stopped here
    PREFLIGHT.requests += 1
    try:
        answer = raw.initialize(url, seconds)
    except httpx.TimeoutException:
        stop(f"{where} took the connection and did not answer initialize within {seconds:g} s")
    except httpx.HTTPError as exc:
        usage_error(f"{where}: cannot reach it ({type(exc).__name__}: {exc})")
    if answer.html:
        usage_error(f"{where} serves a web page (HTML), not an MCP endpoint: check the URL")
    PREFLIGHT.passed.add(key)
