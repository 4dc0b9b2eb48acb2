"""Everything that can be checked before a test runs, checked once at configure (and at session
start for what needs the network): a bad setup is a usage error (exit 4) with one line saying
what to fix, never a wall of failures. Builds the session's state and frozen run settings."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, NoReturn

import pytest

from conformance.common.secrets import SECRETS
from conformance.common.untrusted import one_line
from conformance.mcp.endpoints import command_problem
from conformance.plugin.options import BY_NAME, option
from conformance.plugin.state import SessionState, is_worker


def usage_error(message: str) -> NoReturn:
    raise pytest.UsageError(one_line(message))


RULES = (
    "conformance.server.rules",
    "conformance.mcp.rules",
    "conformance.search_knowledge.rules",
    "conformance.clients.rules",
)
"""Where each surface registers its rules: imported before any test, so an ID the catalogue
does not have is one usage error now, not an import error in every test module later."""


def _check_registrations() -> None:
    import importlib

    for module in RULES:
        try:
            importlib.import_module(module)
        except LookupError as exc:
            usage_error(f"{module}: {exc.args[0] if exc.args else exc}")


def prepare(config: pytest.Config, started: float) -> SessionState:
    """Everything that can be checked before a test runs is checked here: a bad setup
    is a usage error (exit 4) with one line saying what to fix, never a wall of failures.
    The run's settings are built here, once, from the options and the loaded configuration."""
    from conformance.common.config import OPTION_RANGES, ConfigError, load_config, option_number_problem
    from conformance.common.settings import RunIdError, RunSettings, checked_run_id
    from conformance.report.results import load_waivers
    from knowledge_schemas import load_catalogue

    _check_registrations()
    if is_worker(config):
        run_id = str(config.workerinput.get("kc_run_id", "local"))  # type: ignore[attr-defined]
        worker = str(config.workerinput.get("workerid", "w"))  # type: ignore[attr-defined]
    else:
        worker = ""
        try:  # the first thing a run says is wrong with it
            run_id = checked_run_id(option(config, "--run-id"))
        except RunIdError as exc:
            usage_error(str(exc))
    try:
        cfg = load_config(option(config, "--target-config"), target=option(config, "--target"))
    except ConfigError as exc:
        usage_error(str(exc))
    mcp_target = option(config, "--mcp-target")
    if mcp_target and str(mcp_target).startswith(("http://", "https://")):
        SECRETS.add_url(mcp_target)  # its user-info and query values never reach a report
    unstartable = command_problem(mcp_target, cfg.mcp.get("command"), cfg.mcp.get("jobs_command"))
    if unstartable is not None:
        usage_error(unstartable)
    quirks, rate_limit = tuple(option(config, "--sim-quirk")), option(config, "--rate-limit")
    if is_worker(config):  # the run's limit is shared among its workers
        rate_limit /= max(1, int(config.workerinput.get("workercount", 1)))  # type: ignore[attr-defined]
    if rate_limit < 0:
        usage_error(
            f"--rate-limit must be 0 (no limit) or a positive number of requests per second, not {rate_limit:g}"
        )
    for name in (n for n in OPTION_RANGES if n in BY_NAME):  # NaN, infinities, absurd sizes
        if (problem := option_number_problem(name, option(config, name))) is not None:
            usage_error(problem)
    if quirks and not cfg.is_sim:
        usage_error("--sim-quirk applies to the bundled simulator only (--target sim or sim+http)")
    if quirks:
        _check_quirks(quirks)
    clock_tick = option(config, "--sim-clock-tick")
    if clock_tick is not None and not cfg.is_sim:
        usage_error("--sim-clock-tick applies to the bundled simulator only (--target sim or sim+http)")
    if clock_tick is not None and not 0 <= clock_tick < 1:  # NaN fails too
        usage_error(f"--sim-clock-tick must be at least 0 and below 1 second, not {clock_tick:g}")
    scope = option(config, "--scope")
    if scope is not None:
        from conformance.common.scope import ScopeError, parse_scope

        try:
            scope = parse_scope(scope).label
        except ScopeError as exc:
            usage_error(str(exc))
    settings = RunSettings.from_options(
        run_id=run_id,
        worker=worker,
        sim_quirks=quirks,
        sim_seed=option(config, "--sim-seed"),
        sim_clock_tick=clock_tick,
        realtime=option(config, "--realtime"),
        rate_limit=rate_limit,
        no_control=option(config, "--no-control"),
        scope=scope,
    )
    state = SessionState(started, cfg, settings)
    if is_worker(config):
        return state
    catalogue = load_catalogue()
    asked = option(config, "--requirement")
    if any(not rid.strip() for rid in asked):  # an unset variable: the message named nothing
        usage_error("--requirement is empty (an unset variable?): give a requirement ID such as SRCH-003")
    bad = sorted(set(asked) - set(catalogue.ids))
    if bad:
        usage_error(f"--requirement: unknown ID(s) {', '.join(bad)}")
    try:
        state.waivers = load_waivers(option(config, "--waivers"), catalogue)
    except ValueError as exc:
        usage_error(str(exc))
    if not config.option.collectonly:
        _check_report_dir(Path(option(config, "--reports")))
    return state


