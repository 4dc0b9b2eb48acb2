"""HTTP plumbing: an in-process ASGI transport for sync tests, a rate limit, a watchdog that
stops a run against a target that no longer answers, and a recorder that keeps every exchange
(secrets redacted) for the reports."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from conformance.target.outcomes import HarnessError
from conformance.target.secrets import SECRETS, clip, scrub

REDACTED = "Bearer ***"
BODY_KEEP = 2048


class InProcessTransport(httpx.BaseTransport):
    """Runs an ASGI app on a private event loop through ``httpx.ASGITransport``: no sockets."""

    def __init__(self, app: Any) -> None:
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def send() -> httpx.Response:
            inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
            response = await self._asgi.handle_async_request(inner)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)

        with self._lock:
            return self._loop.run_until_complete(send())

    def close(self) -> None:
        self._loop.close()


UNREGISTERED = "unregistered"
"""The identity of a credential no identity of the run holds (one a test made up or altered)."""


class Identities:
    """The name of every credential the run uses, by its value: a configured identity's name
    (``primary``, ``other_route``, ...) or, for a token minted outside a world, the account it was
    minted for. A curl reproduction names whose request it was, never the credential itself."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def name(self, token: str | None, name: str) -> None:
        if token:
            with self._lock:
                self._names[token] = name

    def of(self, token: str) -> str | None:
        with self._lock:
            return self._names.get(token)


IDENTITIES = Identities()


def token_variable(identity: str) -> str:
    """The environment variable a reproduction reads the identity's token from: ``CORE_TOKEN_PRIMARY``."""
    return "CORE_TOKEN_" + re.sub(r"[^A-Z0-9]+", "_", identity.upper()).strip("_")


OPERATIONS = {"capabilities": "capabilities", "turns": "turn", "search": "search", "read": "read"}
"""The Core's operations by their key in ``[wire.paths]``, named as the catalogue's ``observe.via`` names them."""


def operation_of(path: str, paths: Mapping[str, str]) -> str:
    """Which Core operation a request path is (``search``, ``read``, ...), or ``other``."""
    bare = path.split("?", 1)[0]
    for key, operation in OPERATIONS.items():
        template = paths.get(key)
        if template and re.fullmatch(re.escape(template).replace(re.escape("{route}"), "[^/]+"), bare):
            return operation
    return "other"


TIMEOUTS_IN_A_ROW = 3
"""Transport timeouts in a row after which the target is taken to have stopped answering: every
later request fails at once, and the run stops as a harness error (never hours of waiting)."""


class TargetUnresponsive(HarnessError):
    """The target let several requests in a row time out: the suite can judge nothing more."""


class Watchdog(httpx.BaseTransport):
    """Wraps a transport and counts transport timeouts in a row (any answer resets the count).

    Once ``limit`` requests in a row have timed out it trips: that request and every later one
    raise :class:`TargetUnresponsive` at once, with one line saying what happened."""

    def __init__(self, inner: httpx.BaseTransport, timeout_seconds: float, limit: int = TIMEOUTS_IN_A_ROW) -> None:
        self._inner = inner
        self._timeout = timeout_seconds
        self._limit = limit
        self._lock = threading.Lock()
        self._in_a_row = 0
        self._first: str | None = None  # the first request of the streak: where a hang began
        self.tripped: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.tripped is not None:
            raise TargetUnresponsive(self.tripped)
        try:
            response = self._inner.handle_request(request)
        except httpx.TimeoutException as exc:
            with self._lock:
                self._in_a_row += 1
                if self._first is None:
                    self._first = f"{request.method} {scrub(request.url.path)}"
                if self._in_a_row >= self._limit and self.tripped is None:
                    self.tripped = (
                        f"the target did not answer {self._in_a_row} requests in a row within {self._timeout:g} s "
                        f"(first: {self._first}; last: {request.method} {scrub(request.url.path)}, "
                        f"{type(exc).__name__}); the run stopped. The seeds set no time bound, so this names no "
                        "rule: the Core hung on the first of them, or the network to it is down"
                    )
                tripped = self.tripped
            if tripped is not None:
                raise TargetUnresponsive(tripped) from None
            raise
        with self._lock:
            self._in_a_row, self._first = 0, None
        return response

    def close(self) -> None:
        self._inner.close()


@dataclass
class Exchange:
    method: str
    path: str
    request_body: str
    status: int
    response_body: str
    headers: dict[str, str] = field(default_factory=dict)
    identity: str | None = None  # whose credential it carried (see Identities); None: it carried none
    operation: str = "other"  # capabilities | turn | search | read | other
    judged: int = 0  # the order in which checks last read this response (0: none did); see judged()

    def curl(self, base_url: str, auth_header: str = "Authorization", auth_scheme: str = "Bearer") -> str:
        """A reproduction naming its identity: the credential is read from ``$CORE_TOKEN_<IDENTITY>``
        (never written out), in the target's own auth header; a request sent without one has none."""
        data = (
            f" -H 'Content-Type: application/json' --data-binary @- <<'JSON'\n{self.request_body}\nJSON"
            if self.request_body
            else ""
        )
        if self.identity is None:
            who, credential = "# identity: none (sent without a credential)", ""
        else:
            note = " (a credential no identity of the run holds)" if self.identity == UNREGISTERED else ""
            who = f"# identity: {self.identity}{note}"
            credential = f' -H "{auth_header}: {f"{auth_scheme} ${token_variable(self.identity)}".strip()}"'
        return f"{who}\ncurl -sS -X {self.method} '{base_url.rstrip('/')}{self.path}'{credential}{data}"

    def evidence(self, base_url: str, auth: Mapping[str, str], *, judged: bool = False) -> dict[str, Any]:
        """The exchange as results.json keeps it, with its curl line."""
        kept = {k: v for k, v in asdict(self).items() if k != "judged"}
        return {**kept, "judged": judged, "curl": self.curl(base_url, auth["header"], auth["scheme"])}


