"""The control extension is a versioned contract: a Core whose control stops at release 1.0.0
(no feature list, no later member or endpoint) gets no harness error; what needs a later
feature stays not verified, with that reason, and the rest is verified as before."""

from __future__ import annotations

from pathlib import Path

from tests.seed_allowed import ControlAtFirstRelease, core, run_suite, statuses


def test_a_first_release_control_extension_errs_nowhere(tmp_path: Path) -> None:
    code, results, out = run_suite(core(ControlAtFirstRelease), tmp_path)
    errors = [t for t in results["tests"] if t["outcome"] == "error"]
    assert errors == [], [t["message"] for t in errors][:5]
    assert [t["nodeid"] for t in results["tests"] if t["outcome"] == "failed"] == [], out[-3000:]
    status = statuses(results)
    # The lost response cannot be read back: the committed run is unknown, so TURN-012 is not verified
    # (no test may claim it from a retry it cannot compare), and the verdict says the run is incomplete.
    assert status["TURN-012"] == "not_verified", status["TURN-012"]
    assert results["verdict"] == "incomplete" and code == 6, (results["verdict"], code)
    # Time moves for the whole Core (no routes member): the expiry rules are verified all the same.
    assert status["REF-001"] == "verified" and status["REF-002"] == "verified"
    reasons = {r["id"]: r["reason"] for r in results["requirements"]}
    assert "GET /faults/lost" in reasons["TURN-012"] or "lost" in reasons["TURN-012"], reasons["TURN-012"]
