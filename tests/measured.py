"""A command run in a process of its own with its own peak memory: ``wait4`` reports the child it
waited for, where ``RUSAGE_CHILDREN`` keeps the largest child the test process ever had (a whole
suite run earlier in the same pytest worker would stand in for this one's)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Measured:
    returncode: int
    output: str  # stdout then stderr
    seconds: float
    peak_mb: int


def run_measured(command: list[str], timeout: float, **popen: Any) -> Measured:
    """Run ``command`` to its end (killed after ``timeout`` seconds) and measure it."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, **popen)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        text = out.read().decode("utf-8", "replace") + err.read().decode("utf-8", "replace")
    return Measured(process.returncode, text, seconds, int(usage.ru_maxrss // 1024))