def _check_quirks(names: tuple[str, ...]) -> None:
    """An unknown quirk is a usage error now, not a harness error in every test later."""
    import difflib

    from conformance.common.open import known_quirks

    known = known_quirks()
    if known is None:
        return
    unknown = sorted(set(names) - known)
    if unknown:
        near = sorted({m for n in unknown for m in difflib.get_close_matches(n, known, n=3)})
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        usage_error(f"--sim-quirk: unknown quirk(s) {', '.join(unknown)}{hint} (knowledge-sim quirks lists them)")


def _check_report_dir(directory: Path) -> None:
    """Reports can be written there; a folder made to find out is removed again (a run stopped by
    a later usage error leaves no reports, not even an empty folder)."""
    created = []
    missing = directory.absolute()
    while not missing.exists() and missing != missing.parent:
        created.append(missing)
        missing = missing.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-check-{os.getpid()}"
        probe.write_text("", "utf-8")
        probe.unlink()
    except OSError as exc:
        usage_error(f"--report-dir {directory}: cannot write reports there ({exc.strerror or exc})")
    finally:
        for made in created:  # the deepest first
            with contextlib.suppress(OSError):
                made.rmdir()


class Tally:
    """The requests the pre-flight sent to the target: a run's request count includes them, and a
    pre-flight that passed in this process (the command line's, before pytest started) is not repeated."""

    def __init__(self) -> None:
        self.requests = 0
        self.refusals = 0  # 429s met, and the seconds paused for them (conformance.common.transport.Backoff)
        self.paused = 0.0
        self.passed: set[tuple[Any, ...]] = set()


PREFLIGHT = Tally()


def speaks_plain_http(url: Any) -> bool:
    """Whether an ``https://`` URL whose TLS handshake failed is served by plain HTTP: the one
    setup mistake a raw SSL error hides ("wrong version number"). Asked once, headers only."""
    import httpx

    if url.scheme != "https":
        return False
    try:
        with httpx.stream("GET", url.copy_with(scheme="http"), timeout=3.0) as answer:
            return answer.status_code > 0
    except httpx.HTTPError:
        return False


def plain_http_problem(where: str, url: Any, exc: Exception) -> str | None:
    """The usage error of an https URL to a plain-HTTP server, or None when that is not the cause."""
    import httpx

    from conformance.common.config import redact_url

    if not isinstance(exc, httpx.ConnectError) or not speaks_plain_http(url):
        return None
    plain = redact_url(str(url.copy_with(scheme="http")))
    return f"{where}: the TLS handshake failed and the server there answers plain HTTP; use http:// ({plain})"


CONTROL_MISSING = (404, 405)
"""How a server says nothing answers at that path: the control URL then points elsewhere."""


