"""An implementation of the project's own tests started as a process: ready once a URL answers; and
a whole suite run against it, read back from its results.json."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.suite_command import warm_cli


def wait_until_it_answers(
    url: str, process: subprocess.Popen[bytes], log: Path | None, what: str, seconds: float = 30
) -> None:
    """Any HTTP answer from ``url`` means it is serving; an exit or ``seconds`` without one is an
    error (with the tail of ``log``, where the process writes one)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = f": {log.read_text()[-2000:]}" if log is not None else ""
                raise RuntimeError(f"{what} did not start{tail}") from None
            time.sleep(0.1)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(
    command: Sequence[str],
    ready_url: str,
    log: Path,
    what: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` started (its output in ``log``), yielded once ``ready_url`` answers, stopped after."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(command), stdout=out, stderr=subprocess.STDOUT, env=None if env is None else dict(env), cwd=cwd
        )
    try:
        wait_until_it_answers(ready_url, process, log, what)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def choose_variants(setting: str, names: Sequence[str], fast: Sequence[str]) -> list[str]:
    """The broken variants a test runs: ``setting`` is ``fast`` (the few CI can afford), ``all``,
    or a comma-separated list of names."""
    if setting == "all":
        return sorted(names)
    return [v for v in setting.split(",") if v and v != "fast"] or list(fast)


@dataclass(frozen=True)
class SuiteRun:
    """One ``knowledge-conformance run``: its exit code and its results.json."""

    code: int
    results: dict[str, Any]
    output: str

    @property
    def failed(self) -> dict[str, str]:
        """The failed requirements: ID -> reason."""
        return {r["id"]: r["reason"] for r in self.results["requirements"] if r["status"] == "failed"}

    @property
    def errors(self) -> list[str]:
        """The start of each harness error's message (a test that could not judge)."""
        return [t["message"][:300] for t in self.results["tests"] if t["outcome"] == "error"]


def run_suite(
    arguments: Sequence[str], reports: Path, *, env: Mapping[str, str], cwd: Path, timeout: float = 900
) -> SuiteRun:
    """``knowledge-conformance run ARGUMENTS --no-shrink --reports REPORTS`` from ``cwd``, read
    back: a broken variant is judged by the rules it fails, not by a minimal replay (minimising a
    failing walk against a slow Core took up to a minute)."""
    done = subprocess.run(
        [*warm_cli(), "run", *arguments, "--no-shrink", "--reports", str(reports)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env),
        cwd=cwd,
    )
    output = done.stdout[-3000:] + done.stderr[-2000:]
    results_file = reports / "results.json"
    if not results_file.is_file():
        raise AssertionError(f"the suite wrote no results (exit {done.returncode}): {output}")
    return SuiteRun(done.returncode, json.loads(results_file.read_text("utf-8")), output)


def assert_node_tests_pass(node: str, folder: Path) -> None:
    """A package's own ``node --test test/`` passes."""
    done = subprocess.run([node, "--test", "test/"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
