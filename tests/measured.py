"""A command run in a process of its own with its own peak memory.

The peak comes from a small launcher (``peak_launcher.py``) that waits for the command: ``wait4``
straight on a command spawned from a pytest worker reports the worker's size at the spawn (Linux
keeps the pre-``exec`` memory in ``ru_maxrss``), and ``RUSAGE_CHILDREN`` keeps the largest child
the test process ever had."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAUNCHER = Path(__file__).with_name("peak_launcher.py")


@dataclass(frozen=True)
class Measured:
    returncode: int
    output: str  # stdout then stderr
    seconds: float
    peak_mb: int


def launch(command: list[str], peak_file: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``command`` under the launcher, in a process group of its own (see ``kill``)."""
    return subprocess.Popen(
        [sys.executable, "-S", str(LAUNCHER), str(peak_file), *command], start_new_session=True, **popen
    )


def kill(process: subprocess.Popen[bytes]) -> None:
    """End the launcher and the command with it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def command_pid(process: subprocess.Popen[bytes]) -> int | None:
    """The command's own process (the launcher's only child), while it runs."""
    try:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text("ascii").split()
    except OSError:
        return None
    return int(children[0]) if children else None


def peak_mib(peak_file: Path) -> float:
    """The command's peak resident size in MiB (0 when it was killed before the launcher wrote it)."""
    try:
        return int(peak_file.read_text("ascii")) / 1024
    except (OSError, ValueError):
        return 0.0


def run_measured(command: list[str], timeout: float, **popen: Any) -> Measured:
    """Run ``command`` to its end (killed after ``timeout`` seconds) and measure it."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        peak = Path(tmp) / "peak"
        started = time.monotonic()
        process = launch(command, peak, stdout=out, stderr=err, stdin=subprocess.DEVNULL, **popen)
        timer = threading.Timer(timeout, kill, (process,))
        timer.start()
        try:
            process.wait()
        finally:
            timer.cancel()
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        text = out.read().decode("utf-8", "replace") + err.read().decode("utf-8", "replace")
        return Measured(process.returncode, text, seconds, int(peak_mib(peak)))
