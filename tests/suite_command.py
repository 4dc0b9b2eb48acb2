"""The command line that runs the suite in a process of its own, as the project's tests do."""

from __future__ import annotations

import sys

SUITE = [
    sys.executable,
    "-m",
    "pytest",
    "--pyargs",
    "conformance.suite",
    "-q",
    "-p",
    "no:cacheprovider",
    "--assert=plain",
]
"""The suite from its installed package, quiet, with no cache folder left behind, and no assert
rewriting (the suite judges with ``expect``; rewriting every plugin's modules costs seconds a run),
as ``knowledge-conformance run`` runs it."""
