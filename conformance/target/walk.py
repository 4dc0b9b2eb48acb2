"""What both stateful models (the Core's, ``conformance.server.stateful``, and search_knowledge's,
``conformance.search_knowledge.stateful``) drive their walks with: Hypothesis settings that replay,
and the scripted tour's recorder that prints its steps as Hypothesis prints a failing walk."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine


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
