"""What both stateful models (the Core's, ``conformance.server.stateful``, and search_knowledge's,
``conformance.search_knowledge.stateful``) share, so that they have one shape: a module-level
``RuleBasedStateMachine`` whose ``machine(...)`` factory binds a subclass to its world and to a
fresh :class:`Reach`, the one record of what a walk verified; Hypothesis settings that replay; and
the scripted tour's recorder that prints its steps as Hypothesis prints a failing walk.

A test of either model is the same few lines::

    walk = machine(...)
    with recording():  # the model's own account counts, not each check's
        tour(walk)
        run_walk(walk, settings=walk_settings(...))
    held(walk.reach.verified())

A long walk is cut into :func:`walk_parts`, each a test of its own, so that a run with workers
spreads it instead of waiting on one test of hundreds of sequential requests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import RuleBasedStateMachine

F = TypeVar("F", bound=Callable[..., Any])
_TAGS = "kc_requirements"  # the attribute ``tagged`` leaves on a rule


@dataclass
class Reach:
    """What a tour and a walk reached: the machine rules that ran, and per machine rule the
    requirement IDs whose checks ran on a definite prediction. ``tags``: per machine rule, the IDs
    it checks (``tagged``); a claim hangs on every rule tagged with it."""

    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rules: set[str] = field(default_factory=set)
    checked: dict[str, set[str]] = field(default_factory=dict)

    def of(self, rule: str) -> set[str]:
        """The IDs checked while ``rule`` ran: the set its checks add to."""
        return self.checked.setdefault(rule, set())

    def verified(self) -> set[str]:
        """IDs checked at least once whose every tagged rule was reached."""
        seen = set().union(*self.checked.values()) if self.checked else set()
        return {rid for rid in seen if all(rule in self.rules for rule, ids in self.tags.items() if rid in ids)}


def tagged(*ids: str) -> Callable[[F], F]:
    """Tag a machine rule with the requirement IDs it checks, and record in the machine's
    ``reach`` that it ran (its checks then go to ``reach.of(rule)``: ``self.rule`` names it)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.reach.rules.add(fn.__name__)
            self.rule = fn.__name__
            return fn(self, *args, **kwargs)

        setattr(run, _TAGS, ids)
        return run  # type: ignore[return-value]

    return wrap


M = TypeVar("M", bound=type[RuleBasedStateMachine])


def seeded(walk: M, walk_seed: int | str) -> M:
    """``walk`` (a ``machine(...)`` subclass) seeded with ``walk_seed``, which it also keeps for
    :func:`run_walk`."""
    walk.walk_seed = walk_seed
    return seed(walk_seed)(walk)


def run_walk(walk: type[RuleBasedStateMachine], *, settings: settings) -> None:
    """``run_state_machine_as_test`` over ``walk`` (made by :func:`seeded`), through a plain
    factory with the same seed. Hypothesis keys each walk by its factory's source, and for a class
    Python 3.11 finds that source by parsing and tokenizing the whole module: some 35 ms a walk, a
    seventh of a second a run. The walk, its seed and what it prints are the same."""
    from hypothesis.stateful import run_state_machine_as_test

    def state_machine() -> RuleBasedStateMachine:
        return walk()

    factory: Any = seed(walk.walk_seed)(state_machine)  # type: ignore[attr-defined]
    run_state_machine_as_test(factory, settings=settings)  # any callable that makes a machine, its docs say


def tags(machine: type[RuleBasedStateMachine]) -> dict[str, tuple[str, ...]]:
    """Per rule of ``machine``, the requirement IDs it is tagged with."""
    return {
        name: ids
        for cls in reversed(machine.__mro__)
        for name, value in vars(cls).items()
        if (ids := getattr(value, _TAGS, None)) is not None
    }


def claims(machine: type[RuleBasedStateMachine]) -> tuple[str, ...]:
    """Every ID a rule of ``machine`` is tagged with: what a walk of it may verify."""
    return tuple(sorted(set().union(*tags(machine).values())))


class Steps:
    """The tour's machine, keeping each call as a line of the program Hypothesis prints for a
    failing walk, so a report shows the tour's steps the same way."""

    def __init__(self, state: RuleBasedStateMachine) -> None:
        self._state = state
        self.lines = [f"state = {type(state).__name__}()"]

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            self.lines.append(f"state.{name}({', '.join(map(repr, args))})")
            return getattr(self._state, name)(*args)

        return call


WALK_PARTS = 4
"""How many tests the Core model's random walk is cut into, beside the scripted tour's own.
Against a Core 50 ms away the model's one test of some 800 sequential requests took 85 s, most
of a whole control run with MCP on 8 workers; in parts, workers share it. A serial run does the
same work either way."""


@dataclass(frozen=True)
class WalkPart:
    """One test of a model: the scripted tour (``index`` 0), or a share of the random walk's
    examples with a seed of its own. The first share keeps the walk's seed, so ``--stateful-seed``
    still names the walk."""

    index: int
    of: int  # shares of the walk
    examples: int

    @property
    def tours(self) -> bool:
        return self.index == 0

    def seed(self, walk_seed: int) -> int | str:
        return walk_seed if self.index <= 1 else f"{walk_seed}/{self.index - 1}"

    def __str__(self) -> str:
        return "tour" if self.tours else f"walk{self.index}of{self.of}"


def walk_parts(examples: int, parts: int = WALK_PARTS) -> list[WalkPart]:
    """The tour, then ``examples`` shared among at most ``parts`` walks, none of them empty."""
    count = max(0, min(parts, examples))
    return [WalkPart(0, count, 0)] + [
        WalkPart(i + 1, count, examples // count + (i < examples % count)) for i in range(count)
    ]


SHRINK_SECONDS = 60
"""How long Hypothesis may shrink a failing walk: each step of a walk is a request to the target,
so shrinking against a slow or broken Core could take far longer than the run (Hypothesis' own
bound is five minutes). When the time is up, the smallest failing walk found so far is reported."""


def _bound_shrinking(seconds: int) -> None:
    """Hypothesis offers no setting for it, only its engine's constant: set it where it exists (a
    Hypothesis without it shrinks under its own bound, which is only slower)."""
    from hypothesis.internal.conjecture import engine

    if isinstance(getattr(engine, "MAX_SHRINKING_SECONDS", None), int):
        engine.MAX_SHRINKING_SECONDS = seconds


def walk_settings(examples: int, steps: int, *, shrink: bool = True) -> settings:
    _bound_shrinking(SHRINK_SECONDS)
    phases = [p for p in Phase if shrink or p is not Phase.shrink]
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