JUDGED = "kc_exchange"
"""The key under which a recorded response's extensions hold its Exchange."""
_judgements = itertools.count(1)


def judged(response: object) -> None:
    """A check is reading ``response``: if a failure follows, the report shows this exchange."""
    extensions = getattr(response, "extensions", None)
    exchange = extensions.get(JUDGED) if isinstance(extensions, dict) else None
    if isinstance(exchange, Exchange):
        exchange.judged = next(_judgements)


def _shorten(raw: bytes) -> str:
    """A body for a report: cut on a character boundary, with the size it had."""
    head = raw[: BODY_KEEP * 4].decode("utf-8", "replace")
    if len(raw) > BODY_KEEP:
        return clip(head, BODY_KEEP) + f"… ({len(raw)} bytes in all)"  # scrubbed before the cut
    text = scrub(head)
    if len(text.encode("utf-8")) == len(raw):
        return text
    return text[:BODY_KEEP] + f"… ({len(raw)} bytes in all)"


class Recorder:
    """Counts requests (the per-run figure) and keeps the current test's exchanges."""

    def __init__(
        self,
        rate_limit: float = 0.0,
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        paths: Mapping[str, str] | None = None,
    ) -> None:
        self.count = 0
        self.auth_header = auth_header.lower()
        self.auth_scheme = auth_scheme
        self.paths: Mapping[str, str] = paths or {}
        self.current: list[Exchange] = []
        self._min_gap = 1.0 / rate_limit if rate_limit > 0 else 0.0
        self._last = 0.0

    def throttle(self) -> None:
        if self._min_gap:
            wait = self._last + self._min_gap - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last = time.monotonic()

    def record(self, response: httpx.Response) -> None:
        self.count += 1
        request = response.request
        if request.extensions.get("kc_control"):
            return  # control exchanges carry credentials and minted tokens: never kept for reports
        scrub = SECRETS.text  # a Core may echo a token anywhere: bodies, paths, headers
        path = scrub(request.url.raw_path.decode("ascii", "replace"))
        exchange = Exchange(
            method=request.method,
            path=path,
            request_body=_shorten(request.content),
            status=response.status_code,
            response_body=_shorten(response.content),
            # The credential header is kept, redacted, under its usual name whatever the target calls it.
            headers={
                ("authorization" if k.lower() == self.auth_header else k.lower()): (
                    REDACTED if k.lower() == self.auth_header else scrub(v)
                )
                for k, v in request.headers.items()
                if k.lower() in (self.auth_header, "content-type")
            },
            identity=self._identity(request.headers.get(self.auth_header)),
            operation=operation_of(path, self.paths),
        )
        response.extensions[JUDGED] = exchange
        self.current.append(exchange)

    def _identity(self, header: str | None) -> str | None:
        if header is None:
            return None
        scheme = f"{self.auth_scheme} " if self.auth_scheme else ""
        token = header[len(scheme) :] if header.startswith(scheme) else header
        return IDENTITIES.of(token.strip()) or UNREGISTERED

    def evidence(
        self, base_url: str, auth: Mapping[str, str], via: str | None, *, keep: int = 4
    ) -> list[dict[str, Any]]:
        """A failure's exchanges: the test's last ``keep``, and the one its failing check judged
        (marked ``judged``; kept even when older than those), see :func:`judged_exchange`."""
        chosen = judged_exchange(self.current, via)
        kept = self.current[-keep:]
        if chosen is not None and not any(e is chosen for e in kept):
            kept = [chosen, *kept[1:]]
        return [e.evidence(base_url, auth, judged=e is chosen) for e in kept]


HTTP_OPERATIONS = frozenset(OPERATIONS.values())


def judged_exchange(exchanges: list[Exchange], via: str | None) -> Exchange | None:
    """The request the failing check judged: among the test's exchanges of the operation that
    shows the violated rule (its catalogue ``observe.via``; any operation when it names none of
    the Core's), the one a check read last, else the last one. A rule shown on the MCP path or
    by the tool was judged on an MCP answer, not on a recorded HTTP exchange: none is chosen."""
    if via in ("mcp", "tool"):
        return None
    mine = exchanges
    if via in HTTP_OPERATIONS:
        mine = [e for e in exchanges if e.operation == via] or exchanges
    if not mine:
        return None
    read = [e for e in mine if e.judged]
    return max(read, key=lambda e: e.judged) if read else mine[-1]
