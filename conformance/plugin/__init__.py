"""pytest plugin: the suite's options, and, only in a session that asked for the suite,
its marker, fixtures, fail-early checks, result bookkeeping and reports.

A session asks for the suite by naming it (``--pyargs conformance.suite`` or its folder)
or by giving ``--target``. Any other pytest session in an environment where this
package sees the options (added so that they never take a name that session already
uses, see conformance.plugin.options) and the marker's description, and nothing else: no
fixtures, no network, no exit-code changes.

Reports are written by the main process only; under pytest-xdist the workers'
results reach it through each report's ``user_properties``.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.plugin.options import add_options, option
from conformance.plugin.preflight import prepare
from conformance.plugin.schedule import LONG
from conformance.plugin.session import SuiteSession, XdistController
from conformance.plugin.state import MARKER, STATE, is_worker


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    """Options are added once the session's own conftest files have added theirs (see conformance.plugin.options)."""
    result = yield
    add_options(parser)
    return result


def _suite_dir() -> Path:
    """The suite's folder, found without importing it (the plugin sits below the tests it runs)."""
    spec = importlib.util.find_spec("conformance.suite")
    assert spec is not None and spec.origin is not None, "conformance.suite is part of this package"
    return Path(spec.origin).resolve().parent


def wants_suite(config: pytest.Config) -> bool:
    """Did this session ask for the suite? An explicit --target, or the suite among the paths."""
    if option(config, "--target") is not None or option(config, "--harness") is not None:
        return True
    suite = _suite_dir()
    for arg in config.args:
        name = str(arg).split("::", 1)[0]
        if config.option.pyargs and (name == "conformance" or name.startswith("conformance.suite")):
            return True
        path = Path(name).resolve()
        if path == suite or suite in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The client checks (``suite/clients``) run only in a client run (``--harness``), the Core's
    surfaces only without it: ``--pyargs conformance.suite`` means the Core suite, as before."""
    if not wants_suite(config):
        return None
    suite = _suite_dir()
    if suite not in collection_path.parents:
        return None
    clients = suite / "clients"
    inside = collection_path == clients or clients in collection_path.parents
    return True if inside != (option(config, "--harness") is not None) else None


@pytest.hookimpl(tryfirst=True)
@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A suite session's console shows a target's text defanged (conformance.common.untrusted):
    the streams are guarded before the terminal reporter takes hold of them. ``--concurrency N``
    becomes N pytest-xdist workers (before xdist reads its own options), unless ``-n`` says otherwise;
    without it, a Core a network away gets a few (conformance.plugin.workers)."""
    if wants_suite(config):
        from conformance.common.untrusted import guard_streams

        guard_streams()
        workers = option(config, "--concurrency")
        if workers is None and option(config, "--harness") is None and not is_worker(config):
            from conformance.plugin.workers import default_workers

            workers = default_workers(option(config, "--target-config"), option(config, "--target"))
        if (
            isinstance(workers, int)
            and 1 < workers <= 64  # out of range: a usage error once the run is prepared
            and not is_worker(config)
            and getattr(config.option, "numprocesses", None) is None
            and config.pluginmanager.hasplugin("xdist")
        ):
            # What xdist's own pytest_cmdline_main does with -n N (it may have run already), balanced by work stealing.
            config.option.numprocesses = workers
            from conformance.plugin import warm
            from conformance.plugin.workers import preloads

            extra = preloads(
                option(config, "--target-config"), option(config, "--target"), option(config, "--mcp-target")
            )
            server = warm.start(config, extra)  # workers forked from one that imported their libraries once
            config.option.tx = ["popen" if server is None else f"popen//python={server.python()}"] * workers
            if config.option.dist == "no":
                config.option.dist = "worksteal"  # a long test late in the order is not left to the last worker


def pytest_configure(config: pytest.Config) -> None:
    # Always registered: a project that imports suite modules (to list their IDs) runs under --strict-markers.
    config.addinivalue_line("markers", f"{MARKER}(*ids): requirement IDs of the catalogue that this test verifies")
    config.addinivalue_line(
        "markers",
        f"{LONG}(rounds=N): about N round trips in a row; started first under --concurrency, the longest first",
    )
    if not wants_suite(config):
        return
    from conformance.plugin import fixtures
    from conformance.plugin.ast_guard import guard_ast_parse, reuse_traceback_parses
    from conformance.plugin.hypothesis_constants import without_local_constants
    from conformance.plugin.hypothesis_home import keep_in_user_cache

    config.add_cleanup(guard_ast_parse())  # no collection inside ast.parse (CPython 3.11), see there
    config.add_cleanup(reuse_traceback_parses())  # a failed test's traceback parses each file once a run
    keep_in_user_cache()  # Hypothesis' Unicode tables built once a machine, not once a folder and process
    config.add_cleanup(without_local_constants())  # the same cases whatever this process happened to import

    config.stash[STATE] = prepare(config, started=time.time())
    config.pluginmanager.register(fixtures, "knowledge-conformance-fixtures")
    if option(config, "--harness") is not None:
        from conformance.plugin import client_fixtures as harness_fixtures

        config.pluginmanager.register(harness_fixtures, "knowledge-conformance-harness-fixtures")
    config.pluginmanager.register(SuiteSession(config), "knowledge-conformance-session")
    if config.pluginmanager.hasplugin("xdist") and not is_worker(config):
        config.pluginmanager.register(XdistController(config), "knowledge-conformance-xdist")
