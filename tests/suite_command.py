"""The command lines that run the suite in a process of its own, as the project's tests do.

Most of the project's test time is whole-suite runs in subprocesses (the quirk table, the
seed-allowed Cores, the broken variants of the other implementations), and each fresh
interpreter spent one to one and a half CPU seconds importing pytest, Hypothesis, schemathesis,
the HTTP stack, the MCP SDK and the simulator's libraries before its first test. :func:`warm_suite`
and :func:`warm_cli` fork such runs from one server per test process that imported them once:
the server ``--concurrency`` runs fork their workers from (:mod:`conformance.plugin.warm`), which
imports nothing of this project, so each run still builds the suite's own state for itself.
A test about the process itself (its signals, its imports, its memory, measured from the process
it waits for, which is here the launcher) uses :data:`SUITE`, and so do runs compared for agreement:
forked runs share their server's string hash seed. ``KC_WARM_WORKERS=0`` makes every run a fresh
interpreter.

A forked run against the bundled simulator also shares one simulator fork server per test process
(``KNOWLEDGE_SIM_FORKSERVER=PATH``, :mod:`simulator.forkserver`) for its stdio MCP sessions: each
run started its own, which spent more CPU importing the MCP SDK than a run of a few requirements
spent on its tests. A run that sets the variable itself keeps its setting.
"""

from __future__ import annotations

import atexit
import functools
import sys
import threading

from conformance.cli import SUITE_ARGS
from conformance.plugin import warm
from simulator import forkserver

SUITE = [sys.executable, "-m", "pytest", "-q", *SUITE_ARGS]
"""The suite as ``knowledge-conformance run`` runs it, quiet, in a fresh interpreter."""

PYTEST_MAIN = "import runpy; runpy.run_module('pytest', run_name='__main__', alter_sys=True)"
"""``python -m pytest``, as ``-c`` code."""
CLI_MAIN = "from conformance.cli import main; raise SystemExit(main())"

_LOCK = threading.Lock()


def _server() -> warm.WarmServer | None:
    """This process's server, started at the first forked run (None where it cannot be used)."""
    with _LOCK:  # the cache alone would let two threads' first calls each start one
        return _started()


@functools.cache
def _started() -> warm.WarmServer | None:
    if not warm.forkable():
        return None
    server = warm.WarmServer((*warm.MCP_PRELOAD, *warm.BUNDLED_PRELOAD))
    if not server.listening():
        server.close()
        return None
    atexit.register(server.close)
    return server


def _sim_forkserver() -> forkserver.ForkServer | None:
    with _LOCK:
        return _sim_started()


@functools.cache
def _sim_started() -> forkserver.ForkServer | None:
    if not warm.forkable():
        return None
    server = forkserver.ForkServer()
    if not server.ready():
        server.close()
        return None
    atexit.register(server.close)
    return server


def forked(code: str) -> list[str]:
    """``python -c CODE``, forked from this process's server when it runs: its launcher hands the
    server its pipes, directory and environment and lives as long as the run, with its exit code
    (the launcher becomes that fresh interpreter whenever the server cannot fork)."""
    server = _server()
    if server is None:
        return [sys.executable, "-c", code]
    shared = _sim_forkserver()
    if shared is not None:
        code = f"import os; os.environ.setdefault({forkserver.ENABLED_ENV!r}, {shared.socket_path!r}); {code}"
    return [sys.executable, "-I", "-S", warm.LAUNCHER, server.socket_path, "-c", code]


def warm_suite() -> list[str]:
    """:data:`SUITE`, forked (a run whose signals, imports or memory a test watches uses SUITE)."""
    return [*forked(PYTEST_MAIN), "-q", *SUITE_ARGS]


def warm_cli() -> list[str]:
    """``knowledge-conformance``, forked."""
    return forked(CLI_MAIN)
