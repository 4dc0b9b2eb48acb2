"""A live target without the control extension, configured by hand: setup mistakes are found
before any test (exit 4, one line naming the identity and what to fix), a target that stops
answering stops the run (exit 7, one line, within seconds), Ctrl-C is exit 2, a binding check
credits its rule only when the configured stranger differs in that binding alone, and the
realtime expiry probes wait once (here on the simulator's control clock, so without the wait)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import simulator
from conformance.common.open import serve_over_loopback
from conformance.plugin.fixtures import TEST_CLOCK
from simulator.config import SimConfig
from tests.interrupts import interruptible
from tests.suite_command import SUITE

CONTROL = "ctl-" + "p" * 28
CTL = {"Authorization": f"Bearer {CONTROL}"}
PROBE = "homepage binding"  # finds documents of the simulator's demo workspace


@dataclass
class Core:
    """The simulator served over loopback; the suite is configured without its control extension
    (as for a staging Core), while the test mints the identities it configures through it."""

    url: str
    app: Any
    tokens: dict[str, str] = field(default_factory=dict)

    def mint(self, account: str, route: str = "demo", session_id: str | None = None) -> dict[str, str]:
        body = {"account": account, "route": route, **({"session_id": session_id} if session_id else {})}
        minted = httpx.post(f"{self.url}/_control/v1/identities", json=body, headers=CTL, timeout=10)
        minted.raise_for_status()
        return dict(minted.json())

    def workspace(self, route: str) -> None:
        httpx.post(f"{self.url}/_control/v1/workspaces", json={"route": route}, headers=CTL, timeout=10)

    def config(self, root: Path, identities: dict[str, dict[str, str]], target: str = "") -> Path:
        """A target.toml: [target] (route demo, the probe query, and ``target``), then each identity,
        its token from the environment (``KC_<NAME>``, see :meth:`env`)."""
        lines = ["[target]", 'route = "demo"', f'probe_query = "{PROBE}"', target]
        for name, ident in identities.items():
            self.tokens[f"KC_{name.upper()}"] = ident["token"]
            lines += [f"[identities.{name}]", f'token = {{env = "KC_{name.upper()}"}}']
            lines += [f'{key} = "{ident[key]}"' for key in ("route", "account", "session") if key in ident]
        path = root / "target.toml"
        path.write_text("\n".join(lines) + "\n", "utf-8")
        return path

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.tokens, **extra}


def identity(minted: dict[str, str], *, keys: bool = True) -> dict[str, str]:
    """A configured identity from a minted one: its token and route, and (``keys``) account and session."""
    out = {"token": minted["token"], "route": minted["route"]}
    return {**out, "account": minted["account"], "session": minted["session_id"]} if keys else out


def _serve(quirks: tuple[str, ...] = ()) -> tuple[Core, Callable[[], None]]:
    app = simulator.create_app(SimConfig(control_token=CONTROL, demo=True, seed=11), quirks=list(quirks))
    url, stop = serve_over_loopback(app)
    return Core(url, app), stop


@pytest.fixture
def core() -> Iterator[Core]:
    served, stop = _serve()
    yield served
    stop()


def _run(
    config: Path, url: str, root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [*SUITE, "--target", url, "--target-config", str(config), "--report-dir", str(root / "r"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The run's whole output is one message on one line, no traceback: pytest's ``ERROR:`` line
    of a usage error; of a stop (``pytest.exit``), pytest shows the same line on stdout and stderr."""
    lines = {
        line.strip(" !").removeprefix("_pytest.outcomes.Exit: ").removeprefix("Exit: ")
        for line in (proc.stdout + proc.stderr).splitlines()
        if line.strip()
    }
    assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = lines.pop()
    assert "Traceback" not in line
    return line


def _results(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "r" / "results.json").read_text("utf-8")))


def _requirement(results: dict[str, Any], rid: str) -> dict[str, Any]:
    return next(r for r in results["requirements"] if r["id"] == rid)


# ------------------------------------------------------------------ setup mistakes: exit 4


