"""One exchange as the rules read it: its operation, route and caller, its bodies as JSON, and the
answer as an ``httpx.Response`` so the suite's checks (``conformance.server.checks``) read it as
they read a live one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from conformance.common.transport import MalformedJSON, operation_of, strict_json
from conformance.observe.seen import Seen
from conformance.observe.traffic import Caller

OPERATIONS = ("capabilities", "turn", "search", "read")


def route_of(path: str, paths: dict[str, Any]) -> str | None:
    """The workspace a request addresses, read with the configured path templates."""
    for key in ("capabilities", "search", "read", "turns"):
        template = str(paths.get(key, ""))
        if "{route}" not in template:
            continue
        pattern = re.escape(template).replace(re.escape("{route}"), "([^/]+)")
        found = re.fullmatch(pattern, path)
        if found:
            return found.group(1)
    return None


def json_of(data: bytes) -> Any:
    """A body's JSON, read strictly; None when it is not JSON the suite can judge."""
    if not data:
        return None
    try:
        return strict_json(data)
    except (MalformedJSON, ValueError):
        return None


@dataclass
class Observed:
    seen: Seen
    operation: str
    route: str
    caller: Caller
    label: str | None  # the caller's name in reports
    _request: Any = field(default=None, repr=False)
    _parsed: bool = False

    @classmethod
    def of(cls, seen: Seen, paths: dict[str, Any], caller_of: Any) -> Observed | None:
        """The view of ``seen`` when it is one of the contract's requests, else None."""
        operation = operation_of(seen.path, paths)
        route = route_of(seen.path, paths)
        if operation not in OPERATIONS or route is None:
            return None
        caller, label = caller_of(seen.credential, route)
        return cls(seen, operation, route, caller, label)

    @property
    def request(self) -> Any:
        """The request's JSON (None when it has none, or none the rules can read)."""
        if not self._parsed:
            body = self.seen.request
            self._request = json_of(body.data) if body.complete else None
            self._parsed = True
        return self._request

    def field(self, name: str) -> Any:
        request = self.request
        return request.get(name) if isinstance(request, dict) else None

    @property
    def status(self) -> int:
        return self.seen.status

    @property
    def readable(self) -> bool:
        """Whether the whole answer was kept, so its JSON can be judged."""
        return self.seen.response.complete and self.seen.response.broken is None

    def response(self) -> httpx.Response:
        """The answer as the checks read a live one (its bytes as decoded)."""
        headers = [(k, v) for k, v in self.seen.headers if k != "content-encoding"]
        return httpx.Response(self.seen.status, content=self.seen.response.data, headers=headers)

    def answer(self) -> Any:
        """The answer's JSON, or None."""
        return json_of(self.seen.response.data) if self.readable else None
