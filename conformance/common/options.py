"""Every option of the suite, declared once: its spellings, type, default, help, and the
commands it belongs to. The pytest plugin (conformance.plugin.options), the command line
(conformance.cli: ``run``, ``client``, ``load``) and the locustfile's distributed mode are
built from this table, so a default or a help text is written in one place.

Parsing these never imports pytest or Locust: ``knowledge-conformance load`` must not import
Locust before it patches the standard library.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

PYTEST, RUN, CLIENT, LOAD, LOCUST = "pytest", "run", "client", "load", "locust"
"""The commands: the pytest plugin, ``knowledge-conformance run|client|load``, and the locustfile."""
SUITE = (PYTEST, RUN)  # the Core suite: the plugin, and the command that runs it
LOCUST_PREFIX = "--kc-"  # Locust's own command line: every option of ours under this prefix


@dataclass(frozen=True)
class Opt:
    name: str
    """The documented spelling, as the pytest plugin offers it (e.g. ``--harness-core``)."""
    help: str
    commands: tuple[str, ...]
    default: Any = None
    type: Callable[[str], Any] | None = None
    action: str | None = None  # "store_true" or "append"
    choices: tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()  # more spellings, wherever the option is offered
    spelled: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a command's own spellings
    helps: Mapping[str, str] = field(default_factory=dict)  # a command where the option means something narrower
    defaults: Mapping[str, Any] = field(default_factory=dict)  # a command with its own default
    required: tuple[str, ...] = ()  # commands where it must be given
    secret: bool = False  # Locust hides its value

    @property
    def key(self) -> str:
        """The option's key (its argparse destination): ``--harness-core`` -> ``harness_core``."""
        return self.name.lstrip("-").replace("-", "_")

    def default_in(self, command: str) -> Any:
        if self.action == "store_true":
            return False
        value = self.defaults.get(command, self.default)
        return list(value) if isinstance(value, list) else value

    def flags(self, command: str) -> tuple[str, ...]:
        if command in self.spelled:
            return self.spelled[command]
        if command == LOCUST:
            return (LOCUST_PREFIX + self.name.lstrip("-"),)
        return (self.name, *self.aliases)

    def kwargs(self, command: str) -> dict[str, Any]:
        """The keyword arguments of ``add_argument`` (argparse) or ``addoption`` (pytest), destination aside."""
        text = self.helps.get(command, self.help)
        out: dict[str, Any] = {"help": f"knowledge-conformance: {text}" if command == LOCUST else text}
        if self.action is not None:
            out["action"] = self.action
        if self.action != "store_true":
            out["default"] = self.default_in(command)
        if self.type is not None:
            out["type"] = self.type
        if self.choices is not None:
            out["choices"] = self.choices
        if command in self.required:
            out["required"] = True
        if self.secret and command == LOCUST:
            out["is_secret"] = True
        return out


