"""A failure's message names the broken rule's own words, also when the check failed inside an
MCP session's task group (which wraps it in exception groups)."""

from __future__ import annotations

from conformance.common.outcomes import ContractViolation
from conformance.plugin.claims import shown_exception


def test_a_violation_inside_task_groups_is_the_message() -> None:
    violation = ContractViolation("SK-004", "alice's read of sm-a2 was refused")
    wrapped = ExceptionGroup("unhandled errors in a TaskGroup", [ExceptionGroup("inner", [violation])])
    assert shown_exception(wrapped) is violation


def test_a_group_of_other_failures_is_shown_whole() -> None:
    group = ExceptionGroup("2 failures", [ValueError("a"), KeyError("b")])
    assert shown_exception(group) is group
    plain = ValueError("c")
    assert shown_exception(plain) is plain


def test_a_bad_option_of_the_command_is_one_line_and_exit_4() -> None:
    """argparse's own refusals (an unknown choice) say one line, as the suite's usage errors do."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--fail-on", "maybe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 4 and len(lines) == 1, done.stderr
    assert "--fail-on" in lines[0] and "'maybe'" in lines[0] and "--help" in lines[0]
