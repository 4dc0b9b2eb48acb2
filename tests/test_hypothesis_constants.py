"""A suite session's generated cases do not depend on which local modules its process imported
(conformance.plugin.hypothesis_constants)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.suite_command import SUITE

DRAWS = """
import sys

from hypothesis import given, settings, strategies as st

from conformance.plugin.hypothesis_constants import without_local_constants

if sys.argv[1] == "fixed":
    without_local_constants()
seen = []


@settings(derandomize=True, database=None, max_examples=300)
@given(st.text(), st.integers(), st.binary())
def draw(text, number, data):
    seen.append((text, number, data))


draw()
before = list(seen)
seen.clear()
sys.path.insert(0, sys.argv[2])
import kc_local_constants  # noqa: E402,F401 - a local module full of constants, imported between the two

draw()
print("same" if before == seen else "different")
"""

LOCAL = """
WORDS = ["kc-zebra-constant", "kc-another-constant", "kc-third-constant", "kc-fourth-constant"]
NUMBERS = [987654321, 31337, 4242, -77777, 123456789012]
BLOBS = [b"kc-bytes-constant", b"kc-more-bytes"]
"""


def _draws(tmp_path: Path, mode: str) -> str:
    (tmp_path / "kc_local_constants.py").write_text(LOCAL, "utf-8")
    script = tmp_path / "draws.py"
    script.write_text(DRAWS, "utf-8")
    done = subprocess.run(
        [sys.executable, str(script), mode, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_derandomized_cases_change_with_an_imported_local_module_unless_fixed(tmp_path: Path) -> None:
    """The dependence is real in the installed Hypothesis (else the fix proves nothing), and gone with the fix."""
    assert _draws(tmp_path, "plain") == "different"
    assert _draws(tmp_path, "fixed") == "same"


def test_the_fix_is_undone_and_finds_its_hook() -> None:
    """It finds what it replaces in the installed Hypothesis (an upgrade that renames it fails
    here, not silently), and its cleanup puts the original back."""
    from hypothesis.internal.conjecture import providers

    from conformance.plugin.hypothesis_constants import without_local_constants

    original = providers._get_local_constants
    undo = without_local_constants()
    try:
        assert providers._get_local_constants is not original
        assert not any(providers._get_local_constants().set_for_type(kind) for kind in (int, float, bytes, str))
    finally:
        undo()
    assert providers._get_local_constants is original


PROBE = """
def pytest_sessionfinish(session):
    from pathlib import Path

    from hypothesis.internal.conjecture import providers

    Path("constants.txt").write_text(providers._get_local_constants.__name__, "utf-8")
"""


def test_a_suite_session_draws_no_local_constant(tmp_path: Path) -> None:
    (tmp_path / "kc_constants_probe.py").write_text(PROBE, "utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    cmd = [*SUITE, "-p", "kc_constants_probe", "--report-dir", str(tmp_path / "reports"), "--requirement", "CAP-001"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    probe = tmp_path / "constants.txt"
    assert probe.is_file(), (done.stdout + done.stderr)[-2000:]
    assert probe.read_text("utf-8") == "no_local_constants"
