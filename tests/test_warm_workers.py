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


def test_a_worker_finds_the_modules_its_run_asked_the_server_for(tmp_path: Path) -> None:
    """The run names more modules for its workers (the MCP SDK, the bundled simulator's
    libraries): the server imports them before it forks, and only those it was given."""
    show = "import sys; print('tomllib' in sys.modules, 'mcp' in sys.modules)"
    given = warm.WarmServer(("tomllib",))
    try:
        assert given.listening()
        out, err = launch(given.python(), ["-u", "-c", show], tmp_path).communicate("", timeout=60)
    finally:
        given.close()
    assert out.split() == ["True", "False"], err


def test_a_worker_keeps_hypothesis_default_folder_in_its_own_directory(server: warm.WarmServer, tmp_path: Path) -> None:
    """Hypothesis computes its default folder from the directory it is imported in: the server's.
    A forked worker's is its own directory, as a fresh interpreter's would be."""
    show = "import hypothesis.configuration as c; print(vars(c)['__hypothesis_home_directory_default'])"
    out, err = launch(server.python(), ["-u", "-c", show], tmp_path).communicate("", timeout=60)
    assert out.strip() == str(tmp_path / ".hypothesis"), err


def test_the_projects_forked_suite_runs_are_forked_and_end_with_the_runs_exit(tmp_path: Path) -> None:
    """tests.suite_command's forked command lines: pytest is already imported in the run's process,
    and the run's exit code (4, a usage error) is the launcher's."""
    from tests.suite_command import forked, warm_suite

    if os.environ.get(warm.ENABLED_ENV) == "0":
        pytest.skip("KC_WARM_WORKERS=0: every run is a fresh interpreter")
    show = "import sys; print('hypothesis' in sys.modules, 'conformance' in sys.modules)"
    out = subprocess.run([*forked(show)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.stdout.split() == ["True", "False"], out.stderr
    done = subprocess.run([*warm_suite(), "--rate-limit", "nan"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout[-1500:] + done.stderr[-1500:]


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


HANDLING = """
import signal, sys
names = {signal.SIG_IGN: "ignored", signal.SIG_DFL: "default", signal.default_int_handler: "interrupt"}
print(*(names.get(signal.getsignal(s), "other") for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)),
      "pytest" in sys.modules)
"""


@pytest.mark.parametrize("ignored", [(), ("SIGINT",), ("SIGINT", "SIGTERM", "SIGHUP")])
def test_a_forked_worker_keeps_the_signal_handling_its_launcher_inherited(
    server: warm.WarmServer, tmp_path: Path, ignored: tuple[str, ...]
) -> None:
    """A background job of a script ignores SIGINT, and a plain worker inherits that: a Ctrl-C sent
    to the job's process group must not end a forked worker either."""

    def ignore() -> None:  # the rest as a fresh shell leaves them, whatever this process does (xdist ignores SIGINT)
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else signal.SIG_DFL)

    proc = launch(server.python(), ["-u", "-c", HANDLING], tmp_path, preexec_fn=ignore)
    out, err = proc.communicate("", timeout=60)
    plain = {"SIGINT": "interrupt", "SIGTERM": "default", "SIGHUP": "default"}  # a fresh interpreter's
    want = ["ignored" if name in ignored else handling for name, handling in plain.items()]
    assert out.split() == [*want, "True"], err


EXIT = """
import atexit, threading, time, sys
def later():
    time.sleep(0.3)
    open(sys.argv[1] + ".thread", "w").write("joined")
threading.Thread(target=later).start()
atexit.register(lambda: open(sys.argv[1] + ".atexit", "w").write("ran"))
"""


def test_a_forked_worker_ends_as_an_interpreter_does(server: warm.WarmServer, tmp_path: Path) -> None:
    """Its other threads are joined and its atexit functions run (a served simulator's fork server
    removes its folder there), as in a plain interpreter."""
    mark = tmp_path / "mark"
    proc = launch(server.python(), ["-u", "-c", EXIT, str(mark)], tmp_path)
    proc.communicate("", timeout=60)
    assert proc.returncode == 0
    assert (tmp_path / "mark.thread").read_text() == "joined"
    assert (tmp_path / "mark.atexit").read_text() == "ran"


FAILING_FORK = """
import os, runpy, sys
real, flag = os.fork, sys.argv[3]
def fork():
    if os.path.exists(flag):
        raise OSError(11, "Resource temporarily unavailable")
    return real()
os.fork = fork
runpy.run_path(sys.argv[1])["serve"](sys.argv[2])
"""

WAIT_FOR = """
import os, sys, time
open(sys.argv[2], "w").close()  # started
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print("done", "pytest" in sys.modules)
"""


def test_a_fork_that_fails_gives_a_plain_worker_and_spares_the_others(tmp_path: Path) -> None:
    socket_path, flag, release = tmp_path / "w.sock", tmp_path / "fail", tmp_path / "release"
    zygote = subprocess.Popen(
        [sys.executable, "-c", FAILING_FORK, warm.__file__, str(socket_path), str(flag)], stdin=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        python = f"{sys.executable} -I -S {warm.LAUNCHER} {socket_path}"
        first = launch(python, ["-u", "-c", WAIT_FOR, str(release), str(tmp_path / "first")], tmp_path)
        while not (tmp_path / "first").exists() and time.monotonic() < deadline + 30:
            time.sleep(0.02)  # forked before the flag (the server accepts once its imports are done)
        flag.write_text("")
        second = launch(python, ["-u", "-c", WAIT_FOR, str(release), str(tmp_path / "second")], tmp_path)
        release.write_text("")
        assert second.communicate("", timeout=60)[0].split() == ["done", "False"]  # plain
        assert first.communicate("", timeout=60)[0].split() == ["done", "True"]  # forked, and not killed
        assert zygote.poll() is None
    finally:
        assert zygote.stdin is not None
        zygote.stdin.close()
        zygote.wait(timeout=30)
    assert not tmp_path.joinpath("w.sock").exists()


def test_a_path_the_spec_or_a_socket_cannot_carry_gives_plain_workers(tmp_path: Path) -> None:
    def spec(python: str, socket_path: str) -> Any:
        return SimpleNamespace(python=lambda: python, socket_path=socket_path)

    assert warm._spec_safe(spec("/usr/bin/python3 -I -S l.py /tmp/a/w.sock", "/tmp/a/w.sock"))
    assert not warm._spec_safe(spec("/usr/bin/python3 -I -S l.py //tmp/a/w.sock", "//tmp/a/w.sock"))
    long = "/tmp/" + "d" * 120 + "/w.sock"
    assert not warm._spec_safe(spec(f"/usr/bin/python3 -I -S l.py {long}", long))
    assert warm.serve(str(tmp_path / "missing" / "w.sock")) == 1  # a socket it cannot bind: quietly no server
