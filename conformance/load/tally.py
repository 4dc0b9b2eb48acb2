"""What a load run saw, per requirement of the catalogue: how many checks passed, how many
broke it and the first few of those violations with their exchange.

One Tally per process; in distributed mode each worker ships its own to the master as plain
data (``to_data``) and the master merges them (``merge``), so the report of a distributed run
is the sum of its workers'."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from conformance.common.rules import Ledger

SAMPLES = 3  # violations kept per requirement, with their exchange: enough to reproduce, little enough to read


@dataclass
class Tally:
    ledger: Ledger = field(default_factory=Ledger)  # the checks that passed in this process, per requirement
    merged: Counter[str] = field(default_factory=Counter)  # passed checks the workers reported (distributed mode)
    violations: Counter[str] = field(default_factory=Counter)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)  # harness errors (network, setup): nothing was judged
    error_samples: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # steps that could not run (e.g. nothing found), why
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def checks(self) -> Counter[str]:
        """Passed checks per requirement: this process's and those the workers reported."""
        return Counter(self.ledger.counts()) + self.merged

    def violated(self, rid: str, message: str, exchange: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.violations[rid] += 1
            kept = self.samples.setdefault(rid, [])
            if len(kept) < SAMPLES:
                kept.append({"message": message, "exchange": exchange})

    def error(self, kind: str, message: str) -> None:
        with self._lock:
            self.errors[kind] += 1
            if len(self.error_samples) < SAMPLES:
                self.error_samples.append(message)

    def skip(self, why: str) -> None:
        with self._lock:
            self.skipped[why] += 1

    # -------------------------------------------------- distributed mode
    def to_data(self) -> dict[str, Any]:
        """Plain data (msgpack-able), for a worker's report to the master."""
        with self._lock:
            return {
                "checks": dict(self.checks),
                "violations": dict(self.violations),
                "samples": {k: list(v) for k, v in self.samples.items()},
                "errors": dict(self.errors),
                "error_samples": list(self.error_samples),
                "skipped": dict(self.skipped),
            }

    def merge(self, data: dict[str, Any]) -> None:
        with self._lock:
            self.merged.update(data.get("checks", {}))
            self.violations.update(data.get("violations", {}))
            for rid, found in data.get("samples", {}).items():
                kept = self.samples.setdefault(rid, [])
                kept.extend(found[: max(0, SAMPLES - len(kept))])
            self.errors.update(data.get("errors", {}))
            self.error_samples.extend(data.get("error_samples", [])[: max(0, SAMPLES - len(self.error_samples))])
            self.skipped.update(data.get("skipped", {}))

    def clear(self) -> None:
        """Empty it after a worker's report was taken: each report carries only what is new."""
        with self._lock:
            self.merged.clear()
            self.ledger.clear()
            self.violations.clear()
            self.samples.clear()
            self.errors.clear()
            self.error_samples.clear()
            self.skipped.clear()
