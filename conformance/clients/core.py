"""The Core of a client run and its control extension (schemas/control-openapi.yaml).

By default a bundled simulator is served as a subprocess (``knowledge-sim serve`` on a
free loopback port: this package never imports it); ``--harness-core URL`` uses any Core
that offers the control extension. Everything a client check reads about the wire comes
from GET /transcript: method, path, status, JSON body, and the account of the token.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from conformance.target.outcomes import HarnessError
from conformance.target.secrets import SECRETS

DEFAULT_CONTROL_TOKEN = "sim-control-token"  # the bundled simulator's loopback-only default
TOKEN_ENV = "KNOWLEDGE_SIM_CONTROL_TOKEN"  # knowledge-sim serve reads its control token here: never on a command line `ps` shows
API = "/agent-api/v1/workspaces/{route}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _simulator_command() -> list[str]:
    beside = Path(sys.executable).parent / "knowledge-sim"
    found = str(beside) if beside.exists() else shutil.which("knowledge-sim")
    if found is None:
        raise HarnessError("no knowledge-sim command to serve the bundled simulator; give --harness-core URL")
    return [found]


class ServedSimulator:
    """``knowledge-sim serve`` on a free loopback port, frozen clock, fixed seed; stopped by ``close``.

    Its control token is drawn for this run (and scrubbed from every output): with the fixed
    default, any local user could drive the control extension of a run's Core. It is handed
    over in the environment, never on the command line, which every local user can read."""

    def __init__(self, seed: int = 0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.control_token = secrets.token_hex(16)
        SECRETS.add(self.control_token)
        self.process = subprocess.Popen(
            [*_simulator_command(), "serve", "--port", str(self.port), "--seed", str(seed), "--frozen-clock"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, TOKEN_ENV: self.control_token},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode("utf-8", "replace") if self.process.stderr else ""
                raise HarnessError(f"the bundled simulator exited ({self.process.returncode}): {err[-500:]}")
            try:
                answer = httpx.get(
                    self.url + "/_control/v1/clock",
                    headers={"Authorization": f"Bearer {self.control_token}"},
                    timeout=2,
                )
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if answer.status_code in (401, 403):
                self.close()
                raise HarnessError(
                    f"the bundled simulator refused the run's control token ({answer.status_code}): "
                    f"this knowledge-sim does not read {TOKEN_ENV}"
                )
            return
        self.close()
        raise HarnessError("the bundled simulator did not start serving within 60 s")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


class Control:
    """The control extension of the run's Core. A refusal is a harness error, never the client's fault."""

    def __init__(self, core_url: str, token: str) -> None:
        self.core_url = core_url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.core_url + "/_control/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.created: list[str] = []

    def _call(self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 201, 204)) -> Any:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise HarnessError(f"control {method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code not in expect:
            raise HarnessError(f"control {method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json() if response.content else None

    def workspace(self, route: str, mode: str = "normal") -> None:
        self._call("POST", "/workspaces", {"route": route, "mode": mode})
        self.created.append(route)

    def corpus(self, route: str, bases: list[dict[str, Any]]) -> dict[str, str]:
        return dict(self._call("PUT", f"/workspaces/{route}/corpus", {"bases": bases})["items"])

    def identity(self, account: str, route: str) -> dict[str, Any]:
        return dict(self._call("POST", "/identities", {"account": account, "route": route}))

    def scope(self, route: str, account: str, bases: list[str]) -> None:
        self._call("PUT", f"/workspaces/{route}/scopes/{account}", {"bases": bases})

    def mode(self, route: str, mode: str, legacy_status: int | None = None) -> None:
        body: dict[str, Any] = {"mode": mode}
        if legacy_status is not None:
            body["legacy_status"] = legacy_status
        self._call("PUT", f"/workspaces/{route}/mode", body)

    def fault(self, kind: str, route: str, **extra: Any) -> None:
        self._call("POST", "/faults", {"kind": kind, "route": route, **extra})

    def respond_next(self, route: str, endpoint: str, status: int, body: Any) -> None:
        """The next request to ``endpoint`` on ``route`` gets this answer (control's respond_next fault)."""
        self.fault("respond_next", route, endpoint=endpoint, status=status, body=body)

    def lost(self, route: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/faults/lost?route={route}")["responses"])

    def advance(self, seconds: float, route: str) -> None:
        self._call("POST", "/clock/advance", {"seconds": seconds, "routes": [route]})

    def transcript(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/transcript")["requests"])

    def cleanup(self) -> None:
        for route in self.created:
            try:
                self._call("DELETE", f"/workspaces/{route}", expect=(204, 404, 405))
            except HarnessError:
                pass
        self.http.close()


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
