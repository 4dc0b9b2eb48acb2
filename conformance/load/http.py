"""The suite's wire clients over Locust's HTTP session.

An ``httpx`` transport that sends each request through a Locust ``HttpSession``: Locust
counts and times every request (per operation, whatever the route), and the suite's own
``CoreWire`` and checks, written for ``httpx``, run unchanged under load. A 5xx or a
dropped connection is a failure in Locust's statistics; whether an answer keeps the
contract is for the checks to say, per requirement."""

from __future__ import annotations

import re
from typing import Any

import httpx

_OPERATION = re.compile(r"/workspaces/[^/]+/(?P<op>.+)$")
_DROPPED = frozenset({"host", "content-length", "connection", "accept-encoding", "transfer-encoding"})
ATTEMPTS = 2  # a request the server never read (a closed kept-alive connection) goes out once more
_NOT_PASSED_ON = frozenset({"content-encoding", "content-length", "transfer-encoding"})  # requests has decoded the body


def operation_name(path: str) -> str:
    """``knowledge/read``: one row of Locust's statistics per operation, not per route."""
    found = _OPERATION.search(path)
    return found["op"] if found else path


class LocustTransport(httpx.BaseTransport):
    """Sends through ``session`` (a ``locust.clients.HttpSession``, or anything with its ``request``)."""

    def __init__(self, session: Any, timeout: float = 30.0) -> None:
        self.session = session
        self.timeout = timeout

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        name = operation_name(request.url.path)
        for attempt in range(ATTEMPTS):
            with self.session.request(
                request.method,
                str(request.url),
                name=name,
                data=body or None,
                headers=headers,
                catch_response=True,
                timeout=self.timeout,
                allow_redirects=False,
            ) as answer:
                status = int(answer.status_code or 0)
                if status == 0:  # no answer: counted as a failure by Locust, and sent once more
                    error = getattr(answer, "error", None)
                    answer.failure(f"no answer: {error}")
                    if attempt + 1 < ATTEMPTS and _stale(error):
                        continue
                    raise httpx.ConnectError(f"no answer from the target: {error}", request=request)
                if status >= 500:
                    answer.failure(f"HTTP {status}")
                else:
                    answer.success()
                kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _NOT_PASSED_ON]
                return httpx.Response(status, headers=kept, content=answer.content or b"", request=request)
        raise AssertionError("unreachable")


def _stale(error: object) -> bool:
    """A kept-alive connection the server closed just as the request went out (its idle timeout).
    Sending once more is safe here: search and read change nothing, and a turn is idempotent by its key."""
    text = repr(error)
    return any(
        sign in text for sign in ("RemoteDisconnected", "ConnectionResetError", "BrokenPipeError", "Connection aborted")
    )
