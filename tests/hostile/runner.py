"""One suite run against a hostile server, measured: exit code, wall time, peak RSS.

The run's peak RSS comes from a small launcher's ``wait4`` on it (``tests/measured.py`` says why
not straight from this process). A watchdog ends a run that outgrows a
safety ceiling or a time limit, so a suite without a bound cannot take the machine or the job
down with it; the record says why it was ended."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.measured import command_pid, kill, launch, peak_mib

KILL_RSS_MIB = 1024
"""Past this resident size a run is ended (the issue's bound; the scenario's own is lower)."""
KILL_GRACE = 5.0
"""Seconds a run may go past its scenario's wall bound before it is ended."""
POLL = 0.02


@dataclass
class Measured:
    """What one run left: its exit (None when the watchdog ended it), time, memory, outputs."""

    exit: int | None
    wall: float
    rss_mib: float
    stdout: bytes
    stderr: bytes
    ended: str = ""
    polled_mib: float = 0.0


def _rss_mib(pid: int) -> float:
    """Resident memory of a process now, from /proc (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class _Watchdog(threading.Thread):
    """Ends the run past the memory ceiling or the time limit; keeps the largest RSS it saw."""

    def __init__(self, process: subprocess.Popen[bytes], limit: float) -> None:
        super().__init__(daemon=True)
        self.process, self.limit = process, limit
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.peak = 0.0
        self.ended = ""

    def run(self) -> None:
        began = time.monotonic()
        while not self.done.wait(POLL):
            pid = command_pid(self.process)
            self.peak = max(self.peak, _rss_mib(pid) if pid else 0.0)
            over = time.monotonic() - began > self.limit
            if self.peak > KILL_RSS_MIB or over:
                self._kill(f"ended at {self.peak:.0f} MiB RSS" if not over else f"ended after {self.limit:.0f} s")
                return

    def _kill(self, why: str) -> None:
        with self.lock:
            if not self.done.is_set():
                self.ended = why
                kill(self.process)


def run_suite(args: list[str], env: dict[str, str], out_dir: Path, limit: float) -> Measured:
    """``knowledge-conformance run ARGS`` in a process of its own, its output in files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stdout, stderr = out_dir / "stdout", out_dir / "stderr"
    began = time.monotonic()
    peak = out_dir / "peak"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = launch(
            [sys.executable, "-m", "conformance.cli", "run", *args],
            peak,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        watchdog = _Watchdog(proc, limit)
        watchdog.start()
        proc.wait()
        with watchdog.lock:
            watchdog.done.set()
    wall = time.monotonic() - began
    return Measured(
        exit=None if watchdog.ended else proc.returncode,
        wall=wall,
        rss_mib=peak_mib(peak),
        stdout=stdout.read_bytes(),
        stderr=stderr.read_bytes(),
        ended=watchdog.ended,
        polled_mib=watchdog.peak,
    )
