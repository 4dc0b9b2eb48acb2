"""What a test claimed, checked and broke, carried from pytest's report hook to the session's results.

``pytest_runtest_makereport`` knows the test (its marks, its ledger, the exception, the exchanges);
``pytest_runtest_logreport`` keeps the result, under pytest-xdist in another process (the
controller), and only a report's ``user_properties`` travel there. One record, ``TestClaims``,
rides under one property as plain JSON data (dicts, lists, strings, numbers), so a serial run and
a distributed one read the same thing, and the scrubber masks it value by value."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from conformance.common.secrets import SECRETS, clip, scrub
from conformance.common.untrusted import cut

if TYPE_CHECKING:
    import pytest

    from conformance.common.rules import Ledger
    from conformance.plugin.state import SessionState
    from conformance.report.results import TestResult

PROPERTY = "knowledge_conformance"
"""The one ``user_properties`` key the record rides under."""


@dataclass(kw_only=True)
class TestClaims:
    """One phase's account of a test: the rules its marks claim, those its checks verified, and
    what it broke. ``nodeid`` None: a test outside the suite (it carries the worker's count only)."""

    __test__ = False  # a record, not a pytest test class
    nodeid: str | None = None  # the suite's stable ID of the test (the same serially and under xdist)
    requirements: list[str] = field(default_factory=list)  # the rules its marks claim
    exercised: list[str] | None = None  # the rules whose checks passed in its call; None: not kept, none verified
    outcome: str | None = (
        None  # a failed phase: failed (the target broke a check) or error (the harness could not judge)
    )
    violated: str | None = None  # the rule the failing check named
    message: str = ""  # the failure, scrubbed and cut
    sequence: list[str] | None = None  # generated stateful tests: the minimal failing program
    exchanges: list[dict[str, Any]] = field(default_factory=list)  # a failure's exchanges, with curl lines
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # a failure's last MCP tool calls
    timings: list[dict[str, Any]] = field(default_factory=list)  # expiry probes' age intervals
    worker_requests: int | None = None  # xdist, teardown: the worker's running total of requests

    @classmethod
    def of(cls, report: pytest.TestReport) -> TestClaims | None:
        """The record a report carries, if any."""
        known = {f.name for f in fields(cls)}
        for key, value in report.user_properties:
            if key == PROPERTY and isinstance(value, dict):
                return cls(**{k: v for k, v in value.items() if k in known})
        return None

    def put(self, report: pytest.TestReport) -> None:
        """Carried by ``report`` as plain JSON data (what a worker can send), replacing any record it had;
        only what differs from an empty record (pytest's --junitxml shows it as a property)."""
        empty = asdict(TestClaims())
        data = json.loads(json.dumps({k: v for k, v in asdict(self).items() if v != empty[k]}))
        report.user_properties = [(k, v) for k, v in report.user_properties if k != PROPERTY] + [(PROPERTY, data)]

    def result(self, report: pytest.TestReport) -> TestResult:
        """The test's result as the reports keep it, from its relevant phase's report."""
        from conformance.report.results import TestResult

        detail = ""
        if report.skipped:
            longrepr = report.longrepr
            message = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
            outcome = "skipped"
        elif report.failed:
            detail = clip(report.longreprtext, -4000)
            message = self.message or (detail.strip().splitlines() or ["test failed"])[-1]
            outcome = self.outcome or "error"
            if report.when != "call" and outcome == "failed" and self.violated is None:
                outcome = "error"  # a fixture's plain assertion is the harness's, not the target's
        else:
            message, outcome = "", "passed"
        return TestResult(
            nodeid=self.nodeid or report.nodeid,
            outcome=outcome,
            requirements=list(self.requirements),
            violated=self.violated,
            message=message,
            exchanges=self.exchanges,
            duration=round(report.duration, 4),
            exercised=self.exercised,
            sequence=self.sequence,
            detail=detail,
            tool_calls=self.tool_calls,
            timings=self.timings,
        )


TEXT_FIELDS = frozenset({"message", "sequence", "exchanges", "tool_calls", "timings"})
"""The record's fields that may hold a target's text; the others (the test's ID, the rules it
claims and verified, its outcome, the rule it broke, counts) are the suite's own and are never
masked: the verdict is built from them, and a token a hostile control extension minted to match
one of them must not change it."""


def scrubbed(key: str, value: Any) -> Any:
    """A property as it may leave the process: the record's text masked value by value (a mask
    laid over JSON text could cut an escape in two), any other text masked whole."""
    if key == PROPERTY and isinstance(value, dict):
        return {k: SECRETS.data(v) if k in TEXT_FIELDS else v for k, v in value.items()}
    if key == PROPERTY:
        return SECRETS.data(value)
    return scrub(value) if isinstance(value, str) else value


def broke(
    claims: TestClaims,
    report: pytest.TestReport,
    exc: BaseException | None,
    ledger: Ledger | None,
    state: SessionState,
) -> None:
    """What a failed phase broke, into ``claims``: outcome, rule, message, program, exchanges, tool calls."""
    kind, violated = classify(exc)
    drowned = _drowned_violation(exc, ledger)
    if drowned is not None and violated is None:
        kind, violated = "failed", drowned.requirement
        note = f"{type(exc).__name__}: the target answered differently when the example was replayed"
        claims.message = cut(scrub(f"ContractViolation: {drowned} (then {note})"), 2000)
    elif exc is not None:
        named = shown_exception(exc)
        claims.message = cut(scrub(f"{type(named).__name__}: {named}"), 2000)
    claims.outcome, claims.violated = kind, violated
    sequence = _failing_sequence(report.longreprtext)
    if sequence:
        claims.sequence = [scrub(s) for s in sequence]
    recorder = state.recorder
    if recorder is not None and recorder.current:
        from knowledge_schemas import load_catalogue

        catalogue = load_catalogue()
        via = catalogue[violated].via if violated is not None and violated in catalogue else None
        via = getattr(exc, "via", None) or via
        claims.exchanges = recorder.evidence(state.base_url, state.config.wire["auth"], via)
    from conformance.mcp import evidence

    made = evidence.calls()
    if made:
        claims.tool_calls = made


def classify(exc: BaseException | None) -> tuple[str, str | None]:
    """(outcome, violated requirement) of a failed phase: a check's violation is the
    target's failure; anything the suite could not judge is a harness error."""
    import httpx
    import pytest

    from conformance.clients.reference_client import KnowledgeError
    from conformance.common.outcomes import ContractViolation, HarnessError

    if isinstance(exc, ContractViolation):
        return "failed", exc.requirement
    if isinstance(exc, BaseExceptionGroup):  # e.g. Hypothesis' FlakyFailure, schemathesis' grouped failures
        inner = [classify(e) for e in exc.exceptions]
        named = next((v for o, v in inner if o == "failed" and v is not None), None)
        if named is not None:
            return "failed", named
        return ("failed", None) if inner and all(o == "failed" for o, _ in inner) else ("error", None)
    if isinstance(exc, (HarnessError, httpx.TransportError)):
        return "error", None
    if isinstance(exc, (AssertionError, pytest.fail.Exception, KnowledgeError)):
        return "failed", None  # KnowledgeError: the target refused what the reference client asked of it
    return "error", None


def shown_exception(exc: BaseException) -> BaseException:
    """The exception a report names: a group's first contract violation (a check failing inside an
    MCP session's task group arrives wrapped in one), else the exception itself (a group of other
    failures, schemathesis' among them, says more as a whole)."""
    from conformance.common.outcomes import ContractViolation

    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if isinstance(found := shown_exception(inner), ContractViolation):
                return found
    return exc


def _drowned_violation(exc: BaseException | None, ledger: Ledger | None) -> Any:
    """The violation a test made before Hypothesis gave up on replaying it: a target that answers
    differently to the same steps makes Hypothesis raise one of its "flaky" errors instead of the
    failure, and the rule the target broke is then known only from the test's ledger."""
    if exc is None or ledger is None or not type(exc).__module__.startswith("hypothesis"):
        return None
    if "Flaky" not in type(exc).__name__:
        return None
    return ledger.first_violation


_STEP = re.compile(r"^(?:E\s+)?(state = \w+\(\)|state\.\w+\(.*\)|\w+ = state\.\w+\(.*\))\s*$")


def _failing_sequence(longrepr: str) -> list[str]:
    """The minimal failing program Hypothesis printed for a stateful test, one step a line."""
    return [m.group(1) for m in map(_STEP.match, longrepr.splitlines()) if m]
