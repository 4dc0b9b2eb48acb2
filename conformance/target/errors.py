"""Errors of the harness itself, kept apart from a target's contract violations.

A check that sees the target break a rule raises ``checks.ContractViolation``;
everything the suite cannot judge (the control extension refused a setup step,
the network dropped, a fixture broke) is a ``HarnessError`` or another exception,
and the run's verdict becomes ``error``: never "non-conformant", never "conformant".
"""

from __future__ import annotations


class HarnessError(RuntimeError):
    """The suite could not set up or observe what a test needs; nothing was judged."""
