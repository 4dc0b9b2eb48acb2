"""HTTP plumbing: an in-process ASGI transport for sync tests, a rate limit, a watchdog that
stops a run against a target that no longer answers, and a recorder that keeps every exchange
(secrets redacted) for the reports."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from conformance.target.outcomes import HarnessError
from conformance.target.secrets import SECRETS, scrub

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
        self.tripped: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.tripped is not None:
            raise TargetUnresponsive(self.tripped)
        try:
            response = self._inner.handle_request(request)
        except httpx.TimeoutException as exc:
            with self._lock:
                self._in_a_row += 1
                if self._in_a_row >= self._limit and self.tripped is None:
                    self.tripped = (
                        f"the target did not answer {self._in_a_row} requests in a row within {self._timeout:g} s "
                        f"(last: {request.method} {scrub(request.url.path)}, {type(exc).__name__}); the run stopped"
                    )
                tripped = self.tripped
            if tripped is not None:
                raise TargetUnresponsive(tripped) from None
            raise
        with self._lock:
            self._in_a_row = 0
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

    def curl(self, base_url: str, auth_header: str = "Authorization", auth_scheme: str = "Bearer") -> str:
        """A reproduction with the credential left to the reader (``$TOKEN``), in the target's own auth header."""
        data = (
            f" -H 'Content-Type: application/json' --data-binary @- <<'JSON'\n{self.request_body}\nJSON"
            if self.request_body
            else ""
        )
        credential = f"{auth_scheme} $TOKEN".strip()
        return f"curl -sS -X {self.method} '{base_url.rstrip('/')}{self.path}' -H '{auth_header}: {credential}'{data}"


def _shorten(raw: bytes) -> str:
    """A body for a report: cut on a character boundary, with the size it had."""
    text = scrub(raw[: BODY_KEEP * 4].decode("utf-8", "replace"))  # before the cut: no part of a secret survives it
    if len(raw) <= BODY_KEEP and len(text.encode("utf-8")) == len(raw):
        return text
    return text[:BODY_KEEP] + f"… ({len(raw)} bytes in all)"


class Recorder:
    """Counts requests (the per-run figure) and keeps the current test's exchanges."""

    def __init__(self, rate_limit: float = 0.0, auth_header: str = "Authorization") -> None:
        self.count = 0
        self.auth_header = auth_header.lower()
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
        self.current.append(
            Exchange(
                method=request.method,
                path=scrub(request.url.raw_path.decode("ascii", "replace")),
                request_body=scrub(_shorten(request.content)),
                status=response.status_code,
                response_body=scrub(_shorten(response.content)),
                # The credential header is kept, redacted, under its usual name whatever the target calls it.
                headers={
                    ("authorization" if k.lower() == self.auth_header else k.lower()): (
                        REDACTED if k.lower() == self.auth_header else scrub(v)
                    )
                    for k, v in request.headers.items()
                    if k.lower() in (self.auth_header, "content-type")
                },
            )
        )