def test_a_base_url_that_serves_html_is_exit_4_in_one_line(tmp_path: Path) -> None:
    async def website(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b"<!doctype html><html><body>Welcome</body></html>"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": body})

    url, stop = serve_over_loopback(website)
    try:
        config = tmp_path / "t.toml"
        config.write_text('[target]\nroute = "demo"\n[identities.primary]\ntoken = "bha_' + "h" * 40 + '"\n', "utf-8")
        proc = _run(config, url, tmp_path, timeout=120)
    finally:
        stop()
    line = _one_line(proc)
    assert proc.returncode == 4 and "serves a web page (HTML), not the Agent API" in line, line
    assert not (tmp_path / "r").exists(), "a usage error leaves no reports, not even their folder"


def test_a_wrong_token_of_one_identity_is_exit_4_naming_it(core: Core, tmp_path: Path) -> None:
    primary = core.mint("alice")
    bob = {**identity(core.mint("bob")), "token": "bha_" + "w" * 48}
    config = core.config(tmp_path, {"primary": identity(primary), "other_account": bob})
    proc = _run(config, core.url, tmp_path, env=core.env(), timeout=120)
    line = _one_line(proc)
    assert proc.returncode == 4, line
    assert "[identities.other_account]" in line and "refused this identity's token" in line and "401" in line, line
    assert "w" * 20 not in line, "the token is never shown"
    heard = httpx.get(f"{core.url}/_control/v1/transcript", headers=CTL, timeout=10).json()["requests"]
    paths = [entry["path"] for entry in heard]
    assert paths and not [p for p in paths if p.endswith("/turns")], "no probe turn on a Core set up wrong"


def test_an_identity_that_cannot_use_its_route_is_exit_4_naming_it(core: Core, tmp_path: Path) -> None:
    core.workspace("demo-b")
    primary = core.mint("alice")
    elsewhere = {**identity(core.mint("alice", "demo-b")), "route": "demo"}  # a token of demo-b, configured on demo
    config = core.config(tmp_path, {"primary": identity(primary), "other_session": elsewhere})
    proc = _run(config, core.url, tmp_path, env=core.env(), timeout=120)
    line = _one_line(proc)
    assert proc.returncode == 4 and "[identities.other_session]" in line and "403" in line, line


def test_a_route_typo_is_exit_4_naming_the_route(core: Core, tmp_path: Path) -> None:
    primary = {**identity(core.mint("alice")), "route": "demoo"}
    config = core.config(tmp_path, {"primary": primary})
    proc = _run(config, core.url, tmp_path, env=core.env(), timeout=120)
    line = _one_line(proc)
    assert proc.returncode == 4 and "knows no workspace at route 'demoo'" in line, line
    assert "[identities.primary]" in line, line


def test_a_probe_query_that_finds_nothing_is_exit_4(core: Core, tmp_path: Path) -> None:
    config = core.config(tmp_path, {"primary": identity(core.mint("alice"))})
    config.write_text(config.read_text("utf-8").replace(PROBE, "zqxjv nothing matches this"), "utf-8")
    proc = _run(config, core.url, tmp_path, env=core.env(), timeout=120)
    line = _one_line(proc)
    assert proc.returncode == 4 and "[target].probe_query 'zqxjv nothing matches this' finds nothing" in line, line


# ------------------------------------------------------- a target that stops answering: exit 7


@pytest.fixture
def silent_socket() -> Iterator[str]:
    """A listening socket that accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def test_a_target_that_never_answers_stops_at_once_as_a_harness_error(silent_socket: str, tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text(
        '[target]\nroute = "demo"\ntimeout_seconds = 1\n[identities.primary]\ntoken = "bha_' + "n" * 40 + '"\n', "utf-8"
    )
    began = time.monotonic()
    proc = _run(config, silent_socket, tmp_path, timeout=120)
    took = time.monotonic() - began
    line = _one_line(proc)
    assert proc.returncode == 7 and "accepted the connection but GET / got no answer within 1 s" in line, line
    assert took < 30, f"took {took:.0f} s"


class HangAfter:
    """The simulator, until ``answered`` requests have been answered (the pre-flight); then every
    request hangs (a Core that stopped answering). ``hung`` counts the requests left hanging."""

    def __init__(self, app: Any, answered: int) -> None:
        self.app, self.left, self.hung = app, answered, 0
        self.first_hang = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import asyncio

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/_control/") or self.left > 0:
            self.left -= 0 if scope["path"].startswith("/_control/") else 1
            await self.app(scope, receive, send)
            return
        self.hung += 1
        self.first_hang.set()
        await asyncio.sleep(3600)


PREFLIGHT_REQUESTS = 4  # GET /, capabilities of the one identity, the probe's turn and search


@pytest.fixture
def hanging() -> Iterator[tuple[Core, HangAfter]]:
    app = simulator.create_app(SimConfig(control_token=CONTROL, demo=True, seed=11))
    wrapper = HangAfter(app, PREFLIGHT_REQUESTS)
    url, stop = serve_over_loopback(wrapper)
    yield Core(url, app), wrapper
    stop()


def test_a_target_that_stops_answering_stops_the_run_after_a_few_timeouts(
    hanging: tuple[Core, HangAfter], tmp_path: Path
) -> None:
    core, wrapper = hanging
    config = core.config(tmp_path, {"primary": identity(core.mint("alice"))}, "timeout_seconds = 1")
    began = time.monotonic()
    proc = _run(config, core.url, tmp_path, "--mcp-target", "none", env=core.env(), timeout=300)
    took = time.monotonic() - began
    out = proc.stdout + proc.stderr
    results = _results(tmp_path)
    assert proc.returncode == 7 and results["verdict"] == "error", out[-2000:]
    assert "did not answer 3 requests in a row within 1 s (first: " in out, out[-2000:]
    assert "the Core hung on the first of them, or the network to it is down" in out, out[-2000:]
    assert "Traceback" not in out and "httpcore" not in out, "a timeout is one line, not a traceback"
    assert "failed" not in {r["status"] for r in results["requirements"]}, "a silent target broke no rule"
    assert took < 60 and wrapper.hung <= 4, (took, wrapper.hung)
    print(f"\nstopped after {wrapper.hung} hung requests in {took:.1f} s")


def test_ctrl_c_during_a_hung_request_is_exit_2(hanging: tuple[Core, HangAfter], tmp_path: Path) -> None:
    """After one request already timed out (a harness error), Ctrl-C in the next hung request."""
    core, wrapper = hanging
    # A long timeout: the interrupt lands inside the second hung request even on a slow machine.
    config = core.config(tmp_path, {"primary": identity(core.mint("alice"))}, "timeout_seconds = 10")
    cmd = [*SUITE, "--target", core.url, "--target-config", str(config), "--report-dir", str(tmp_path / "r")]
    proc = subprocess.Popen(
        [*cmd, "--mcp-target", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=core.env(),
        preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 60
    while wrapper.hung < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert wrapper.hung >= 2, "the run must be in its second hung request"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out[-2000:]
    assert _results(tmp_path)["verdict"] == "interrupted"


# -------------------------------------------------------------- isolation of a binding dimension


@pytest.mark.parametrize("other_session", [True, False], ids=["also-another-session", "same-session"])
def test_a_stranger_on_another_route_credits_ref_005_only_when_isolated(tmp_path: Path, other_session: bool) -> None:
    """Against a Core that ignores the route binding (quirk ref_any_route): a stranger that is
    also another Agent Session is refused by the session check, so REF-005 is not isolated (never
    verified); one of the same Agent Session on another route catches the Core (REF-005 failed)."""
    core, stop = _serve(("ref_any_route",))
    try:
        core.workspace("demo-b")
        primary = core.mint("alice")
        stranger = core.mint("alice", "demo-b", None if other_session else primary["session_id"])
        config = core.config(tmp_path, {"primary": identity(primary), "other_route": identity(stranger)})
        proc = _run(config, core.url, tmp_path, "-k", "test_one_differing_binding_is_refused", env=core.env())
    finally:
        stop()
    results = _results(tmp_path)
    ref_005 = _requirement(results, "REF-005")
    if other_session:
        assert ref_005["status"] == "not_verified" and "not isolated" in json.dumps(ref_005), ref_005
        assert "session" in json.dumps(ref_005)
        assert proc.returncode == 6, proc.stdout[-2000:]
    else:
        assert ref_005["status"] == "failed" and proc.returncode == 1, (ref_005, proc.stdout[-2000:])


# ------------------------------------------------------------------------- realtime in one wait


@pytest.mark.parametrize("quirk", ["", "refs_expire_early"])
def test_realtime_expiry_probes_wait_once(tmp_path: Path, quirk: str) -> None:
    """--realtime without control, its clock the simulator's control clock (frozen, moved by each
    wait, KNOWLEDGE_CONFORMANCE_TEST_CLOCK): every probe verified in one wait of about 300 s on that
    clock; a Core whose references expire early fails REF-002 with the measured age."""
    core, stop = _serve((quirk,) if quirk else ())
    try:
        advanced: list[float] = []
        config = core.config(tmp_path, {"primary": identity(core.mint("alice"))})
        before = float(httpx.get(f"{core.url}/_control/v1/clock", headers=CTL).json()["now"])
        env = core.env(**{TEST_CLOCK: f"{core.url}/_control/v1", f"{TEST_CLOCK}_TOKEN": CONTROL})
        proc = _run(config, core.url, tmp_path, "--realtime", "-k", "300_seconds", env=env)
        advanced.append(float(httpx.get(f"{core.url}/_control/v1/clock", headers=CTL).json()["now"]) - before)
    finally:
        stop()
    results = _results(tmp_path)
    statuses = {rid: _requirement(results, rid)["status"] for rid in ("REF-001", "REF-002", "REF-016")}
    assert 300 < advanced[0] < 301, f"one wait of about 300 s, not six: the clock moved {advanced[0]:.1f} s"
    if not quirk:
        assert proc.returncode == 6 and set(statuses.values()) == {"verified"}, (statuses, proc.stdout[-2000:])
    else:
        assert statuses["REF-002"] == "failed" and proc.returncode == 1, proc.stdout[-2000:]
        failures = _requirement(results, "REF-002")["failures"]
        assert failures and all("measured age 299.900 s in real time" in json.dumps(f) for f in failures), failures