OPTIONS: tuple[Opt, ...] = (
    Opt(
        "--target",
        "sim (in-process, default), sim+http (loopback) or the URL of a live Core",
        (*SUITE, LOAD),
        helps={LOAD: "URL of a running Core (default: serve the bundled simulator on a free loopback port)"},
    ),
    Opt(
        "--mcp-target",
        "the Agent Session MCP server to check: an http(s) URL (streamable HTTP) "
        "or a command (stdio); default: [mcp] of the target config, or "
        "the bundled simulator's over both; none: no MCP checks",
        SUITE,
    ),
    Opt(
        "--target-config",
        "TOML file: route, identities, control, wire overrides, tolerances",
        (*SUITE, LOAD, LOCUST),
    ),
    Opt(
        "--run-id",
        "namespace of every workspace and turn identity the run creates "
        "(default: random); give a failed run's ID back to replay it",
        (*SUITE, CLIENT, LOAD, LOCUST),
    ),
    Opt(
        "--sim-quirk",
        "run the bundled simulator with this deliberate deviation",
        (*SUITE, LOAD),
        default=[],
        action="append",
    ),
    Opt("--sim-seed", "seed of the bundled simulator", (PYTEST,), default=0, type=int),
    Opt(
        "--sim-clock-tick",
        "seconds the bundled simulator's frozen clock moves each time it is read "
        "(default 0.000001; 0: it stands still between the control clock's moves)",
        (PYTEST,),
        type=float,
    ),
    Opt("--no-control", "do not use the test-control extension during tests", SUITE, action="store_true"),
    Opt("--realtime", "wait real seconds for expiry when there is no control", SUITE, action="store_true"),
    Opt(
        "--scope",
        "the surfaces and access the verdict covers, SURFACES@ACCESS: server@no-control, server,mcp,tool@control, "
        "server@no-control+realtime (default: every server MUST, today's meaning)",
        SUITE,
    ),
    Opt("--rate-limit", "at most this many requests per second to the target", SUITE, default=0.0, type=float),
    Opt(
        "--concurrency",
        "tests run at once against the target, each worker in a world of its own (1: one at a time); "
        "the same verdict and reports as a serial run; a --rate-limit is shared among them "
        "(default: 12 for a Core an ocean away, a TCP handshake of 60 ms or more; 8 for one a region away, 20 ms or "
        "more; 4 for one a network away, 2 ms or more; else 1; a Core's 429s are waited out)",
        SUITE,
        default=None,
        type=int,
    ),
    Opt(
        "--reports",
        "folder for results.json, report.md, report.html, junit.xml",
        (*SUITE, CLIENT, LOAD, LOCUST),
        default="reports",
        aliases=("--report-dir",),
        spelled={LOCUST: ("--kc-report-dir",)},
    ),
    Opt(
        "--fail-on",
        "which failures make the run non-conformant",
        (*SUITE, CLIENT),
        default="must",
        choices=("must", "should"),
    ),
    Opt("--waivers", "TOML file of [[waiver]] id, justification, expires", (*SUITE, CLIENT)),
    Opt("--requirement", "run only tests tagged with this requirement ID", SUITE, default=[], action="append"),
    Opt("--stateful-examples", "examples of the stateful model (default 20; deep: 200)", SUITE, type=int),
    Opt("--stateful-steps", "steps per example of the stateful model (default 25; deep: 60)", SUITE, type=int),
    Opt(
        "--stateful-seed",
        "seed of the stateful model's random walk (default: fixed, so a run replays; any seed reaches every rule)",
        SUITE,
        type=int,
    ),
    Opt("--deep", "release-gating depth for the stateful model and negative testing", SUITE, action="store_true"),
    Opt(
        "--no-shrink",
        "report the first failing generated sequence without minimising it (faster)",
        SUITE,
        action="store_true",
    ),
    Opt(
        "--harness",
        "check a client instead of a Core: the command of its harness (schemas/harness-protocol.schema.json)",
        (PYTEST, CLIENT),
        required=(CLIENT,),
    ),
    Opt(
        "--harness-core",
        "client checks: the Core URL (with the control extension); default: a served bundled simulator",
        (PYTEST, CLIENT),
        spelled={CLIENT: ("--core",)},
    ),
    Opt(
        "--harness-control-token",
        "client checks: the control credential of that Core (default: the bundled simulator's)",
        (PYTEST, CLIENT),
        spelled={CLIENT: ("--control-token",)},
    ),
    Opt(
        "--harness-timeout",
        "client checks: seconds to wait for each answer",
        (PYTEST, CLIENT),
        default=30.0,
        type=float,
        spelled={CLIENT: ("--timeout",)},
    ),
    Opt(
        "--harness-strict",
        "client checks: also hold the client to this project's choices where the seed is open (schemas/CHOICES.md)",
        (PYTEST, CLIENT),
        action="store_true",
        spelled={CLIENT: ("--strict",)},
    ),
    Opt("--users", "concurrent simulated users, each its own identity (default 8)", (LOAD,), default=8, type=int),
    Opt("--spawn-rate", "users started per second (default 4)", (LOAD,), default=4.0, type=float),
    Opt("--run-time", "how long the load lasts once every user started: 20s, 2m, 1h30m (default 20s)", (LOAD,), "20s"),
    Opt(
        "--identities",
        "accounts minted through control, at least 1 (default: one per user; a run mints 2 or more)",
        (LOAD, LOCUST),
        type=int,
        helps={LOCUST: "accounts each process mints (default 8)"},
        defaults={LOCUST: 8},
    ),
    Opt(
        "--control-token",
        "control credential at --host's /_control/v1 (a served simulator), when the target configuration has no [control]",
        (LOCUST,),
        secret=True,
    ),
)


def options_of(command: str) -> tuple[Opt, ...]:
    return tuple(o for o in OPTIONS if command in o.commands)


def add_arguments(parser: Any, command: str) -> None:
    """Add ``command``'s options to an argparse parser (or Locust's, which takes the same calls)."""
    for opt in options_of(command):
        flags = opt.flags(command)
        dest = f"kc_{opt.key}" if command == LOCUST else opt.key
        named = (
            {}
            if opt.action == "store_true" or opt.choices
            else {"metavar": flags[0].lstrip("-").upper().replace("-", "_")}
        )
        parser.add_argument(*flags, dest=dest, **named, **opt.kwargs(command))


def pytest_arguments(args: argparse.Namespace, command: str) -> list[str]:
    """The plugin's options for what ``command`` was given: each value joined to its flag (pytest
    takes a separate argument naming an existing folder or file for a test path, and would root
    the run, and name its tests, there)."""
    out: list[str] = []
    for opt in options_of(command):
        if PYTEST not in opt.commands:
            continue
        value = getattr(args, opt.key)
        if opt.action == "store_true":
            out += [opt.name] if value else []
        elif opt.action == "append":
            out += [f"{opt.name}={v}" for v in value]
        elif value is not None and value != "":
            out.append(f"{opt.name}={value}")
    return out
