"""``knowledge-conformance observe``: its options, and running it as a proxy or on a recording.

This module imports only the standard library at load time: the command line is built from it
before any command runs."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from conformance.common.exits import Exit  # the standard library only

USAGE_ERROR = Exit.USAGE_ERROR
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8080


def add_arguments(parser: argparse.ArgumentParser) -> None:
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--upstream", metavar="URL", help="the Core to forward to (http:// or https://, TLS verified)")
    given.add_argument("--har", metavar="FILE", help="judge a HAR recording instead (a gateway's, or --record-har's)")
    given.add_argument(
        "--transcript", metavar="FILE", help="judge a transcript of the suite's stateful run (the Core's rules)"
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=f"{LOOPBACK}:{DEFAULT_PORT}",
        help=f"where the proxy listens (default {LOOPBACK}:{DEFAULT_PORT}: loopback only)",
    )
    parser.add_argument(
        "--target-config", metavar="FILE", help="[identities.*] (account, session) and [wire] overrides"
    )
    parser.add_argument("--reports", "--report-dir", dest="reports", metavar="DIR", default="reports")
    parser.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop after this long (default: until interrupted)"
    )
    parser.add_argument("--record-har", metavar="FILE", help="also write what the proxy saw as a HAR (no secret in it)")
    parser.add_argument(
        "--client-negotiates",
        action="store_true",
        help="the host's on_demand turns are all negotiated: judge capabilities before each (NEG-004)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also hold the Core to this project's choices where the seed is open (schemas/CHOICES.md): "
        "[wire] codes.strict, as in --target-config",
    )
    parser.add_argument("--queue", type=int, default=256, metavar="N", help="exchanges waiting for the judge at most")
    parser.add_argument("--upstream-ca", metavar="FILE", help="CA bundle to verify the upstream's TLS certificate")
    parser.add_argument("--upstream-timeout", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--fail-on", choices=("must", "should"), default="must")


def listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: give HOST:PORT, e.g. {LOOPBACK}:{DEFAULT_PORT}")
    return host.strip("[]") or LOOPBACK, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _problem(args: argparse.Namespace) -> str | None:
    from conformance.common.config import ConfigError, check_http_url, option_number_problem

    try:
        if args.upstream is not None:
            if not args.upstream.startswith(("http://", "https://")):
                return f"--upstream {args.upstream!r}: give the Core's http:// or https:// base URL"
            check_http_url(args.upstream, "--upstream")
            listen_address(args.listen)
    except (ConfigError, ValueError) as exc:
        return str(exc)
    if args.queue < 1 or args.queue > 100_000:
        return f"--queue {args.queue}: give 1 to 100000"
    for flag, value in (("--duration", args.duration), ("--upstream-timeout", args.upstream_timeout)):
        if value is not None:
            problem = option_number_problem("seconds", value, flag)
            if problem is not None or value <= 0:
                return problem or f"{flag} must be a positive number of seconds"
    return None


def _known(cfg: Any) -> dict[str, Any]:
    """The configured identities by token: what each stands for (its name, account and session)."""
    from conformance.observe.credentials import Identity

    return {str(i.token): Identity(name, i.account, i.session) for name, i in cfg.identities.items()}


def _setup(args: argparse.Namespace) -> tuple[Any, Any]:
    from conformance.common.config import load_config
    from conformance.observe.credentials import Credentials

    # the identities and [wire] only: the upstream is no target of the suite's own checks
    cfg = load_config(args.target_config, target="sim")
    if args.strict:  # the same switch a run's [wire] codes.strict is: one judge for both spellings
        cfg.wire["codes"]["strict"] = True
    return cfg, Credentials(_known(cfg), str(cfg.wire["auth"]["scheme"]))


def main(args: argparse.Namespace) -> int:
    from conformance.common.config import ConfigError
    from conformance.common.untrusted import one_line

    problem = _problem(args)
    if problem is None:
        try:
            cfg, credentials = _setup(args)
        except ConfigError as exc:
            problem = str(exc)
    if problem is not None:
        print(f"knowledge-conformance observe: {one_line(problem)}", file=sys.stderr)
        return USAGE_ERROR
    if args.har is not None:
        return _judge_recording(args, cfg, credentials)
    if args.transcript is not None:
        return _judge_transcript(args, cfg)
    return _proxy(args, cfg, credentials)


def _verdict_line(run: Any, reports: str) -> None:
    from conformance.common.untrusted import one_line

    s = run.summary
    print(
        one_line(
            f"knowledge-conformance observe: {run.verdict.upper()} within scope observed traffic: "
            f"{s['observed_exchanges']} exchange(s), {s['observed_sessions']} session(s), {s['observed_dropped']} "
            f"dropped; {s['rules_violated']} rule(s) violated, {s['rules_held']} held, {s['rules_not_observed']} "
            f"not observed; reports in {reports}"
        )
    )


def _finish(args: argparse.Namespace, judge: Any, source: Any) -> int:
    from conformance.observe.report import build, exit_code, write

    run = build(judge.tally.snapshot(), source, sessions=judge.ctx.credentials.count, fail_on=args.fail_on)
    write(run, Path(args.reports))
    _verdict_line(run, args.reports)
    return exit_code(run)


def _judge_recording(args: argparse.Namespace, cfg: Any, credentials: Any) -> int:
    from conformance.common.untrusted import one_line
    from conformance.observe.har import HarError, read_har
    from conformance.observe.judge import Judge
    from conformance.observe.report import Source

    judge = Judge(cfg, credentials, base_url="$CORE_URL", negotiating=args.client_negotiates)
    started = time.monotonic()
    try:
        for seen in read_har(args.har, credentials, str(cfg.wire["auth"]["header"])):
            judge.judge(seen)
    except HarError as exc:
        print(f"knowledge-conformance observe: {one_line(exc)}", file=sys.stderr)
        return USAGE_ERROR
    return _finish(args, judge, Source("har", Path(args.har).name, duration=time.monotonic() - started))


def _judge_transcript(args: argparse.Namespace, cfg: Any) -> int:
    from conformance.common.untrusted import one_line
    from conformance.observe.credentials import Credentials
    from conformance.observe.judge import Judge
    from conformance.observe.report import Source
    from conformance.observe.suite_transcript import TranscriptError, identities, read_transcript

    credentials = Credentials(identities())
    # the driver's clock moved by control, exactly: no margin but the configured skew; its client probes on purpose
    judge = Judge(cfg, credentials, base_url="$CORE_URL", margin=0.0, client_rules=False)
    started = time.monotonic()
    try:
        for seen in read_transcript(args.transcript, cfg):
            judge.judge(seen)
    except TranscriptError as exc:
        print(f"knowledge-conformance observe: {one_line(exc)}", file=sys.stderr)
        return USAGE_ERROR
    return _finish(args, judge, Source("transcript", Path(args.transcript).name, duration=time.monotonic() - started))


def _proxy(args: argparse.Namespace, cfg: Any, credentials: Any) -> int:
    import ssl

    import uvicorn

    from conformance.common.config import redact_url
    from conformance.observe.judge_process import JudgeProcess, JudgeSetup
    from conformance.observe.proxy import ObserveProxy, upstream_client
    from conformance.observe.report import Source, build, exit_code, write

    host, port = listen_address(args.listen)
    try:  # bound before anything starts: a port in use is the command's mistake (exit 4), not the suite's
        listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        print(f"knowledge-conformance observe: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR
    port = listener.getsockname()[1]
    if not is_loopback(host):
        print(f"knowledge-conformance observe: listening on {host}, not loopback: whoever reaches it reaches the Core")
    upstream = args.upstream.rstrip("/")
    setup = JudgeSetup(cfg, _known(cfg), redact_url(upstream), args.client_negotiates, args.record_har)
    judge = JudgeProcess(setup, credentials, args.queue).start()
    trust = ssl.create_default_context(cafile=args.upstream_ca) if args.upstream_ca else None
    app = ObserveProxy(
        upstream,
        judge.submit,
        credentials,
        client=upstream_client(args.upstream_timeout, trust),
        auth_header=str(cfg.wire["auth"]["header"]),
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", server_header=False, date_header=False)
    )
    if args.duration is not None:
        threading.Timer(args.duration, lambda: setattr(server, "should_exit", True)).start()
    print(f"knowledge-conformance observe: forwarding http://{host}:{port} to {redact_url(upstream)}; Ctrl-C ends it")
    started = time.monotonic()
    ending = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # uvicorn stops on SIGINT or SIGTERM, then raises the signal again: here it only ends the run
        server.run(sockets=[listener])
    finally:
        listener.close()
        for sig, handler in ending.items():
            signal.signal(sig, handler)
    tally, sessions = judge.close()
    source = Source("proxy", redact_url(upstream), duration=time.monotonic() - started)
    run = build(tally, source, sessions=sessions, fail_on=args.fail_on)
    write(run, Path(args.reports))
    _verdict_line(run, args.reports)
    return exit_code(run)
