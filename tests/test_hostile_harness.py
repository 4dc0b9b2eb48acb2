"""A hostile client harness cannot exhaust the runner's memory, outlive the run, or write CI
commands into its log: a line without end is one harness protocol error naming the cap, a child it
double-forks is ended with its process group, and its stderr is shown with ``::`` defanged. One
end-to-end ``knowledge-conformance client`` run against a harness that prints 2 GiB without a
newline gives the exit code, the wall time and the peak memory."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.clients.protocol import LINE_CAP, Harness, HarnessProtocolError
from conformance.common.served import ServedSimulator
from tests.measured import run_measured

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "knowledge-conformance")
CONNECTION = {
    "key": "main",
    "route": "r",
    "token": "t",
    "binding": {"hubUrl": "http://127.0.0.1:9", "clientAppId": "a", "workspace": "r", "sessionId": "s"},
}
ENDLESS = "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(2048):\n    os.write({fd}, chunk)\nimport time; time.sleep(600)\n"
"""2 GiB on one line, without a newline (the writes block once the runner stops reading)."""
DOUBLE_FORK = (
    "import os, signal, sys, time\n"
    "if os.fork() == 0:\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "sys.stdin.read()\n"
)
"""A harness whose grandchild ignores SIGTERM and is reparented away from it, then never answers."""


def _script(tmp_path: Path, body: str, *args: str) -> str:
    script = tmp_path / "harness.py"
    script.write_text(body, "utf-8")
    return " ".join([sys.executable, str(script), *args])


@pytest.mark.parametrize(("fd", "stream"), [(1, "stdout"), (2, "stderr")])
def test_a_line_without_end_is_one_protocol_error_naming_the_cap(tmp_path: Path, fd: int, stream: str) -> None:
    running = Harness(_script(tmp_path, ENDLESS.format(fd=fd)), timeout=60)
    started = time.monotonic()
    try:
        with pytest.raises(HarnessProtocolError) as caught:
            running.start("http://127.0.0.1:9", [CONNECTION])
    finally:
        running.close(stop=False)
    assert str(caught.value) == (
        f"the harness printed a line over the 4 MiB cap on {stream} (more than {LINE_CAP} bytes without a newline)"
    )
    assert time.monotonic() - started < 50, "the cap ends the wait, not the timeout"


def test_a_child_the_harness_double_forked_does_not_outlive_it(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    running = Harness(_script(tmp_path, DOUBLE_FORK, str(marker)), timeout=1)
    deadline = time.monotonic() + 10
    while not (marker.exists() and marker.read_text()):
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    started = time.monotonic()
    running.close(stop=False)
    assert time.monotonic() - started < 30
    assert not _alive(grandchild), f"the harness's grandchild {grandchild} outlived it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_the_harness_s_stderr_is_shown_without_ci_commands(tmp_path: Path) -> None:
    body = (
        "import sys\nsys.stderr.write('::add-mask::secret\\n  ::error::x\\n\\x1b]52;c;aGk=\\x07bell\\n'); sys.exit(5)\n"
    )
    running = Harness(_script(tmp_path, body), timeout=5)
    try:
        with pytest.raises(HarnessProtocolError) as caught:
            running.start("http://127.0.0.1:9", [CONNECTION])
        tail = running.stderr_tail()
    finally:
        running.close(stop=False)
    for text in (str(caught.value), tail):
        assert "\x1b" not in text and "\x07" not in text, text
        assert not any(line.strip().startswith("::") for line in text.splitlines()), text
    assert tail.splitlines()[0] == "\\x3a:add-mask::secret", tail


# ----------------------------------------------------------------- whole runs


@pytest.fixture(scope="module")
def core() -> Iterator[ServedSimulator]:
    served = ServedSimulator(seed=0, frozen_clock=True)
    try:
        yield served
    finally:
        served.close()


def _client_run(harness: str, core: ServedSimulator, tmp: Path) -> tuple[int, str, float, int]:
    run = [CLI, "client", "--harness", harness, "--core", core.url, "--control-token", core.control_token]
    done = run_measured([*run, "--report-dir", str(tmp / "reports"), "--timeout", "20"], 600, cwd=ROOT)
    return done.returncode, done.output, done.seconds, done.peak_mb


def test_a_whole_run_against_an_endless_line_is_one_harness_error_in_bounded_memory(
    core: ServedSimulator, tmp_path: Path
) -> None:
    code, out, took, peak = _client_run(_script(tmp_path, ENDLESS.format(fd=1)), core, tmp_path)
    print(f"client run against a 2 GiB harness line: exit {code}, {took:.1f} s wall, peak RSS {peak} MB")
    assert code == 7, out[-3000:]
    assert "over the 4 MiB cap on stdout" in out and "Traceback" not in out, out[-3000:]
    results = json.loads((tmp_path / "reports" / "results.json").read_text("utf-8"))
    assert results["verdict"] == "error"
    assert peak < 500, f"peak RSS {peak} MB"


def test_a_whole_run_shows_the_harness_s_stderr_without_ci_commands(core: ServedSimulator, tmp_path: Path) -> None:
    body = "import sys\nprint('::add-mask::hidden', file=sys.stderr)\nprint('::error::boom', file=sys.stderr)\nsys.exit(3)\n"
    code, out, _took, _peak = _client_run(_script(tmp_path, body), core, tmp_path)
    assert code == 7, out[-3000:]
    assert "add-mask" in out, out[-3000:]
    lines = [line for raw in out.splitlines() for line in raw.split("\r")]
    assert not [line for line in lines if line.strip().startswith("::")], out[-3000:]
