"""The one table of exit codes: every command of the suite (a run, a client run, a load run,
compare, corpus) and the pre-flight exit with these. pytest's own codes keep their meaning
(3 internal error, 4 usage error, 5 no test selected); 2 is interrupted, as pytest's."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    CONFORMANT = 0
    OK = 0
    """A command that judges no target succeeded (compare found no regression, corpus wrote its kit)."""
    NON_CONFORMANT = 1
    """Also compare's answer for a regression or a stale baseline."""
    INTERRUPTED = 2
    INTERNAL_ERROR = 3
    USAGE_ERROR = 4
    """A bad option or configuration, found before any test runs."""
    INCOMPLETE = 6
    """A MUST the run gates on was not verified."""
    HARNESS_ERROR = 7
    """The suite could not judge (the verdict ``error``)."""


VERDICT_EXIT: dict[str, int] = {
    "conformant": int(Exit.CONFORMANT),
    "non-conformant": int(Exit.NON_CONFORMANT),
    "interrupted": int(Exit.INTERRUPTED),
    "incomplete": int(Exit.INCOMPLETE),
    "error": int(Exit.HARNESS_ERROR),
}
"""The exit code of each verdict."""

HELP = (
    f"exit codes: {Exit.CONFORMANT:d} conformant, {Exit.NON_CONFORMANT:d} non-conformant, "
    f"{Exit.INTERRUPTED:d} interrupted, {Exit.INTERNAL_ERROR:d} internal error, "
    f"{Exit.USAGE_ERROR:d} usage error (found before any test), "
    f"{Exit.INCOMPLETE:d} incomplete (a MUST not verified), "
    f"{Exit.HARNESS_ERROR:d} harness error (the suite could not judge; see the report)"
)
"""The exit codes as a command's help says them."""
