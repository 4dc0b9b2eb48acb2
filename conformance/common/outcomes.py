"""The three outcomes a check can end in, raised by library code without importing pytest.

- ``ContractViolation``: the target broke one requirement of the catalogue (the test fails,
  and the report names that requirement).
- ``NotVerified``: the run lacks what a check needs (no control, no second identity, a search
  that found nothing); the plugin reports it as skipped with its reason, and nothing is verified.
- ``HarnessError``: the suite or its infrastructure could not set up or observe what a test
  needs; nothing was judged, and the verdict becomes ``error``.
"""

from __future__ import annotations

from collections.abc import Callable

WITNESSES: list[Callable[[ContractViolation], None]] = []
"""Called with every violation as it is made (conformance.common.rules keeps them in the test's
ledger): a failure that later drowns in something else, Hypothesis' "flaky" errors when a target
answers differently on a replay, is still known by the rule it broke."""


class ContractViolation(AssertionError):
    """A target's answer broke one requirement of the catalogue."""

    via: str | None = None
    """Where it was seen, when not where the catalogue says the rule shows ("mcp": a tool relayed
    the Core's answer), so the report shows the tool calls, not an HTTP exchange."""

    def __init__(self, requirement: str, message: str) -> None:
        super().__init__(f"[{requirement}] {message}")
        self.requirement = requirement
        for witness in WITNESSES:
            witness(self)


class NotVerified(Exception):
    """What a check needs is not there; its requirements stay not verified, with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason if reason.startswith("not verified") else f"not verified: {reason}")
        self.reason = str(self)


class HarnessError(RuntimeError):
    """The suite could not set up or observe what a test needs; nothing was judged."""
