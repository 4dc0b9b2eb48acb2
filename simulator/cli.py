"""``knowledge-sim``: run the reference Core as a fake Core, or list its quirks."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import math
import os
import queue
import re
import socket
import sqlite3
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from simulator.config import SimConfig
from simulator.quirks import QUIRKS

if TYPE_CHECKING:
    from mcp.server import Server

KEEP_ALIVE_SECONDS = 30
LIMIT_CONCURRENCY = 1000
CONTROL_TOKEN_ENV = "KNOWLEDGE_SIM_CONTROL_TOKEN"
"""The control credential when --control-token is not given: an environment variable stays out
of the process list (``ps``), where any local user reads a command line."""


_ROUTE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A route as it stands in a workspace URL."""


def _count(text: str) -> int:
    """A whole number of at least 1 (0 threads or 0 connections at once would serve nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> int:
    """Finite seconds, at least 1, rounded up to whole seconds (the server takes an int)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, at least 1, not {text}")
    return math.ceil(value)


def _port(text: str) -> int:
    """A TCP port: 0 (any free one, named in the banner) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def _listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """The listening socket, bound before the banner names it (so the banner is never wrong, and
    port 0 shows the port it got); raises OSError with the reason when it cannot be bound.
    ``reuse_port``: several processes listen on the one port, the kernel spreads the connections."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="knowledge-sim", description="Reference Core for the agent knowledge contract."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the Core over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8765, help="0 to 65535; 0: any free port (default %(default)s)")
    serve.add_argument(
        "--database",
        default=":memory:",
        help="SQLite file to persist the store (default: a private temporary file, removed at exit)",
    )
    serve.add_argument(
        "--seed",
        type=int,
        default=None,
        help="make IDs, demo tokens and the signing key reproducible (default: random, the key from a secret source)",
    )
    serve.add_argument("--corpus", help="folder of .md/.txt files or a .jsonl file for the demo workspace")
    serve.add_argument(
        "--quirk", action="append", default=[], metavar="NAME", help="deviate on purpose (repeatable); see `quirks`"
    )
    serve.add_argument(
        "--route",
        metavar="NAME",
        help="seed the corpus (--corpus, a conformance corpus kit folder included; default the demo) as a staging "
        "deployment: workspace NAME and NAME-other, a token per identity role, NAME-disabled, NAME-legacy and "
        "NAME-unavailable kept in their state; tokens printed with their role",
    )
    serve.add_argument(
        "--write-target",
        metavar="FILE",
        help="with --route: write a target configuration for knowledge-conformance (URL, identities, workspaces, "
        "[control] unless --no-control, its credential by environment variable, and [mcp])",
    )
    serve.add_argument("--no-control", action="store_true", help="do not expose the test-control extension")
    serve.add_argument(
        "--control-token",
        default=None,
        help=f"credential of the control extension (default: ${CONTROL_TOKEN_ENV} if set, which keeps it out "
        f"of the process list; else {SimConfig.control_token!r}, loopback only)",
    )
    serve.add_argument("--frozen-clock", action="store_true", help="the clock moves only through control")
    serve.add_argument(
        "--wire-names",
        metavar="FILE.toml",
        help="serve other member names: [names.capabilities|limits|turn_context|knowledge_delivery] tables, as in wire-defaults.toml",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="info logs one line per request (never blocking: dropped when stderr is not read); default warning",
    )
    serve.add_argument(
        "--store-threads",
        type=_count,
        default=SimConfig.store_threads,
        help="threads that run turns and long searches beside the event loop; short searches and reads run on "
        "it (default %(default)s)",
    )
    serve.add_argument(
        "--timeout-keep-alive",
        type=_seconds,
        default=KEEP_ALIVE_SECONDS,
        help="seconds an idle kept-alive connection stays open, at least 1, a fraction rounded up to whole "
        "seconds (default %(default)s: longer than the 5 s idle "
        "expiry of common client pools, so the client closes first and a request never races the close)",
    )
    serve.add_argument(
        "--limit-concurrency",
        type=_count,
        default=LIMIT_CONCURRENCY,
        help="connections and requests at once before new ones get 503, at least 1 (default %(default)s): idle or slow "
        "clients cannot use up the process's file limit",
    )
    serve.add_argument(
        "--reuse-port",
        action="store_true",
        help="share the port with other knowledge-sim processes on the same --database (SO_REUSEPORT, Linux): "
        "the kernel spreads connections over them; searches and reads scale with the processes, the control "
        "extension's faults and clock are each process's own",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT|:*]",
        help="a Host header the MCP endpoint accepts beyond the loopback names (DNS-rebinding protection; "
        "repeatable; default: 127.0.0.1, localhost and [::1], any port)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="SCHEME://HOST[:PORT|:*]",
        help="an Origin header the MCP endpoint accepts beyond the loopback ones (repeatable; a request "
        "without Origin is accepted)",
    )
    serve.add_argument(
        "--embedder",
        default="hashed",
        help="search_knowledge's semantic embedding (default: hashed, "
        "character n-grams, offline and deterministic; wordllama: a real model shipped in its wheel, "
        "offline too, needs the embeddings extra)",
    )
    mcp = sub.add_parser(
        "mcp",
        help="serve an MCP path over stdio (the Agent Session path also rides `serve`, "
        "as streamable HTTP at /agent-api/v1/workspaces/<route>/mcp)",
    )
    mcp.add_argument(
        "--path",
        choices=("agent", "jobs"),
        default="agent",
        help="agent: the Agent Session knowledge tools; jobs: the Fixed Client Token job tools",
    )
    mcp.add_argument("--core-url", help="the Core to act on (default: an in-process simulator with the demo workspace)")
    mcp.add_argument("--route", help="the workspace route of the session (default: the demo workspace)")
    mcp.add_argument("--seed", type=int, default=0, help="seed of the in-process simulator")
    mcp.add_argument("--job-seconds", type=float, default=1.5, help="how long a governed job stays pending")
    mcp.add_argument("--quirk", action="append", default=[], metavar="NAME", help="deviate on purpose (repeatable)")
    sub.add_parser("quirks", help="list the quirks and the requirements each violates")
    return parser


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread; when stderr is not read and the queue is full, the
    record is dropped: a log line never stalls serving."""

    dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            type(self).dropped += 1


def _log_without_blocking(level: str) -> None:
    records: queue.Queue[logging.LogRecord] = queue.Queue(maxsize=10_000)
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(logging.Formatter("%(message)s"))
    logging.handlers.QueueListener(records, writer).start()  # a daemon thread: it may block, serving does not
    root = logging.getLogger()
    root.handlers[:] = [_DroppingQueueHandler(records)]
    root.setLevel(level)


def _raise_open_file_limit() -> None:
    """Idle connections cost a file each: use the hard limit, not the (often 1024) soft one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard)
            )
    except (ImportError, ValueError, OSError):
        pass  # not on this platform, or not allowed: keep the soft limit


