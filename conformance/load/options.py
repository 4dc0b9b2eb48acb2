"""The options of ``knowledge-conformance load`` (and of the locustfile's distributed mode), kept
apart from the runner so that parsing them never imports Locust."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=None,
        help="URL of a running Core (default: serve the bundled simulator on a free loopback port)",
    )
    parser.add_argument(
        "--target-config", help="TOML file with route, identities, control and wire overrides (as for run)"
    )
    parser.add_argument(
        "--users", type=int, default=8, help="concurrent simulated users, each its own identity (default 8)"
    )
    parser.add_argument("--spawn-rate", type=float, default=4.0, help="users started per second (default 4)")
    parser.add_argument(
        "--run-time",
        default="20s",
        help="how long the load lasts once every user started: 20s, 2m, 1h30m (default 20s)",
    )
    parser.add_argument(
        "--identities",
        type=int,
        default=None,
        help="accounts minted through control, at least 1 (default: one per user; a run mints 2 or more)",
    )
    parser.add_argument(
        "--report-dir", "--reports", dest="reports", default="reports", help="output folder (default: reports)"
    )
    parser.add_argument("--run-id", help="namespace of what the run creates on the target (default: random)")
    parser.add_argument(
        "--sim-quirk", action="append", default=[], help="the served bundled simulator only: deviate on purpose"
    )
