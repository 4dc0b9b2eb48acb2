"""Requirements as registered rules: a check names its catalogue ID once, where it is registered.

Each surface keeps its registrations in its own ``rules.py`` (``READ_002 = rule("READ-002")``),
written from the catalogue by ``tools/generate_rules.py``; an ID the catalogue does not have is an
error when that module is imported, never after a run.
Checks and marks name the handle through the surface's rules module
(``from conformance.server import rules as server``; ``@R(server.READ_002)``,
``expect(cond, server.READ_002, message)``), so a misspelt handle is an error that ruff and mypy
see before anything runs, and an ID is written twice: in the catalogue and at its registration.
A test whose own code names a rule its marks do not claim is refused at collection (:func:`named_in`).

What a test verifies follows from the checks that ran in it: every check that passes records
its rule in the active :class:`Ledger`, and the plugin keeps one ledger per test. A check that
only raises (``raise READ_002.violated(...)``) records nothing; :meth:`Rule.held` records a rule
whose check is not one condition (a comparison the caller made itself, a model's judgement).
"""

from __future__ import annotations

import inspect
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from conformance.common import aside
from conformance.common.outcomes import WITNESSES, ContractViolation
from knowledge_schemas import load_catalogue


class Rule(str):
    """One requirement of the catalogue; a ``str`` (its ID), so it is a key, a JSON value and a mark argument."""

    __slots__ = ()

    def held(self) -> None:
        """Record that a check of this rule ran and passed."""
        _active.record(self)

    def violated(self, message: str) -> ContractViolation:
        """The violation of this rule, to raise."""
        return ContractViolation(self, message)

    def fail(self, message: str) -> NoReturn:
        raise ContractViolation(self, message)


def rule(requirement_id: str) -> Rule:
    """Register ``requirement_id``: it must be in the catalogue."""
    if requirement_id not in load_catalogue():
        raise LookupError(f"{requirement_id!r} is not a requirement of the catalogue (schemas/requirements.yaml)")
    return Rule(requirement_id)


def expect(condition: object, requirement: Rule, message: str | Callable[[], str]) -> None:
    """The check of one rule: a violation when ``condition`` is false, else a pass in the ledger.
    ``message`` may be a function that makes it, called only on a violation: a message that
    scrubs and clips what a Core answered costs more than the check, which nearly always passes."""
    if not condition:
        raise ContractViolation(requirement, message if isinstance(message, str) else message())
    _active.record(requirement)


def named_in(function: Callable[..., Any]) -> frozenset[Rule]:
    """The rules ``function``'s own code names (its inner functions, lambdas and comprehensions
    included, the helpers it calls not): a handle it reads as a global or a closure's variable
    (``READ_002``), or from such a module (``server.READ_002``). Read from the compiled code, so
    nothing is parsed."""
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return frozenset()
    cells = getattr(function, "__closure__", None) or ()
    scope: dict[str, Any] = {
        **getattr(function, "__globals__", {}),
        **{name: cell.cell_contents for name, cell in zip(code.co_freevars, cells, strict=True) if _filled(cell)},
    }
    names: set[str] = set()
    pending = [code]
    while pending:
        current = pending.pop()
        names.update(current.co_names, current.co_freevars)
        pending += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    modules = [v for n in names if isinstance(v := scope.get(n), types.ModuleType)]
    found = {v for n in names if isinstance(v := scope.get(n), Rule)}
    found.update(v for m in modules for n in names if isinstance(v := getattr(m, n, None), Rule))
    return frozenset(found)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def held(requirements: Iterable[str]) -> None:
    """Record several rules at once: those a model judged to have run on a definite prediction."""
    for requirement in requirements:
        _active.record(requirement)


VIOLATIONS_KEPT = 8


class Ledger:
    """The rules whose checks passed while it was active (thread-safe: load users and servers share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passed: dict[str, int] = {}
        self._violations: list[ContractViolation] = []

    def witness(self, violation: ContractViolation) -> None:
        with self._lock:
            if len(self._violations) < VIOLATIONS_KEPT:
                self._violations.append(violation)

    @property
    def first_violation(self) -> ContractViolation | None:
        """The first violation made while the ledger was active, raised or not."""
        with self._lock:
            return self._violations[0] if self._violations else None

    def record(self, requirement: str) -> None:
        with self._lock:
            self._passed[requirement] = self._passed.get(requirement, 0) + 1

    @property
    def passed(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._passed)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._passed)

    def clear(self) -> None:
        with self._lock:
            self._passed.clear()


class _Active:
    """The ledger checks record into: one per test (set by the plugin) or per load step."""

    def __init__(self) -> None:
        self.ledger = Ledger()  # outside any test: recorded, never reported
        self.set_aside = Ledger()  # work set aside (conformance.common.aside): recorded, never reported

    def _current(self) -> Ledger:
        return self.set_aside if aside.active() else self.ledger

    def record(self, requirement: str) -> None:
        self._current().record(requirement)

    def witness(self, violation: ContractViolation) -> None:
        self._current().witness(violation)


_active = _Active()
WITNESSES.append(_active.witness)


def record_into(ledger: Ledger) -> None:
    """From now on, for the whole process, checks record into ``ledger``: a load run's users
    interleave on one thread, so no ``with`` block could tell their steps apart (nor need to:
    a load run counts passes per rule, not per step)."""
    _active.ledger = ledger


@contextmanager
def recording(ledger: Ledger | None = None) -> Iterator[Ledger]:
    """Make ``ledger`` (a new one by default) the one checks record into, for the ``with`` block."""
    mine = ledger if ledger is not None else Ledger()
    before, _active.ledger = _active.ledger, mine
    try:
        yield mine
    finally:
        _active.ledger = before
