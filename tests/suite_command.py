"""The command line that runs the suite in a process of its own, as the project's tests do."""

from __future__ import annotations

import sys

from conformance.cli import SUITE_ARGS

SUITE = [sys.executable, "-m", "pytest", "-q", *SUITE_ARGS]
"""The suite as ``knowledge-conformance run`` runs it, quiet."""