def _exit_through_python_on_sigterm() -> None:
    """uvicorn shuts down on SIGTERM, then raises the signal again; by default that ends the
    process on the spot, before exit handlers run (the temporary store file would stay behind).
    Exit through Python instead, with the status a SIGTERM gives."""
    import signal

    def leave(signum: int, frame: object) -> None:
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


SUITE_AGENT_TOKEN_ENV = "KC_AGENT_TOKEN"
"""Where knowledge-conformance hands a configured stdio MCP server its session's token (its
``[mcp].command``): ``knowledge-sim mcp`` reads it when its own variable is not set."""


def _control_table(args: argparse.Namespace, url: str) -> list[str]:
    """``[control]`` of a written target configuration: the URL of the extension's root and its
    credential by reference, never a secret in the file (the loopback default is no secret)."""
    if args.no_control:
        return []
    env_token = f'{{env = "{CONTROL_TOKEN_ENV}"}}'
    if args.control_token:
        why = f"the --control-token given to knowledge-sim serve: set {CONTROL_TOKEN_ENV} to it for the run"
        token = env_token
    elif os.environ.get(CONTROL_TOKEN_ENV):
        why = f"read from {CONTROL_TOKEN_ENV}, as knowledge-sim serve read it"
        token = env_token
    else:
        why = "knowledge-sim serve's loopback default (no credential was given): no secret"
        token = f'"{SimConfig.control_token}"'
    return ["", "[control]", f'url = "{url}/_control/v1"', f"token = {token}  # {why}"]


def _mcp_table(args: argparse.Namespace, url: str) -> list[str]:
    """``[mcp]`` of a written target configuration: the Agent Session path as this server mounts it
    (streamable HTTP, per route) and as ``knowledge-sim mcp`` serves it over stdio against this
    server, and the Fixed Client Token job path, so a run from the file checks every MCP surface."""
    quirks = [part for name in args.quirk for part in ("--quirk", name)]
    base = [sys.executable, "-m", "simulator.cli", "mcp"]
    agent = [*base, "--core-url", url, "--route", "{route}", *quirks]
    jobs = [*base, "--path", "jobs", *quirks]
    return [
        "",
        "[mcp]",
        f'url = "{url}/agent-api/v1/workspaces/{{route}}/mcp"  # the session\'s own token (default)',
        f"command = {_toml_list(agent)}  # the session's token in {SUITE_AGENT_TOKEN_ENV}",
        f"jobs_command = {_toml_list(jobs)}",
    ]


