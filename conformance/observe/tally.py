"""What observation found, per rule: held (how many times), violated (with evidence), or not
observed; and what happened to the traffic itself (exchanges, judged, dropped, judge errors).

Everything here is bounded: counts are integers, a rule keeps its first few violations only, and
an error keeps its first few messages. Thread-safe: the judge writes, a report reads."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

KEPT_PER_RULE = 3
KEPT_ERRORS = 20


@dataclass(frozen=True)
class Finding:
    """One violation: the rule, what broke it, and the exchange that shows it (scrubbed, with its curl line)."""

    rule: str
    message: str
    number: int  # the exchange's number in the observed order
    exchange: dict[str, Any] | None


@dataclass
class Tally:
    held: Counter[str] = field(default_factory=Counter)
    violated: Counter[str] = field(default_factory=Counter)
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    exchanges: int = 0  # seen by the proxy or read from a recording
    judged: int = 0  # of those, judged
    unjudged: Counter[str] = field(default_factory=Counter)  # why an exchange was not judged: how many
    errors: list[str] = field(default_factory=list)  # judging broke (the judge's own fault): first messages
    error_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hold(self, counts: dict[str, int]) -> None:
        with self._lock:
            self.held.update(counts)

    def violate(self, finding: Finding) -> None:
        with self._lock:
            self.violated[finding.rule] += 1
            kept = self.findings.setdefault(finding.rule, [])
            if len(kept) < KEPT_PER_RULE:
                kept.append(finding)

    def seen(self) -> None:
        with self._lock:
            self.exchanges += 1

    def dropped(self, why: str) -> None:
        """An exchange that reached no judge (the queue was full, the judge had stopped)."""
        with self._lock:
            self.exchanges += 1
            self.unjudged[why] += 1

    def skipped(self, why: str) -> None:
        """An exchange the judge saw and left alone (not the contract's, or not readable)."""
        with self._lock:
            self.unjudged[why] += 1

    def was_judged(self) -> None:
        with self._lock:
            self.judged += 1

    def broke(self, message: str) -> None:
        with self._lock:
            self.error_count += 1
            if len(self.errors) < KEPT_ERRORS:
                self.errors.append(message)

    def __getstate__(self) -> dict[str, object]:
        """Picklable (a judge in its own process sends its tally back): the lock stays behind."""
        with self._lock:
            return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def merge_unjudged(self, counts: Counter[str]) -> None:
        """Exchanges dropped before they reached this judge (counted where they were dropped)."""
        with self._lock:
            self.unjudged.update(counts)
            self.exchanges += sum(counts.values())

    def snapshot(self) -> Tally:
        """A copy to report from while judging goes on."""
        with self._lock:
            return Tally(
                Counter(self.held),
                Counter(self.violated),
                {k: list(v) for k, v in self.findings.items()},
                self.exchanges,
                self.judged,
                Counter(self.unjudged),
                list(self.errors),
                self.error_count,
            )
