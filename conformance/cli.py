"""``knowledge-conformance``: run the suite against a target and write reports,
or compare two results.json files. For CI systems that are not Python."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

VERDICT_HELP = (
    "exit codes: 0 conformant, 1 non-conformant, 2 interrupted, 3 internal error, 4 usage error (found before any test), "
    "6 incomplete (a MUST not verified), 7 harness error (the suite could not judge; see the report)"
)


USAGE_ERROR = 4


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad option; this command's usage errors exit 4, as a suite run's do
    (2 means interrupted here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="knowledge-conformance", description="Knowledge contract conformance suite.", epilog=VERDICT_HELP
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the suite and write reports", epilog=VERDICT_HELP)
    run.add_argument("--target", default=None, help="sim (default), sim+http, or the URL of a live Core")
    run.add_argument("--run-id", help="namespace of what the run creates on the target (default: random)")
    run.add_argument(
        "--mcp-target",
        help="the Agent Session MCP server: an http(s) URL (streamable HTTP), a command (stdio) "
        "or none (default: [mcp] of the target config, or the bundled simulator's)",
    )
    run.add_argument("--target-config", help="TOML file with route, identities, control and wire overrides")
    run.add_argument(
        "--report-dir", "--reports", dest="reports", default="reports", help="output folder (default: reports)"
    )
    run.add_argument("--fail-on", choices=("must", "should"), default="must")
    run.add_argument("--waivers", help="TOML file of [[waiver]] entries")
    run.add_argument("--sim-quirk", action="append", default=[], help="bundled simulator only: deviate on purpose")
    run.add_argument("--no-control", action="store_true", help="do not use the test-control extension in tests")
    run.add_argument("--realtime", action="store_true", help="wait real seconds for expiry without control")
    run.add_argument("--rate-limit", type=float, default=0.0, help="requests per second to the target")
    run.add_argument("--deep", action="store_true", help="release-gating depth for generated tests")
    run.add_argument("--no-shrink", action="store_true", help="do not minimise failing generated sequences (faster)")
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    load = sub.add_parser(
        "load",
        help="the contract under concurrency: a Locust load run (needs the 'load' extra), reports as for run",
        epilog=VERDICT_HELP,
    )
    _load_arguments(load)
    client = sub.add_parser(
        "client", help="check a client (SDK or host) through its harness program", epilog=VERDICT_HELP
    )
    client.add_argument(
        "--harness",
        required=True,
        help="the command that starts the client's harness "
        "(JSON lines on stdin/stdout, schemas/harness-protocol.schema.json)",
    )
    client.add_argument("--core", help="a Core with the control extension (default: a served bundled simulator)")
    client.add_argument("--control-token", help="the control credential of --core (default: the bundled simulator's)")
    client.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for each harness answer (default 30)"
    )
    client.add_argument("--run-id", help="namespace of the workspaces the run creates (default: random)")
    client.add_argument(
        "--report-dir", "--reports", dest="reports", default="reports", help="output folder (default: reports)"
    )
    client.add_argument("--fail-on", choices=("must", "should"), default="must")
    client.add_argument("--waivers", help="TOML file of [[waiver]] entries")
    client.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    cmp = sub.add_parser("compare", help="what changed between two results.json files")
    cmp.add_argument("old")
    cmp.add_argument("new")
    cmp.add_argument(
        "--fail-on-new-failures",
        action="store_true",
        help="exit 1 when the new run has new failures or lost coverage (a rule judged before is not verified now)",
    )
    return parser


def _load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load command's options, without importing Locust (it patches the standard library for gevent)."""
    import importlib.util

    if importlib.util.find_spec("locust") is None:
        parser.set_defaults(load_missing=True)
    from conformance.load.options import add_arguments

    add_arguments(parser)


# This module has imported the ``conformance`` package before pytest starts, so pytest cannot
# rewrite its asserts and warns; a project whose pytest settings turn warnings into errors
# (``filterwarnings = ["error"]``) would then stop before any test.
QUIET_REWRITE = ("-W", "ignore::pytest.PytestAssertRewriteWarning")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "load":
        if getattr(args, "load_missing", False):
            print(
                "knowledge-conformance load: Locust is not installed; pip install 'knowledge-conformance[load]'",
                file=sys.stderr,
            )
            return USAGE_ERROR
        import locust  # noqa: F401  (first: it patches the standard library for gevent before ssl and sockets are used)

        from conformance.load.runner import main as run_load

        return run_load(args)
    if args.command == "compare":
        from conformance.report.compare import compare, load, regressed, render

        try:
            old, new = load(args.old), load(args.new)
        except ValueError as exc:
            print(f"knowledge-conformance: {exc}", file=sys.stderr)
            return USAGE_ERROR
        diff = compare(old, new)
        print(render(diff, old, new))
        return 1 if args.fail_on_new_failures and regressed(diff) else 0
    import pytest

    if args.command == "client":
        from conformance.clients.protocol import usage_problem

        problem = usage_problem(args.harness, args.timeout)
        if problem is not None:
            from conformance.target.secrets import scrub

            print(f"ERROR: {scrub(problem)}", file=sys.stderr)
            return USAGE_ERROR
        options = [
            "--pyargs",
            "conformance.suite.clients",
            "-p",
            "no:cacheprovider",
            *QUIET_REWRITE,
            "--harness",
            args.harness,
            "--harness-timeout",
            str(args.timeout),
            f"--reports={args.reports}",
            "--fail-on",
            args.fail_on,
        ]
        for flag, value in (
            ("--harness-core", args.core),
            ("--harness-control-token", args.control_token),
            ("--run-id", args.run_id),
            ("--waivers", args.waivers),
        ):
            if value:
                options += [f"{flag}={value}"]
        return int(pytest.main([*options, *args.pytest_args]))
    # Not -q: the header line names the target and the run ID before any test runs.
    options = [
        "--pyargs",
        "conformance.suite",
        "-p",
        "no:cacheprovider",
        *QUIET_REWRITE,
        f"--reports={args.reports}",
        "--fail-on",
        args.fail_on,
        "--rate-limit",
        str(args.rate_limit),
    ]
    if args.target:  # otherwise the configuration file's [target] url, or the bundled simulator
        options += [f"--target={args.target}"]
    # Values joined to their flags: pytest takes a separate argument naming an existing folder or
    # file for a test path, and would root the run (and name its tests) there.
    for flag, value in (
        ("--target-config", args.target_config),
        ("--waivers", args.waivers),
        ("--run-id", args.run_id),
        ("--mcp-target", args.mcp_target),
    ):
        if value:
            options += [f"{flag}={value}"]
    for quirk in args.sim_quirk:
        options += ["--sim-quirk", quirk]
    options += [
        flag
        for flag, on in (
            ("--no-control", args.no_control),
            ("--realtime", args.realtime),
            ("--deep", args.deep),
            ("--no-shrink", args.no_shrink),
        )
        if on
    ]
    return int(pytest.main([*options, *args.pytest_args]))


if __name__ == "__main__":
    raise SystemExit(main())
