"""``ast.parse`` that no garbage collection interrupts, for the length of a suite session.

CPython 3.11 keeps the counter with which ``ast.parse`` checks its own recursion (while it turns
the parsed tree into ``ast`` objects) in state shared by the whole interpreter. A collection that
runs inside that step runs finalizers, and a finalizer can parse again: an unclosed socket's
``ResourceWarning`` is an error under ``filterwarnings = ["error"]``, goes to pytest's
unraisable-exception hook, which formats its traceback, and Python 3.11's ``traceback`` parses
each source line to place its carets. The inner parse resets the shared counter, and the outer
one then fails with ``SystemError: AST constructor recursion depth mismatch (before=N,
after=M)``, however shallow the stack (N is three times its depth in frames). Python 3.12 keeps
the counter per call.

Hypothesis parses source to describe a lambda (a strategy's ``repr``, made while it validates
one), to read a filter's bounds and to key its database; pytest parses a module it rewrites;
``inspect`` parses a builtin's text signature. Any of them, in any test, could meet the garbage
an earlier test left behind (a failed test's traceback keeps its MCP sessions, and their
sockets, alive until the next test starts), and the run ended in a harness error, exit 7, that
was no target's. So in a suite session an ``ast.parse`` that fails with exactly that error is
parsed again (the counter starts anew each call), and after three such failures once more with
the collector paused; every other error propagates.
"""

from __future__ import annotations

import ast
import functools
import gc
import sys
import threading
from collections.abc import Callable
from typing import Any

NEEDED = sys.version_info < (3, 12)
"""Whether this interpreter shares the counter (3.12 and later keep it per call)."""

_lock = threading.RLock()
_parsing = 0  # parses under way, in every thread
_resume = False  # whether the collector ran before the first of them paused it


def _pause() -> None:
    global _parsing, _resume
    with _lock:
        if _parsing == 0:
            _resume = gc.isenabled()
        _parsing += 1
        gc.disable()


def _unpause() -> None:
    global _parsing
    with _lock:
        _parsing -= 1
        if _parsing == 0 and _resume:
            gc.enable()


MISMATCH = "AST constructor recursion depth mismatch"
RETRIES = 3
"""Parses tried as they are before the last one runs with the collector paused. Pausing it for
every parse coincided with the endless-line harness run's peak memory going from 122 MB to some
700 MB in two whole test runs (not proven to be the cause), so the pause is the last resort."""


def uninterrupted(parse: Callable[..., Any]) -> Callable[..., Any]:
    """``parse`` run with the garbage collector paused (other threads' parses included: the last
    one to return lets it run again, if it ran before the first began)."""

    @functools.wraps(parse)
    def parse_uninterrupted(*args: Any, **kwargs: Any) -> Any:
        for _ in range(RETRIES):  # the interrupted parse, parsed again: the counter starts anew each call
            try:
                return parse(*args, **kwargs)
            except SystemError as exc:
                if MISMATCH not in str(exc):
                    raise
        _pause()  # interrupted every time: once more with the collector paused
        try:
            return parse(*args, **kwargs)
        finally:
            _unpause()

    parse_uninterrupted.uninterrupted = True  # type: ignore[attr-defined]
    return parse_uninterrupted


def guard_ast_parse(*, needed: bool = NEEDED) -> Callable[[], None]:
    """Make ``ast.parse`` uninterrupted where this interpreter needs it; returns what undoes that.
    Callers that look ``ast.parse`` up when they call it (Hypothesis, pytest, ``inspect``,
    ``traceback``) get the guarded one."""
    original = ast.parse
    if not needed or getattr(original, "uninterrupted", False):
        return lambda: None
    guarded = uninterrupted(original)
    ast.parse = guarded

    def undo() -> None:
        if ast.parse is guarded:
            ast.parse = original

    return undo


TRACEBACK_SOURCE = "_pytest._code.source"
"""The pytest module that parses a whole source file to find the statement around each line of a
failure's traceback: again for every entry of every failed test (a run against a broken Core
fails dozens, and an entry in Hypothesis' engine parses some 2,000 lines each time)."""


def reuse_traceback_parses(*, size: int = 32) -> Callable[[], None]:
    """``ast.parse`` answers pytest's traceback parses of a source it parsed before with the same
    tree (pytest only reads it); every other caller still gets a tree of its own. Returns what undoes that."""
    original = ast.parse

    @functools.lru_cache(maxsize=size)
    def parsed(source: str) -> tuple[Any, SyntaxError | None]:
        try:
            return original(source, "source", "exec"), None
        except SyntaxError as exc:  # pytest also parses a statement's first lines alone, which need not parse
            return None, exc

    @functools.wraps(original)
    def parse_reusing(source: Any, filename: Any = "<unknown>", mode: str = "exec", *args: Any, **kwargs: Any) -> Any:
        if (
            isinstance(source, str)
            and filename == "source"
            and mode == "exec"
            and not args
            and not kwargs
            and sys._getframe(1).f_globals.get("__name__") == TRACEBACK_SOURCE
        ):
            tree, error = parsed(source)
            if error is not None:
                raise type(error)(*error.args)
            return tree
        return original(source, filename, mode, *args, **kwargs)

    parse_reusing.uninterrupted = getattr(original, "uninterrupted", False)  # type: ignore[attr-defined]
    ast.parse = parse_reusing

    def undo() -> None:
        if ast.parse is parse_reusing:
            ast.parse = original

    return undo
