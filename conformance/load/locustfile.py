"""The load profile as a locustfile, for Locust's own command line and its distributed mode,
when one machine cannot generate the load::

    locust -f conformance/load/locustfile.py --master --headless --expect-workers 2 \\
        -u 64 -r 8 -t 2m --host https://core.example.test --kc-target-config target.toml --kc-report-dir reports
    locust -f conformance/load/locustfile.py --worker --master-host MASTER --kc-target-config target.toml   # on each load machine

Each worker (or a single local process) provisions its own world under its own namespace
(workspace, corpus, ``--kc-identities`` accounts) through the control extension, runs the
users, and ships its tally to the master with each statistics report; the master adds them
up and, when it quits, writes the suite's reports and exits with the verdict's exit code.
``knowledge-conformance load`` is the same profile in one process."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from conformance.common.config import Secret, check_http_url, load_config, redact_url
from conformance.common.exits import VERDICT_EXIT
from conformance.common.options import LOCUST, add_arguments
from conformance.common.secrets import scrub
from conformance.common.settings import RunSettings, new_run_id
from conformance.load import report
from conformance.load.profile import PROFILE, ContractUser
from conformance.load.runner import watch
from conformance.load.setup import prepare
from conformance.load.tally import Tally

__all__ = ["ContractUser"]  # the user class Locust runs
TALLY_KEY = "kc_tally"
_state: dict[str, Any] = {}


def _options(parser: Any) -> None:
    add_arguments(parser, LOCUST)


def _init(environment: Any, **_: Any) -> None:
    _state.update(started=time.time(), tally=Tally())
    if isinstance(environment.runner, MasterRunner):
        environment.events.worker_report.add_listener(
            lambda client_id, data: _state["tally"].merge(data.get(TALLY_KEY, {}))
        )
        return
    if isinstance(environment.runner, WorkerRunner):
        environment.events.report_to_master.add_listener(_ship)


def _provision(environment: Any, **_: Any) -> None:
    """On a worker or a local process, once: by now a worker has the master's --host and --kc-* options."""
    options = environment.parsed_options
    _state.setdefault("run_id", options.kc_run_id or new_run_id())
    if isinstance(environment.runner, MasterRunner) or "ctx" in _state:
        return
    try:
        cfg = load_config(options.kc_target_config or None)
        cfg.target = str(environment.host or cfg.target)
        if options.kc_control_token and cfg.control_url is None:
            cfg.control_url = cfg.target.rstrip("/") + str(cfg.wire["paths"]["control_base"])
            cfg.control_token = Secret(options.kc_control_token)
        check_http_url(cfg.target, "--host")
        worker = secrets.token_hex(2) if isinstance(environment.runner, WorkerRunner) else ""
        ctx = prepare(cfg, RunSettings.from_options(run_id=_state["run_id"], worker=worker), options.kc_identities)
    except Exception as exc:  # nothing can be judged: the master's verdict becomes error, never conformant
        _state["tally"].error("setup", scrub(f"could not set up the load run: {type(exc).__name__}: {exc}")[:300])
        raise
    _state.update(ctx=ctx, tally=ctx.tally)
    watch(environment, ctx)


def _ship(client_id: str, data: dict[str, Any]) -> None:
    """A worker's tally rides on each statistics report, then starts again from nothing."""
    tally: Tally = _state["tally"]
    data[TALLY_KEY] = tally.to_data()
    tally.clear()


def _quitting(environment: Any, **_: Any) -> None:
    ctx = _state.get("ctx")
    if ctx is not None:
        ctx.close()
    if isinstance(environment.runner, WorkerRunner):
        return
    options, tally = environment.parsed_options, _state["tally"]
    figures = report.figures_of(
        environment.stats, int(options.num_users or 0), float(options.spawn_rate or 0), float(options.run_time or 0)
    )
    run = report.build(
        tally,
        list(PROFILE),
        figures,
        target=f"Core at {redact_url(environment.host or '')}",
        run_id=_state.get("run_id", "local"),
        started=_state["started"],
        configuration={
            "target_config": options.kc_target_config or None,
            "locust": "distributed" if isinstance(environment.runner, MasterRunner) else "local",
        },
    )
    report.write(run, Path(options.kc_reports))
    for line in report.summary(run, tally, figures):
        print(line)
    environment.process_exit_code = VERDICT_EXIT[run.verdict]


_hooks: Any = events  # Locust's event hooks carry no types
_hooks.init_command_line_parser.add_listener(_options)
_hooks.init.add_listener(_init)
_hooks.test_start.add_listener(_provision)
_hooks.quitting.add_listener(_quitting)