def check_control(cfg: Any) -> None:
    """One read of the control extension (GET /clock) with the configured credential: a wrong
    control token, a URL without the extension's root (``…/_control/v1``) or https to a plain-HTTP
    server is a usage error now, not a harness error in every test that provisions."""
    import httpx

    from conformance.common.config import redact_url

    key = ("control", cfg.control_url, str(cfg.control_token))
    if key in PREFLIGHT.passed:
        return
    where = f"[control] url {redact_url(cfg.control_url)}"
    root = httpx.URL(cfg.control_url.rstrip("/")).copy_with(username=None, password=None)
    try:
        response = _control_get(cfg, root)
    except httpx.HTTPError as exc:
        if (problem := plain_http_problem(where, root, exc)) is not None:
            usage_error(problem)
        return  # control that cannot be reached stays a harness error of the tests that need it (exit 7), as documented
    if response.status_code == 429:
        PREFLIGHT.refusals += 1  # rate limited: not setup; the tests' requests wait it out
    if response.status_code in (401, 403):
        usage_error(
            f"{where}: the control extension refused the [control] token ({response.status_code}); check that credential"
        )
    if response.status_code in CONTROL_MISSING:
        _control_elsewhere(cfg, root, where, response.status_code)
    if 200 <= response.status_code < 300 and not answers_json(response):
        kind = response.headers.get("content-type", "no content type").split(";")[0].strip()
        usage_error(
            f"{where}: GET {root.path.rstrip('/')}/clock answered {response.status_code} with {kind}, not the control "
            "extension's JSON: is that the control extension's URL (the Core's base URL and /_control/v1)?"
        )
    PREFLIGHT.passed.add(key)


def answers_json(response: Any) -> bool:
    """Whether the answer's body is JSON the suite can read."""
    try:
        response.json()
    except ValueError:
        return False
    return True


def _control_get(cfg: Any, root: Any) -> Any:
    """GET of the control extension's clock below ``root``, counted with the pre-flight's requests."""
    from conformance.common.transport import bounded_get

    PREFLIGHT.requests += 1
    return bounded_get(
        root.copy_with(path=root.path.rstrip("/") + "/clock"),
        {"Authorization": f"Bearer {cfg.control_token}"},
        min(cfg.timeout_seconds, 10.0),
        cfg.max_response_bytes,
    )


def _control_elsewhere(cfg: Any, root: Any, where: str, status: int) -> NoReturn:
    """Nothing of the control extension answers at ``root``: say where it does, when it is one
    ``/_control/v1`` further (the usual slip: the Core's base URL given as the control URL)."""
    import httpx

    base = str(cfg.wire["paths"].get("control_base", "/_control/v1"))
    found = None
    if not root.path.rstrip("/").endswith(base.rstrip("/")):
        with contextlib.suppress(httpx.HTTPError):
            found = _control_get(cfg, root.copy_with(path=root.path.rstrip("/") + base)).status_code
    if found is not None and found not in CONTROL_MISSING:
        usage_error(
            f"{where}: no control extension there (GET …/clock answered {status}), but {base} below it answers: add {base} to [control] url"
        )
    usage_error(
        f"{where}: no control extension there (GET …/clock answered {status}); give the URL of its root, "
        f"the one ending in {base} where the Core serves it"
    )


def check_harness_core(config: pytest.Config) -> None:
    """A client run's --harness-core that cannot be reached, or refuses its control token, is a usage error now."""
    import httpx

    from conformance.clients.core import DEFAULT_CONTROL_TOKEN
    from conformance.common.config import redact_url
    from conformance.common.transport import bounded_get

    url = option(config, "--harness-core")
    if url is None:
        return
    token = option(config, "--harness-control-token") or DEFAULT_CONTROL_TOKEN
    SECRETS.add(token)
    try:
        response = bounded_get(url.rstrip("/") + "/_control/v1/clock", {"Authorization": f"Bearer {token}"}, 10)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        usage_error(f"--core {redact_url(url)}: cannot reach it ({type(exc).__name__}: {exc})")
    if response.status_code in (401, 403):
        usage_error(
            f"--core {redact_url(url)}: the control extension refused the control token ({response.status_code})"
        )
    if response.status_code != 200:
        usage_error(
            f"--core {redact_url(url)}: no control extension there (GET /_control/v1/clock answered {response.status_code}); "
            "client checks need one"
        )
