"""A run's facts built by hand, for tests that aggregate results without running the suite."""

from __future__ import annotations

from typing import Any

from conformance.report.results import RunInfo


def run_info(**changed: Any) -> RunInfo:
    """A fixed run of three requests on 2026-11-30, with ``changed`` facts instead of the defaults."""
    facts: dict[str, Any] = {
        "suite_version": "0",
        "catalogue_version": "sha256:0000000000000000",
        "target": "t",
        "configuration": {},
        "hypothesis": {"derandomize": True, "seed": None},
        "started": "2026-11-30T00:00:00+00:00",
        "duration_seconds": 1.0,
        "requests": 3,
        "fail_on": "must",
    }
    return RunInfo(**{**facts, **changed})
