"""A suite session's ``ast.parse`` is never interrupted by a garbage collection (conformance.plugin.ast_guard).

Against a broken MCP server, a failed test left unclosed sockets behind; a later collection ran
their finalizers while Hypothesis parsed a module to describe a lambda in schemathesis' negative
strategies (test_negative). Their ``ResourceWarning``, an error in this project, reached pytest's
unraisable-exception hook, whose traceback formatting parses again, and CPython 3.11 failed the
outer parse with ``SystemError: AST constructor recursion depth mismatch``: a harness error, exit 7,
instead of a verdict. The stack was not deep; the inner parse had reset a counter the outer shares.
Here the same chain is driven on purpose: garbage whose finalizer warns, a hook that formats the
traceback as pytest's does, and Hypothesis describing a lambda whose module it must parse whole."""

from __future__ import annotations

import ast
import gc
import importlib.util
import os
import re
import subprocess
import sys
import traceback
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis.internal.reflection import get_pretty_function_description

from conformance.plugin import ast_guard
from conformance.plugin.ast_guard import NEEDED, guard_ast_parse, reuse_traceback_parses
from tests.suite_command import SUITE

ROOT = Path(__file__).resolve().parent.parent


class _Leak:
    """Garbage like an unclosed socket an earlier test left behind: a cycle, so only a collection
    frees it, whose finalizer warns. While armed, each one leaves another, so that every
    collection finds one, wherever it happens."""

    armed = False

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        if _Leak.armed:
            _Leak()
        warnings.warn("unclosed transport", ResourceWarning, stacklevel=1)


def _describe_amid_leaks(folder: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """Hypothesis' description of a lambda it can only find by parsing its whole (large) module,
    made while leaks are collected; with the tracebacks their finalizers' warnings had."""
    token = uuid.uuid4().int % 10**12  # a lambda, and a module, no cache of Hypothesis has seen
    filler = "".join(f"def f{i}(a, b):\n    return [a, b, {i}]\n\n\n" for i in range(1500))
    # The body on a line of its own: the lambda's own line alone parses, but to another lambda,
    # so Hypothesis parses the whole module (as it did schemathesis' strategy module).
    path = folder / f"described_{token}.py"
    path.write_text(f"{filler}described = (\n    lambda x: x\n    + {token}\n)\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    formatted: list[str] = []

    def hook(unraisable: Any) -> None:  # what pytest's unraisable-exception hook does first
        formatted.append(
            "".join(traceback.format_exception(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback))
        )

    monkeypatch.setattr(sys, "unraisablehook", hook)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # as filterwarnings = ["error"] makes it
        _Leak.armed = True
        try:
            _Leak()
            return get_pretty_function_description(module.described), formatted
        finally:
            _Leak.armed = False
            gc.collect()


def test_hypothesis_describes_a_lambda_while_leaked_sockets_are_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    undo = guard_ast_parse()  # what a suite session's pytest_configure does
    try:
        description, formatted = _describe_amid_leaks(tmp_path, monkeypatch)
    finally:
        undo()
    assert re.fullmatch(r"lambda x: x \+ \d+", description), description  # found by parsing the module whole
    assert formatted and all("ResourceWarning: unclosed transport" in f for f in formatted)
    assert getattr(ast.parse, "uninterrupted", False) is False  # undone with the session


@pytest.mark.skipif(not NEEDED, reason="this interpreter keeps the AST constructor's counter per call")
def test_without_the_guard_the_same_description_is_a_harness_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain above is the one that ended the run in exit 7, not a vacuous one."""
    with pytest.raises(SystemError, match="AST constructor recursion depth mismatch"):
        _describe_amid_leaks(tmp_path, monkeypatch)


def test_a_suite_session_parses_uninterrupted(tmp_path: Path) -> None:
    (tmp_path / "parse_probe.py").write_text(
        "import ast\n\n\n"
        "def pytest_collection_finish(session):\n"
        "    print('ast.parse uninterrupted:', getattr(ast.parse, 'uninterrupted', False))\n"
    )
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [*SUITE, "--collect-only", "-p", "parse_probe"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"ast.parse uninterrupted: {NEEDED}" in proc.stdout, proc.stdout[-3000:]


def _failure_text() -> str:
    """pytest's long traceback of a failed assertion, as a failed test's report carries it."""
    from _pytest._code import ExceptionInfo

    try:
        assert [1, 2] == [1, 3]
    except AssertionError:
        info = ExceptionInfo.from_current()
    return str(info.getrepr(style="long"))


def test_tracebacks_reuse_their_parses_and_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest parses a traceback entry's whole file for every failure; with the session's reuse
    the second failure parses nothing, and both read as without it."""
    plain = _failure_text()
    calls: list[str] = []
    original = ast.parse

    def counted(source: Any, filename: Any = "<unknown>", *args: Any, **kwargs: Any) -> Any:
        calls.append(str(filename))
        return original(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counted)
    undo = reuse_traceback_parses()
    try:
        first = _failure_text()
        parsed_first = calls.count("source")
        second = _failure_text()
    finally:
        undo()
    assert ast.parse is counted, "undone"
    assert first == second == plain
    assert parsed_first >= 1 and calls.count("source") == parsed_first, calls


def test_only_pytests_traceback_parses_are_reused() -> None:
    """Any other caller (an assertion rewrite changes its tree) gets a tree of its own."""
    source = "x = 1\n"
    undo = reuse_traceback_parses()
    try:
        assert ast.parse(source, "source", "exec") is not ast.parse(source, "source", "exec")
        namespace = {"__name__": ast_guard.TRACEBACK_SOURCE, "ast": ast}
        exec("def parse(s):\n    return ast.parse(s, 'source', 'exec')\n", namespace)
        assert namespace["parse"](source) is namespace["parse"](source)  # type: ignore[operator]
    finally:
        undo()
