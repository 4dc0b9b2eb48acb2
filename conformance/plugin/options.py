"""The suite's command-line options, added so that they never break another project's pytest.

The plugin is installed as a pytest entry point, so it loads into every pytest session of
the environment. Options are added after the session's initial conftest files have added
theirs, and a name another plugin or conftest already owns is left to it: that project
keeps its own ``--target`` and the suite is still reachable there through the
``--kc-``-prefixed spelling every option has. Values are read through :func:`option`,
which uses this package's own destinations, never another plugin's value of the same name.
The options themselves (spellings, defaults, help) are the table in conformance.common.options.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common.options import PYTEST, Opt, options_of

GROUP = "knowledge-conformance"
OPTIONS: tuple[Opt, ...] = options_of(PYTEST)  # the table's options of the plugin (conformance.common.options)
BY_NAME = {o.name: o for o in OPTIONS}


def dest(opt: Opt) -> str:
    """This package's own destination of an option, never another plugin's."""
    return "kc_" + opt.key


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
        spellings = opt.flags(PYTEST)
        free = [n for n in spellings if n not in taken]
        yielded += [n for n in spellings if n in taken]
        prefixed = "--kc-" + opt.name.lstrip("-")
        names = [*free, *([prefixed] if prefixed not in taken else [])]
        if names:
            group.addoption(*names, dest=dest(opt), **opt.kwargs(PYTEST))
    return yielded


def option(config: pytest.Config, name: str) -> Any:
    """This package's value of option ``name`` (its documented spelling)."""
    opt = BY_NAME[name]
    return getattr(config.option, dest(opt), opt.default_in(PYTEST))


def walk_size(config: pytest.Config, default: tuple[int, int], deep: tuple[int, int]) -> tuple[int, int]:
    """``(examples, steps)`` of a stateful model's random walk: the options when given, else the
    model's own default, or its ``--deep`` size."""
    examples, steps = deep if option(config, "--deep") else default
    return option(config, "--stateful-examples") or examples, option(config, "--stateful-steps") or steps
