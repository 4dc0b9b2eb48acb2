"""The suite's command-line options, added so that they never break another project's pytest.

The plugin is installed as a pytest entry point, so it loads into every pytest session of
the environment. Options are added after the session's initial conftest files have added
theirs, and a name another plugin or conftest already owns is left to it: that project
keeps its own ``--target`` and the suite is still reachable there through the
``--kc-``-prefixed spelling every option has. Values are read through :func:`option`,
which uses this package's own destinations, never another plugin's value of the same name.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

GROUP = "knowledge-conformance"


class Option(NamedTuple):
    name: str  # the documented spelling, e.g. "--target"
    aliases: tuple[str, ...]
    kwargs: dict[str, Any]

    @property
    def dest(self) -> str:
        return "kc_" + self.name.lstrip("-").replace("-", "_")

    @property
    def default(self) -> Any:
        if self.kwargs.get("action") == "store_true":
            return False
        return self.kwargs.get("default")


OPTIONS: tuple[Option, ...] = (
    Option(
        "--target",
        (),
        {"default": None, "help": "sim (in-process, default), sim+http (loopback) or the URL of a live Core"},
    ),
    Option(
        "--mcp-target",
        (),
        {
            "default": None,
            "help": "the Agent Session MCP server to check: an http(s) URL (streamable HTTP) "
            "or a command (stdio); default: [mcp] of the target config, or "
            "the bundled simulator's over both; none: no MCP checks",
        },
    ),
    Option(
        "--target-config",
        (),
        {"default": None, "help": "TOML file: route, identities, control, wire overrides, tolerances"},
    ),
    Option(
        "--run-id",
        (),
        {
            "default": None,
            "help": "namespace of every workspace and turn identity the run creates "
            "(default: random); give a failed run's ID back to replay it",
        },
    ),
    Option(
        "--sim-quirk",
        (),
        {"action": "append", "default": [], "help": "run the bundled simulator with this deliberate deviation"},
    ),
    Option("--sim-seed", (), {"type": int, "default": 0, "help": "seed of the bundled simulator"}),
    Option("--no-control", (), {"action": "store_true", "help": "do not use the test-control extension during tests"}),
    Option("--realtime", (), {"action": "store_true", "help": "wait real seconds for expiry when there is no control"}),
    Option(
        "--rate-limit",
        (),
        {"type": float, "default": 0.0, "help": "at most this many requests per second to the target"},
    ),
    Option(
        "--reports",
        ("--report-dir",),
        {"default": "reports", "help": "folder for results.json, report.md, report.html, junit.xml"},
    ),
    Option(
        "--fail-on",
        (),
        {"choices": ("must", "should"), "default": "must", "help": "which failures make the run non-conformant"},
    ),
    Option("--waivers", (), {"default": None, "help": "TOML file of [[waiver]] id, justification, expires"}),
    Option(
        "--requirement",
        (),
        {"action": "append", "default": [], "help": "run only tests tagged with this requirement ID"},
    ),
    Option(
        "--stateful-examples",
        (),
        {"type": int, "default": None, "help": "examples of the stateful model (default 20; deep: 200)"},
    ),
    Option(
        "--stateful-steps",
        (),
        {"type": int, "default": None, "help": "steps per example of the stateful model (default 25; deep: 60)"},
    ),
    Option(
        "--stateful-seed",
        (),
        {
            "type": int,
            "default": None,
            "help": "seed of the stateful model's random walk (default: fixed, "
            "so a run replays; any seed reaches every rule)",
        },
    ),
    Option(
        "--deep",
        (),
        {"action": "store_true", "help": "release-gating depth for the stateful model and negative testing"},
    ),
    Option(
        "--no-shrink",
        (),
        {"action": "store_true", "help": "report the first failing generated sequence without minimising it (faster)"},
    ),
    Option(
        "--harness",
        (),
        {
            "default": None,
            "help": "check a client instead of a Core: the command of its harness "
            "(schemas/harness-protocol.schema.json)",
        },
    ),
    Option(
        "--harness-core",
        (),
        {
            "default": None,
            "help": "client checks: the Core URL (with the control extension); default: a served bundled simulator",
        },
    ),
    Option(
        "--harness-control-token",
        (),
        {"default": None, "help": "client checks: the control credential of --harness-core"},
    ),
    Option(
        "--harness-timeout",
        (),
        {"type": float, "default": 30.0, "help": "client checks: seconds to wait for each answer"},
    ),
)
BY_NAME = {o.name: o for o in OPTIONS}


def _taken(parser: pytest.Parser) -> set[str]:
    """Option strings other plugins and conftest files have added (pytest offers no public listing)."""
    groups = [*getattr(parser, "_groups", []), getattr(parser, "_anonymous", None)]
    return {name for group in groups if group is not None for opt in group.options for name in opt.names()}


def add_options(parser: pytest.Parser) -> list[str]:
    """Add every option under its ``--kc-`` name, and its documented names where still free;
    returns the documented names left to another owner."""
    group = parser.getgroup(GROUP, "knowledge contract conformance")
    taken = _taken(parser)
    yielded: list[str] = []
    for opt in OPTIONS:
        free = [n for n in (opt.name, *opt.aliases) if n not in taken]
        yielded += [n for n in (opt.name, *opt.aliases) if n in taken]
        prefixed = "--kc-" + opt.name.lstrip("-")
        names = [*free, *([prefixed] if prefixed not in taken else [])]
        if names:
            group.addoption(*names, dest=opt.dest, **opt.kwargs)
    return yielded


def option(config: pytest.Config, name: str) -> Any:
    """This package's value of option ``name`` (its documented spelling)."""
    opt = BY_NAME[name]
    return getattr(config.option, opt.dest, opt.default)


def walk_size(config: pytest.Config, default: tuple[int, int], deep: tuple[int, int]) -> tuple[int, int]:
    """``(examples, steps)`` of a stateful model's random walk: the options when given, else the
    model's own default, or its ``--deep`` size."""
    examples, steps = deep if option(config, "--deep") else default
    return option(config, "--stateful-examples") or examples, option(config, "--stateful-steps") or steps
