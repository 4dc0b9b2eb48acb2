"""``knowledge-conformance load``: Locust headless in this process (``locust.env.Environment``
and a local runner), against a served Core, then the suite's reports.

Imported only for that command, after Locust (``conformance.cli``): importing Locust patches
the standard library for gevent, before anything here imports ``ssl`` or opens a socket; no
other command (and no pytest session) should get that."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import httpx
import locust
from locust.env import Environment
from locust.util.timespan import parse_timespan

from conformance.common.config import ConfigError, Secret, TargetConfig, load_config, redact_url
from conformance.common.exits import VERDICT_EXIT, Exit
from conformance.common.open import describe
from conformance.common.outcomes import HarnessError
from conformance.common.secrets import scrub
from conformance.common.served import ServedSimulator
from conformance.common.settings import RunSettings
from conformance.load import report
from conformance.load.profile import PROFILE, ContractUser
from conformance.load.setup import Context, attach, prepare

INSTEAD = "give --target URL of a running Core, or install the bundled simulator"


@dataclass
class Settings:
    users: int
    spawn_rate: float
    run_time: float
    identities: int
    reports: Path


def _settings(args: argparse.Namespace) -> Settings:
    try:
        run_time = float(parse_timespan(args.run_time))
    except ValueError:
        raise ConfigError(f"--run-time {args.run_time!r}: use seconds or a span such as 20s, 2m, 1h30m") from None
    for name, value, least in (("--users", args.users, 1), ("--identities", args.identities, 1)):
        if value is not None and value < least:
            raise ConfigError(f"{name} must be at least {least}, not {value}")
    for name, value in (("--spawn-rate", args.spawn_rate), ("--run-time", run_time)):
        if not (math.isfinite(value) and value > 0):  # nan compares false both ways: refused here, not let through
            raise ConfigError(f"{name} must be a positive number, not {value:g}")
    identities = args.identities if args.identities is not None else max(2, args.users)
    return Settings(args.users, args.spawn_rate, run_time, identities, Path(args.reports))


def _reachable(cfg: TargetConfig) -> None:
    """A --target or [control] url that does not answer, or control refusing its token, is a usage
    error before any load, as for ``run``: one line, exit 4, never a harness error of the run."""
    timeout = min(cfg.timeout_seconds, 10.0)
    try:
        httpx.get(httpx.URL(cfg.target).copy_with(username=None, password=None), timeout=timeout)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ConfigError(f"--target {redact_url(cfg.target)}: cannot reach it ({type(exc).__name__}: {exc})") from None
    if cfg.control_url is None or cfg.control_token is None:
        return
    where = f"[control] url {redact_url(cfg.control_url)}"
    try:
        response = httpx.get(
            httpx.URL(cfg.control_url.rstrip("/") + "/clock").copy_with(username=None, password=None),
            headers={"Authorization": f"Bearer {cfg.control_token}"},
            timeout=timeout,
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ConfigError(f"{where}: cannot reach it ({type(exc).__name__}: {exc})") from None
    if response.status_code in (401, 403):
        raise ConfigError(f"{where}: the control extension refused the [control] token ({response.status_code})")


def _config(args: argparse.Namespace, served: ServedSimulator | None) -> TargetConfig:
    if served is None:
        if args.target in ("sim", "sim+http"):
            raise ConfigError(
                "--target: a load run needs a served Core (a URL); leave it out to serve the bundled simulator"
            )
        cfg = load_config(args.target_config, target=args.target)
        if cfg.is_sim:
            raise ConfigError(
                "--target-config names no [target] url: give --target URL, or leave both out to serve the bundled simulator"
            )
    else:
        cfg = load_config(args.target_config)
        cfg.target = served.url
        cfg.control_url = served.url + str(cfg.wire["paths"]["control_base"])
        cfg.control_token = Secret(served.control_token)
    return cfg


def _run_settings(args: argparse.Namespace) -> RunSettings:
    """A bad --run-id is a ``RunIdError``, a ``ConfigError``: a usage error."""
    return RunSettings.from_options(run_id=args.run_id, sim_quirks=args.sim_quirk)


def watch(environment: Any, ctx: Context) -> None:
    """Attach the context, and count an exception a step did not judge as a harness error."""
    attach(environment, ctx)

    def on_user_error(user_instance: Any, exception: BaseException, tb: Any) -> None:
        ctx.tally.error(type(exception).__name__, scrub(f"{type(exception).__name__}: {exception}")[:300])

    environment.events.user_error.add_listener(on_user_error)


def run(ctx: Context, settings: Settings) -> tuple[Environment, bool]:
    """The load itself; returns the environment (its statistics) and whether it was interrupted."""
    environment = Environment(user_classes=[ContractUser], host=ctx.cfg.target, events=locust.events)
    watch(environment, ctx)
    runner = environment.create_local_runner()
    runner.start(settings.users, spawn_rate=settings.spawn_rate)
    gevent.spawn_later(settings.run_time + settings.users / settings.spawn_rate, runner.quit)
    try:
        runner.greenlet.join()
    except KeyboardInterrupt:
        runner.quit()
        return environment, True
    return environment, False


def main(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args)
        if args.sim_quirk and args.target:
            raise ConfigError("--sim-quirk applies to the bundled simulator this command serves (without --target)")
        settings.reports.mkdir(parents=True, exist_ok=True)
    except (ConfigError, OSError) as exc:
        print(f"knowledge-conformance load: {exc}", file=sys.stderr)
        return Exit.USAGE_ERROR
    served: ServedSimulator | None = None
    started = time.time()
    try:
        served = ServedSimulator(quirks=tuple(args.sim_quirk), instead=INSTEAD) if not args.target else None
        cfg = _config(args, served)
        run_settings = _run_settings(args)
        if served is None:
            _reachable(cfg)
        ctx = prepare(cfg, run_settings, settings.identities)
    except ConfigError as exc:
        if served is not None:
            served.close()
        print(f"knowledge-conformance load: {scrub(str(exc))}", file=sys.stderr)
        return Exit.USAGE_ERROR
    except (HarnessError, httpx.HTTPError) as exc:
        if served is not None:
            served.close()
        print(f"knowledge-conformance load: could not set up the run: {scrub(str(exc))}", file=sys.stderr)
        return VERDICT_EXIT["error"]
    target = (
        f"bundled simulator served at {served.url}"
        + (f" (quirks {', '.join(args.sim_quirk)})" if args.sim_quirk else "")
        if served is not None
        else describe(cfg)
    )
    print(
        f"knowledge-conformance load: target={target} run_id={run_settings.run_id} users={settings.users} run_time={settings.run_time:g}s",
        file=sys.stderr,
    )
    try:
        environment, interrupted = run(ctx, settings)
    finally:
        kept = ctx.close()
        if served is not None:
            served.close()
    figures = report.figures_of(environment.stats, settings.users, settings.spawn_rate, settings.run_time)
    configuration = {
        "target_config": args.target_config,
        "sim_quirk": list(args.sim_quirk),
        "identities": len(ctx.identities),
        "control_available": ctx.control is not None,
        "strict_codes": cfg.strict_codes,
        "wire": cfg.wire,
    }
    result = report.build(
        ctx.tally,
        list(PROFILE),
        figures,
        target=target,
        run_id=run_settings.run_id,
        started=started,
        configuration=configuration,
        interrupted=interrupted,
    )
    if kept:
        result.warnings.append(
            f"the control extension kept {len(kept)} workspace(s) of run {run_settings.run_id} (no delete)"
        )
    paths = report.write(result, settings.reports)
    for line in report.summary(result, ctx.tally, figures):
        print(line)
    for kind, path in paths.items():
        print(f"  {kind:8} {path}")
    return VERDICT_EXIT[result.verdict]
