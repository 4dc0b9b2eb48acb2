"""The Core of a client run: what reached it, read through its control extension.

By default a bundled simulator is served as a subprocess (conformance.common.served: this
package never imports it); ``--harness-core URL`` uses any Core that offers the control
extension (conformance.common.control). Everything a client check reads about the wire comes
from GET /transcript: method, path, status, JSON body, and the account of the token.
"""

from __future__ import annotations

from typing import Any

from conformance.common.control import Control

DEFAULT_CONTROL_TOKEN = "sim-control-token"  # the bundled simulator's loopback-only default
API = "/agent-api/v1/workspaces/{route}"


class Wire:
    """What reached the Core on some routes: the transcript, read through control. A mark is the
    number of those routes' entries so far (routes are the run's own, so other users of a shared
    Core never shift it)."""

    def __init__(self, control: Control) -> None:
        self.control = control

    def _of(self, routes: tuple[str, ...]) -> list[dict[str, Any]]:
        prefixes = tuple(API.format(route=r) + "/" for r in routes)
        return [e for e in self.control.transcript() if str(e["path"]).startswith(prefixes)]

    def mark(self, *routes: str) -> int:
        return len(self._of(routes))

    def since(self, mark: int, *routes: str) -> list[dict[str, Any]]:
        return self._of(routes)[mark:]
