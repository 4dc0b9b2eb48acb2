"""The peak memory the hostile-run tests bound is the command's own, not the test process's: a
pytest worker grown large must not lend its size to the command it spawns."""

from __future__ import annotations

import sys

from tests.measured import run_measured

GROW = "x = bytearray({mib} << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"


def test_a_command_s_peak_is_its_own_whatever_the_size_of_the_process_that_spawned_it() -> None:
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    small = run_measured([sys.executable, "-c", GROW.format(mib=1)], 60)
    large = run_measured([sys.executable, "-c", GROW.format(mib=120)], 60)
    assert small.returncode == large.returncode == 0, (small.output, large.output)
    assert small.peak_mb < 100, small
    assert 120 <= large.peak_mb < 250, large
    del ballast


def test_a_command_s_exit_status_and_a_timeout_are_kept() -> None:
    assert run_measured([sys.executable, "-c", "raise SystemExit(3)"], 60).returncode == 3
    assert run_measured([sys.executable, "-c", "import time; time.sleep(30)"], 0.5).returncode == -9
