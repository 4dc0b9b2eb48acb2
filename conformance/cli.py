"""``knowledge-conformance``: run the suite against a target and write reports,
or compare two results.json files. For CI systems that are not Python."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import NoReturn

from conformance.common.exits import HELP, Exit
from conformance.common.options import CLIENT, LOAD, RUN, add_arguments, options_of, pytest_arguments


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad option; this command's usage errors exit 4, as a suite run's do
    (2 means interrupted here)."""

    def error(self, message: str) -> NoReturn:
        """One line, as every other usage error of a run (the whole usage is ``--help``'s)."""
        self.exit(Exit.USAGE_ERROR, f"{self.prog}: error: {message} ({self.prog} --help shows the options)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="knowledge-conformance", description="Knowledge contract conformance suite.", epilog=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite and write reports", epilog=HELP)
    add_arguments(run, RUN)
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    load = sub.add_parser(
        "load",
        help="the contract under concurrency: a Locust load run (needs the 'load' extra), reports as for run",
        epilog=HELP,
    )
    if importlib.util.find_spec("locust") is None:
        load.set_defaults(load_missing=True)
    add_arguments(load, LOAD)  # without importing Locust (it patches the standard library for gevent)
    client = sub.add_parser("client", help="check a client (SDK or host) through its harness program", epilog=HELP)
    add_arguments(client, CLIENT)
    client.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    cmp = sub.add_parser("compare", help="what changed between two results.json files")
    cmp.add_argument("old")
    cmp.add_argument("new")
    cmp.add_argument(
        "--fail-on-new-failures",
        action="store_true",
        help="exit 1 when the new run has new failures or lost coverage (a rule judged before is not verified now), "
        "or when the baseline is stale (a rule failed or waived in it is verified now: store the new file as the baseline)",
    )
    cmp.add_argument(
        "--allow-fixed",
        action="store_true",
        help="with --fail-on-new-failures: a rule failed in the baseline and verified now does not fail the gate",
    )
    kit = sub.add_parser(
        "corpus", help="the conformance corpus kit: the suite's test documents, to ingest into a Core without control"
    )
    kit_sub = kit.add_subparsers(dest="corpus_command", required=True)
    export = kit_sub.add_parser(
        "export", help="write the documents as plain files and a manifest (what each is for, its probe phrase)"
    )
    export.add_argument("folder", metavar="DIR")
    observe = sub.add_parser(
        "observe", help="judge real traffic: a reverse proxy in front of a Core, or a HAR recording", epilog=HELP
    )
    from conformance.observe.command import add_arguments as add_observe_arguments

    add_observe_arguments(observe)
    return parser


# This module has imported the ``conformance`` package before pytest starts, so pytest cannot
# rewrite its asserts and warns; a project whose pytest settings turn warnings into errors
# (``filterwarnings = ["error"]``) would then stop before any test.
# ``--assert=plain``: the suite judges with ``expect`` (its own messages), never with bare asserts, so
# pytest's assert rewriting would only cost time: it rewrites every module of every pytest plugin's
# distribution the run imports (Hypothesis, Schemathesis, this package), about 6 CPU seconds a run
# where bytecode is not cached.
QUIET_REWRITE = ("-W", "ignore::pytest.PytestAssertRewriteWarning", "--assert=plain")
SUITE_ARGS = ("--pyargs", "conformance.suite", "-p", "no:cacheprovider", "-p", "no:benchmark", *QUIET_REWRITE)
"""pytest's arguments for the suite from its installed package, with no cache folder left behind
(pytest's ``.pytest_cache``, pytest-benchmark's ``.benchmarks``; Hypothesis keeps its tables in
the user's cache, conformance.plugin.hypothesis_home): what ``knowledge-conformance run`` passes,
and what the project's tests and benchmarks run."""


