"""Workers of a --concurrency run forked from one warm server (conformance.plugin.warm): the
process xdist starts behaves as the interpreter it asked for (its code, arguments, pipes,
directory, environment and exit status), and becomes that plain interpreter whenever the server
cannot fork it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.plugin import warm

pytestmark = pytest.mark.skipif(not hasattr(__import__("socket"), "send_fds"), reason="POSIX descriptor passing")

SHOW = """
import os, sys
print(sys.argv[1:], os.getcwd(), os.environ.get("KC_PROBE"), sys.stdin.readline().strip(), "pytest" in sys.modules)
sys.stdout.flush()
raise SystemExit(int(sys.argv[1]))
"""


@pytest.fixture
def server() -> Iterator[warm.WarmServer]:
    started = warm.WarmServer()
    assert started.listening()
    yield started
    started.close()


def launch(python: str, args: list[str], cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*python.split(" "), *args],
        cwd=cwd,
        env={**os.environ, "KC_PROBE": "seen"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_forked_worker_is_the_interpreter_xdist_asked_for(server: warm.WarmServer, tmp_path: Path) -> None:
    """Its code, arguments, directory, environment and stdin are the launcher's, its exit status
    is the launcher's; and it was forked: pytest is already imported (a fresh ``python -c`` has not)."""
    proc = launch(server.python(), ["-u", "-c", SHOW, "3", "more"], tmp_path)
    out, err = proc.communicate("a line\n", timeout=60)
    assert out.split("\n")[0] == f"['3', 'more'] {tmp_path} seen a line True", err
    assert proc.returncode == 3


def test_a_command_line_that_is_no_worker_s_runs_in_a_plain_interpreter(
    server: warm.WarmServer, tmp_path: Path
) -> None:
    proc = launch(server.python(), ["-X", "utf8", "-c", SHOW, "0"], tmp_path)
    out, err = proc.communicate("x\n", timeout=60)
    assert out.split("\n")[0] == f"['0'] {tmp_path} seen x False", err
    assert proc.returncode == 0


def test_without_its_server_the_launcher_becomes_a_plain_interpreter(tmp_path: Path) -> None:
    python = f"{sys.executable} -I -S {warm.LAUNCHER} {tmp_path / 'gone.sock'}"
    proc = launch(python, ["-u", "-c", SHOW, "0"], tmp_path)
    out, err = proc.communicate("y\n", timeout=60)
    assert out.split("\n")[0] == f"['0'] {tmp_path} seen y False", err


def test_a_killed_launcher_takes_its_worker_with_it(server: warm.WarmServer, tmp_path: Path) -> None:
    """xdist ends a worker that does not stop by killing its process: the forked worker goes too."""
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    proc = launch(server.python(), ["-u", "-c", code], tmp_path)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    assert worker != proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().split(") ")[1][0] != "Z"  # a zombie waits only for its parent to reap it


@pytest.mark.parametrize(
    ("assertmode", "env", "wanted"), [("plain", "1", True), ("rewrite", "1", False), ("plain", "0", False)]
)
def test_workers_are_forked_only_where_pytest_rewrites_no_asserts(
    monkeypatch: pytest.MonkeyPatch, assertmode: str, env: str, wanted: bool
) -> None:
    """Rewriting, pytest would warn in each worker that the plugins' modules were imported before it
    could rewrite them; KC_WARM_WORKERS=0 turns warm workers off."""
    monkeypatch.setenv(warm.ENABLED_ENV, env)
    config: Any = SimpleNamespace(option=SimpleNamespace(assertmode=assertmode))
    assert warm.wanted(config) is wanted