def _toml_list(values: list[str]) -> str:
    """A TOML array of strings (JSON's string escapes are TOML's basic-string escapes)."""
    import json

    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _loopback(host: str) -> bool:
    """Is ``host`` reachable from this machine only? (A name other than localhost counts as public.)"""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "quirks":
        try:
            for quirk in QUIRKS.values():
                strict = (
                    "  (seed-allowed: caught with [wire] codes.strict = true)"
                    if quirk.strict_only
                    else "  (only under concurrency: caught by knowledge-conformance load)"
                    if quirk.caught_by == "load"
                    else ""
                )
                print(f"{quirk.name:32} {','.join(quirk.violates):28} {quirk.description}{strict}")
            sys.stdout.flush()
        except BrokenPipeError:  # `knowledge-sim quirks | head`: the reader has all it wanted
            sys.stdout = None  # nothing left to flush at exit
        return 0
    if args.command == "mcp":
        from simulator.quirks import parse_quirks

        try:
            parse_quirks(args.quirk)
        except ValueError as exc:
            print(f"knowledge-sim: {exc}", file=sys.stderr)
            return 2
        return _run_stdio(
            args.path,
            core_url=args.core_url,
            route=args.route,
            quirks=args.quirk,
            job_seconds=args.job_seconds,
            seed=args.seed,
        )
    from simulator.app import create_app
    from simulator.corpus import (
        DEMO_DIR,
        KIT_MANIFEST,
        load_corpus,
        roles_in,
        seed_demo,
        seed_staging,
        target_toml,
    )
    from simulator.wire_names import load_wire_names

    for flag, value in (("--corpus", args.corpus), ("--route", args.route)):
        if value is not None and not value.strip():  # an unset variable: the server started with no workspace
            print(f"knowledge-sim: {flag} is empty (an unset variable?)", file=sys.stderr)
            return 2
    if args.route is not None and not _ROUTE.fullmatch(args.route):
        print(
            f"knowledge-sim: --route {args.route!r} cannot stand in a URL path: letters, digits, '-', '_', '.'",
            file=sys.stderr,
        )
        return 2
    control_token = args.control_token or os.environ.get(CONTROL_TOKEN_ENV) or None  # empty counts as not given
    if control_token is None and not args.no_control and not _loopback(args.host):
        print(
            f"knowledge-sim: refusing to serve the control extension on {args.host} with the default credential; "
            f"give --control-token or set {CONTROL_TOKEN_ENV} (or --no-control)",
            file=sys.stderr,
        )
        return 2
    _log_without_blocking(args.log_level.upper())
    _raise_open_file_limit()
    try:
        app = create_app(
            SimConfig(
                seed=args.seed,
                database=args.database,
                concurrent=True,
                store_threads=args.store_threads,
                control_enabled=not args.no_control,
                control_token=control_token or SimConfig.control_token,
                frozen_clock=args.frozen_clock,
                clock_start=None if not args.frozen_clock else SimConfig.clock_start,
                demo=args.corpus is None and args.route is None,
                wire_names=load_wire_names(args.wire_names) if args.wire_names else {},
                embedder=args.embedder,
                mcp_allowed_hosts=tuple(args.allow_host),
                mcp_allowed_origins=tuple(args.allow_origin),
            ),
            quirks=args.quirk,
        )
        roles: dict[str, Any] = {}
        states: dict[str, Any] = {}
        if args.write_target and not args.route:
            raise ValueError("--write-target needs --route")
        core = app.state.core
        if args.route:
            if core.store.workspace(args.route) is None:
                roles, states = seed_staging(core, load_corpus(args.corpus or str(DEMO_DIR)), args.route)
            else:  # a kept store: the roles its identities already hold
                roles, states = roles_in(core.store, args.route, core.config.hub)
        else:
            if args.corpus and not core.store.routes():
                seed_demo(core, load_corpus(args.corpus))
            roles, _ = roles_in(core.store, core.config.demo_route, core.config.hub)
    except (ValueError, sqlite3.Error, OSError) as exc:  # OSError: the index folder beside the store file
        print(
            f"knowledge-sim: {exc}" + (f" ({args.database})" if isinstance(exc, sqlite3.Error) else ""), file=sys.stderr
        )
        return 2
    try:
        listening = _listen(args.host, args.port, reuse_port=args.reuse_port)
    except OSError as exc:
        print(f"knowledge-sim: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    port = listening.getsockname()[1]
    core = app.state.core
    print(
        f"knowledge-sim on http://{args.host}:{port}  workspaces: {', '.join(core.store.routes())}",
        file=sys.stderr,
    )
    # Every token printed is labelled with its role; one without a role (minted through control, or
    # kept in the store from an earlier start) is counted, never printed bare.
    labels = {ident.token: role for role, ident in roles.items()}
    labels.update({ident.token: f"workspace {state}" for state, ident in states.items()})
    unlabelled = 0
    for route in core.store.routes():
        mode, _ = core.mode(route)
        for ident in core.store.identities(route):
            if ident.token not in labels:
                unlabelled += 1
                continue
            print(
                f"  {labels[ident.token]}: route {route}{'' if mode == 'normal' else f' ({mode})'}: "
                f"account {ident.account}, session {ident.session_id}: {ident.token}",
                file=sys.stderr,
            )
    if unlabelled:
        print(
            f"  {unlabelled} more identities of no role (minted through control or kept in the store): not printed",
            file=sys.stderr,
        )
    if args.write_target and roles:
        from pathlib import Path

        kit = args.corpus is not None and (Path(args.corpus) / KIT_MANIFEST).is_file()
        written = Path(args.write_target)
        written.touch(mode=0o600)
        url = f"http://{args.host}:{port}"
        tables = [*_control_table(args, url), *_mcp_table(args, url)]
        text = target_toml(url, args.route, roles, states, kit=kit) + "\n".join(tables) + "\n"
        written.write_text(text, "utf-8")
        print(f"  target configuration written to {written}", file=sys.stderr)
    if not args.no_control:
        credential = "<control token>" if control_token else f"{SimConfig.control_token} (the loopback default)"
        print(f"  control extension at /_control/v1 (Authorization: Bearer {credential})", file=sys.stderr)
    print(
        "  Agent Session MCP (streamable HTTP) at /agent-api/v1/workspaces/<route>/mcp (Authorization: Bearer <token>)",
        file=sys.stderr,
    )
    _exit_through_python_on_sigterm()
    serve_socket(app, listening, timeout_keep_alive=args.timeout_keep_alive, limit_concurrency=args.limit_concurrency)
    return 0


def serve_socket(
    app: Any,
    listening: socket.socket,
    *,
    timeout_keep_alive: int = KEEP_ALIVE_SECONDS,
    limit_concurrency: int = LIMIT_CONCURRENCY,
) -> None:
    """Serve ``app`` on the bound socket with uvicorn as ``knowledge-sim serve`` does. The
    throughput benchmark serves its yardsticks (a bare endpoint, a same-work app) through this
    too, so every server it compares runs on one HTTP stack (uvicorn's choice of h11 or
    httptools and of event loop, one process, the same limits)."""
    import uvicorn

    # The bound socket itself, not its file descriptor: uvicorn takes an fd for a Unix socket, so its
    # connections would keep Nagle's algorithm and every response written in two parts would wait for
    # the client's delayed ACK (about 40 ms a request on Linux). As a TCP socket, asyncio sets TCP_NODELAY.
    config = uvicorn.Config(  # no WebSocket protocol: the Core and its MCP path speak HTTP only
        app,
        log_level="warning",
        timeout_keep_alive=timeout_keep_alive,
        limit_concurrency=limit_concurrency,
        ws="none",
    )
    uvicorn.Server(config).run(sockets=[listening])


def serve_on_port(app: Any, host: str, port: int) -> None:
    """``serve_socket`` on a socket bound here (the benchmark's yardsticks)."""
    serve_socket(app, _listen(host, port))


async def _serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _run_stdio(
    path: str, *, core_url: str | None, route: str | None, quirks: list[str], job_seconds: float, seed: int = 0
) -> NoReturn:
    import time

    import anyio
    import httpx

    from simulator.mcp.server import TOKEN_ENV, agent_server, job_server
    from simulator.mcp.tools import CoreHttp, Session
    from simulator.miniatures.mcp import agent_class, job_class

    if path == "jobs":
        server = job_server(job_class(quirks)(time.monotonic, job_seconds))
    else:
        token = os.environ.get(TOKEN_ENV) or os.environ.get(SUITE_AGENT_TOKEN_ENV, "")
        if core_url:
            client = httpx.AsyncClient(base_url=core_url.rstrip("/"), timeout=30)
        else:
            from simulator.app import create_app

            app = create_app(quirks=quirks, seed=seed, demo=True)
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim.local")
            if not token or not route:
                core = app.state.core
                route = route or core.store.routes()[0]
                token = token or core.store.identities(route)[0].token
        session = Session(token=token or None, route=route)
        server = agent_server(agent_class(quirks)(CoreHttp(client)), lambda _ctx: session)
    anyio.run(_serve_stdio, server)
    # The client closed stdin: the session is over and nothing is left to save (an in-process
    # Core, if any, is in memory). Tearing the interpreter down would keep the client waiting
    # some 0.4 s for the exit of every session it closes.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