def _number_problem(args: argparse.Namespace) -> str | None:
    """The first numeric option out of its range (NaN and the infinities included), in the
    spelling this command takes: found before anything starts, not as a crash after the tests did."""
    from conformance.common.config import option_number_problem

    for opt in options_of(args.command):
        problem = option_number_problem(opt.name, getattr(args, opt.key, None), opt.flags(args.command)[0])
        if problem is not None:
            return problem
    return None


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What makes a run, client or load command unusable before it starts, or None."""
    if args.command == CLIENT:
        from conformance.clients.protocol import usage_problem

        problem = usage_problem(args.harness, args.harness_timeout)
        if problem is not None:
            return problem
    for flag in ("run_id", "mcp_target"):  # an unset variable: a fresh ID lost the replay, "" checked the bundled MCP
        value = getattr(args, flag, None)
        if value is not None and not value.strip():
            return f"--{flag.replace('_', '-')} is empty (an unset variable?)"
    return _number_problem(args)


USAGE_PREFIX = {RUN: "ERROR: ", CLIENT: "ERROR: ", LOAD: "knowledge-conformance load: "}
"""How each command starts a usage error (run and client as the suite's own pytest run does)."""


PYTEST_OWNS = ("--target", "--run-id", "--rate-limit", "--co", "--collect-only", "--help", "-h")
"""Extra pytest arguments after which the command line leaves the checks before any test to pytest
alone: they change what those checks would see (or ask for no network at all)."""


def _setup_problem(args: argparse.Namespace) -> tuple[int, str] | None:
    """A run's configuration and its live target checked before pytest starts, with the light
    imports only: a setup mistake is one line in about a second, not after the suite, Hypothesis
    and every plugin were imported. The exit code and the line, or None when the run may start.
    A pre-flight that passes is not repeated by the session (conformance.plugin.identities)."""
    from conformance.common.config import ConfigError, load_config
    from conformance.common.settings import new_run_id

    try:
        cfg = load_config(args.target_config, target=args.target)
    except ConfigError as exc:
        return Exit.USAGE_ERROR, f"ERROR: {exc}"
    if cfg.is_sim or any(a.split("=", 1)[0] in PYTEST_OWNS for a in args.pytest_args):
        return None
    args.run_id = args.run_id or new_run_id()  # the pre-flight's turn is named under the run's ID
    return _live_preflight(args, cfg)


def _live_preflight(args: argparse.Namespace, cfg: object) -> tuple[int, str] | None:
    """The pre-flight of a live target (its base URL, identities, routes, probe query and control
    extension) as the session would run it; a harness stop keeps its own exit code."""
    import pytest

    from conformance.common.config import TargetConfig
    from conformance.common.settings import RunIdError, RunSettings
    from conformance.plugin.identities import check_live_target, check_mcp_url
    from conformance.plugin.preflight import check_control

    assert isinstance(cfg, TargetConfig)
    try:
        settings = RunSettings.from_options(run_id=args.run_id, rate_limit=max(0.0, args.rate_limit))
    except RunIdError:
        return None  # the session says what is wrong with it
    try:
        check_live_target(cfg, settings)
        if cfg.control_url is not None and cfg.control_token is not None:
            check_control(cfg)
        check_mcp_url(cfg, args.mcp_target)
    except pytest.UsageError as exc:
        return Exit.USAGE_ERROR, f"ERROR: {exc}"
    except pytest.exit.Exception as exc:
        return int(exc.returncode if exc.returncode is not None else Exit.HARNESS_ERROR), exc.msg
    return None


def _compare(args: argparse.Namespace) -> int:
    """Exit 1 only for a regression or a stale baseline (a fix it does not hold yet, which would let
    that rule break again unseen): a file that is not a results.json is a usage error (4), so a
    broken baseline never reads as a worse run."""
    from conformance.common.untrusted import one_line
    from conformance.report.compare import compare, load, regressed, render, stale, stale_line

    try:
        old, new = load(args.old), load(args.new)
    except ValueError as exc:
        print(f"knowledge-conformance: {exc}", file=sys.stderr)
        return Exit.USAGE_ERROR
    diff = compare(old, new)
    print(render(diff, old, new))
    if not args.fail_on_new_failures:
        return Exit.OK
    fixed = [] if args.allow_fixed else stale(old, new)
    if fixed:
        print(f"knowledge-conformance: {one_line(stale_line(fixed, args.old, args.new))}", file=sys.stderr)
    return Exit.NON_CONFORMANT if regressed(diff) or fixed else Exit.OK


def _holds_other_files(folder: Path, manifest: str) -> bool:
    """Whether ``folder`` exists with entries in it but no kit's manifest (so an export would
    overwrite files of the user's own, as a ``README.txt``); a kit exported before is replaced."""
    import json

    try:
        if not folder.is_dir() or not any(folder.iterdir()):
            return False
        return "schema" not in json.loads((folder / manifest).read_text("utf-8"))
    except (OSError, ValueError, TypeError):
        return True


def _corpus(args: argparse.Namespace) -> int:
    from conformance.server.kit import MANIFEST, export

    if not args.folder.strip():
        print("knowledge-conformance: corpus export needs a folder (an unset variable?)", file=sys.stderr)
        return Exit.USAGE_ERROR
    folder = Path(args.folder)
    if _holds_other_files(folder, MANIFEST):
        print(
            f"knowledge-conformance: {folder} holds files that are not a corpus kit: export into an empty folder "
            "(a kit exported before is replaced)",
            file=sys.stderr,
        )
        return Exit.USAGE_ERROR
    try:
        written = export(folder)
    except OSError as exc:
        print(f"knowledge-conformance: cannot write the kit into {folder}: {exc.strerror or exc}", file=sys.stderr)
        return Exit.USAGE_ERROR
    print(f"{len(written['documents'])} documents and {MANIFEST} written to {folder}")
    return Exit.OK


def _load(args: argparse.Namespace) -> int:
    if getattr(args, "load_missing", False):
        print(
            "knowledge-conformance load: Locust is not installed; pip install 'knowledge-conformance[load]'",
            file=sys.stderr,
        )
        return Exit.USAGE_ERROR
    import locust  # noqa: F401  (first: it patches the standard library for gevent before ssl and sockets are used)

    from conformance.load.runner import main as run_load

    return run_load(args)


def _checked_setup(args: argparse.Namespace) -> tuple[int, str] | None:
    """:func:`_setup_problem`, where a value HTTP cannot carry (a token with a non-ASCII character)
    is the usage error it is, not a traceback."""
    try:
        return _setup_problem(args)
    except UnicodeEncodeError as exc:
        return Exit.USAGE_ERROR, (
            f"ERROR: a configured token or URL holds {exc.object[exc.start : exc.end]!r}, which an HTTP header "
            "cannot carry: tokens are ASCII"
        )


def main(argv: list[str] | None = None) -> int:
    from conformance.common.untrusted import guard_streams

    guard_streams()  # whatever a command prints from a target or a file is defanged (conformance.common.untrusted)
    args = _parser().parse_args(argv)
    if args.command == "compare":
        return _compare(args)
    if args.command == "corpus":
        return _corpus(args)
    if args.command == "observe":
        from conformance.observe.command import main as observe

        return observe(args)
    problem = _usage_problem(args)
    if problem is not None:
        from conformance.common.untrusted import one_line

        print(f"{USAGE_PREFIX[args.command]}{one_line(problem)}", file=sys.stderr)
        return Exit.USAGE_ERROR
    if args.command == LOAD:
        return _load(args)
    if args.command == RUN and (setup := _checked_setup(args)) is not None:
        from conformance.common.untrusted import one_line

        print(one_line(setup[1]), file=sys.stderr)
        return setup[0]
    import pytest

    if args.command == CLIENT:
        options = [
            "--pyargs",
            "conformance.suite.clients",
            "-p",
            "no:cacheprovider",
            *QUIET_REWRITE,
            *pytest_arguments(args, CLIENT),
        ]
        return int(pytest.main([*options, *args.pytest_args]))
    # Not -q: the header line names the target and the run ID before any test runs.
    options = [*SUITE_ARGS, *pytest_arguments(args, RUN)]
    return int(pytest.main([*options, *args.pytest_args]))


if __name__ == "__main__":
    raise SystemExit(main())
