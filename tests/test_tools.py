"""The project's own tools, as project tests, so the README's test command (and CI, which runs
exactly that command) also lints, checks the formatting and type-checks: ``ruff check``,
``ruff format --check`` and ``mypy`` (strict, over the files of ``[tool.mypy]``), each with
the configuration of pyproject.toml and the versions of the ``test`` extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What ruff looks at (tox -e lint names the same folders).
LINTED = ("conformance", "simulator", "knowledge_schemas", "schemas", "tests", "benchmarks", "tools")
TIMEOUT = 600


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, check=False
    )


@pytest.mark.parametrize(
    "command", [("ruff", "check", *LINTED), ("ruff", "format", "--check", *LINTED)], ids=["check", "format"]
)
def test_ruff(command: tuple[str, ...]) -> None:
    proc = _run(*command, "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
