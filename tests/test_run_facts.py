"""Run-level facts built once: the exit codes, the run's settings, the auth header, the rate limit."""

from __future__ import annotations

import threading
import time

import pytest

from conformance.common.exits import HELP, Exit
from conformance.common.settings import SIM_CLOCK_TICK, RunIdError, RunSettings, checked_run_id
from conformance.common.transport import RateLimiter, auth_headers
from conformance.report.results import VERDICT_EXIT


def test_one_table_of_exit_codes() -> None:
    assert VERDICT_EXIT == {"conformant": 0, "non-conformant": 1, "interrupted": 2, "incomplete": 6, "error": 7}
    assert (Exit.USAGE_ERROR, Exit.HARNESS_ERROR, Exit.OK) == (4, 7, 0)
    assert "4 usage error" in HELP and "7 harness error" in HELP


@pytest.mark.parametrize("bad", ["UPPER", "-lead", "a" * 33, "sp ace", "a_b"])
def test_a_bad_run_id_is_refused_by_the_one_builder(bad: str) -> None:
    with pytest.raises(RunIdError, match="--run-id"):
        RunSettings.from_options(run_id=bad)


def test_from_options_draws_a_run_id_and_fills_defaults() -> None:
    settings = RunSettings.from_options(run_id=None, sim_quirks=["a"], worker="gw0")
    assert checked_run_id(settings.run_id) == settings.run_id
    assert settings.sim_quirks == ("a",) and settings.sim_clock_tick == SIM_CLOCK_TICK
    assert settings.namespace == f"{settings.run_id}-gw0"
    assert RunSettings.from_options(run_id="ci-1", sim_clock_tick=0.0).sim_clock_tick == 0.0


def test_auth_headers() -> None:
    auth = {"header": "X-Key", "scheme": ""}
    assert auth_headers(auth, "t0k") == {"X-Key": "t0k"}
    assert auth_headers({"header": "Authorization", "scheme": "Bearer"}, "t") == {"Authorization": "Bearer t"}
    assert auth_headers(auth, None) == {}


def test_the_rate_limiter_spaces_requests_across_threads() -> None:
    limiter = RateLimiter(50.0)  # a slot every 20 ms
    started = time.monotonic()
    threads = [threading.Thread(target=limiter.wait) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started >= 5 * 0.02 - 0.005
    unlimited = RateLimiter(0.0)
    started = time.monotonic()
    for _ in range(100):
        unlimited.wait()
    assert time.monotonic() - started < 0.5
