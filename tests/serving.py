"""An implementation of the project's own tests started as a process: ready once a URL answers."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


def wait_until_it_answers(
    url: str, process: subprocess.Popen[bytes], log: Path, what: str, seconds: float = 30
) -> None:
    """Any HTTP answer from ``url`` means it is serving; an exit or ``seconds`` without one is an error."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)
