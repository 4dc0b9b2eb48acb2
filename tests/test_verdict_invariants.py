"""The verdict's invariants, each shown on a tiny suite package run through the real plugin:
any failed test is never conformant, a harness error is its own verdict, a skipped case
verifies nothing, an untagged suite test (or one checking a rule it does not claim) is a
collection error, and the plugin stays out of sessions that did not ask for the suite."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from knowledge_schemas import load_catalogue, load_registry
from tests.interrupts import interruptible

SERVER_MUSTS = [r.id for r in load_catalogue() if r.server_observable and r.level == "MUST"]
HEADER = f"""
import pytest
from conformance.common.outcomes import ContractViolation
from conformance.common.control import ControlError
from conformance.common.rules import held
R = pytest.mark.requirement

@R(*{SERVER_MUSTS!r})
def test_every_server_must_passes():
    held({SERVER_MUSTS!r})  # a check of each ran and passed
"""


def _package(root: Path, body: str, name: str = "kc_extra") -> Path:
    """A suite extension package: the plugin governs every test of a package flagged as suite."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("KNOWLEDGE_CONFORMANCE_SUITE = True\n", "utf-8")
    (pkg / "test_cases.py").write_text(HEADER + textwrap.dedent(body), "utf-8")
    return pkg


def _run(cwd: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--report-dir",
        str(cwd / "out"),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    results_file = cwd / "out" / "results.json"
    results = json.loads(results_file.read_text("utf-8")) if results_file.is_file() else None
    if results is not None:
        assert load_registry().errors("results", results) == []
    return proc.returncode, proc.stdout + proc.stderr, results


def _status(results: dict[str, Any] | None, rid: str) -> str:
    assert results is not None
    return str(next(r["status"] for r in results["requirements"] if r["id"] == rid))


def test_the_baseline_package_is_conformant(tmp_path: Path) -> None:
    _package(tmp_path, "")
    code, out, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert code == 0 and results is not None and results["verdict"] == "conformant", out[-1500:]


@pytest.mark.parametrize(
    "body",
    [
        # a plain assertion names no requirement: it still fails the run
        "@R('CAP-001')\ndef test_plain_assert():\n    assert False, 'the body was wrong'\n",
        # a violation of an ID the catalogue does not know
        "@R('CAP-001')\ndef test_unknown_id():\n    raise ContractViolation('XYZ-999', 'made up')\n",
        # a MUST of another surface than the server's
        "@R('CAP-001')\ndef test_client_must():\n    raise ContractViolation('NEG-001', 'the client read 401 as unsupported')\n",
        # pytest.fail
        "@R('CAP-001')\ndef test_pytest_fail():\n    pytest.fail('explicitly failed')\n",
    ],
    ids=["plain-assert", "unknown-id", "client-must", "pytest-fail"],
)
def test_any_failed_test_is_never_conformant(tmp_path: Path, body: str) -> None:
    _package(tmp_path, body)
    code, out, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert results is not None and results["verdict"] == "non-conformant", out[-1500:]
    assert code == 1
    assert "VERDICT: NON-CONFORMANT" in out


def test_a_plain_assertion_does_not_fail_every_tag_of_its_test(tmp_path: Path) -> None:
    _package(tmp_path, "@R('SRCH-003', 'SRCH-004')\ndef test_plain_assert():\n    assert False\n")
    _, _, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert _status(results, "SRCH-003") == "verified"  # the baseline test verified it; the failure named nothing
    assert results is not None and results["summary"]["failed"] == 0 and results["verdict"] == "non-conformant"


@pytest.mark.parametrize(
    "body",
    [
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n\n@R('CAP-001')\ndef test_uses_broken(broken):\n    pass\n",
        "@R('CAP-001')\ndef test_control_refused():\n    raise ControlError('control POST /workspaces answered 500')\n",
        "@R('CAP-001')\ndef test_suite_bug():\n    {}['missing']\n",
        "@pytest.fixture\ndef torn():\n    yield\n    raise RuntimeError('teardown broke')\n\n@R('CAP-001')\ndef test_teardown(torn):\n    pass\n",
    ],
    ids=["fixture-error", "control-error", "suite-bug", "teardown-error"],
)
def test_a_harness_error_is_its_own_verdict_never_a_server_failure(tmp_path: Path, body: str) -> None:
    _package(tmp_path, body)
    code, out, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert results is not None and results["verdict"] == "error", out[-1500:]
    assert code == 7
    assert _status(results, "CAP-001") != "failed", "a harness error must not be charged to the server"


def test_harness_error_wins_over_a_server_failure(tmp_path: Path) -> None:
    body = (
        "@R('CAP-001')\ndef test_fails():\n    raise ContractViolation('CAP-001', 'no')\n\n"
        "@R('CAP-002')\ndef test_errors():\n    raise ControlError('control refused')\n"
    )
    _package(tmp_path, body)
    code, _, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert results is not None and results["verdict"] == "error" and code == 7
    assert _status(results, "CAP-001") == "failed"


def test_a_skipped_case_verifies_nothing_even_if_a_sibling_passed(tmp_path: Path) -> None:
    body = """
    @R('REF-011')
    @pytest.mark.parametrize("rule", [pytest.param("x", marks=R("NEG-001")), pytest.param("y", marks=R("NEG-002"))])
    def test_cases(rule):
        if rule == "y":
            pytest.skip("not verified: no second identity")
        held(["REF-011", "NEG-001"])
    """
    _package(tmp_path, body)
    _, _, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert _status(results, "NEG-001") == "verified"
    assert _status(results, "NEG-002") == "not_verified"


def test_a_mark_no_passing_check_backs_verifies_nothing(tmp_path: Path) -> None:
    """What a test verifies follows from the checks that passed in it, not from its marks alone."""
    body = (
        "@R('NEG-001')\ndef test_claims_without_a_check():\n    pass\n\n"
        "@R('NEG-002')\ndef test_claims_with_a_check():\n    held(['NEG-002'])\n"
    )
    _package(tmp_path, body)
    _, _, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert _status(results, "NEG-001") == "not_verified" and _status(results, "NEG-002") == "verified"


def test_an_untagged_suite_test_is_a_collection_error(tmp_path: Path) -> None:
    _package(tmp_path, "def test_claims_nothing():\n    pass\n")
    code, out, _ = _run(tmp_path, "--target", "sim", "kc_extra")
    assert code == 4 and "without a requirement ID" in out and "test_claims_nothing" in out


def test_a_check_of_a_rule_its_test_does_not_claim_is_a_collection_error(tmp_path: Path) -> None:
    """Its pass would verify nothing (a test verifies only what it claims), unseen: refused before any test runs."""
    body = """
        from conformance.server import rules as server
        from conformance.common.rules import expect

        @R(server.CAP_001)
        def test_checks_another_rule():
            expect(True, server.CAP_002, "never shown")
    """
    _package(tmp_path, body)
    code, out, _ = _run(tmp_path, "--target", "sim", "kc_extra")
    assert code == 4 and "do not claim" in out and "CAP-002" in out and "test_checks_another_rule" in out, out[-1500:]


def test_the_plugin_stays_out_of_other_sessions(tmp_path: Path) -> None:
    """A project with its own `requirement` marker and failing IDs of its own: untouched."""
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    requirement(x): the project's own marker\naddopts = --strict-markers\n", "utf-8"
    )
    (tmp_path / "test_own.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.requirement("OWN-1")
        def test_own():
            pass

        def test_no_suite_fixture(request):
            assert "world" not in request.fixturenames
            with pytest.raises(pytest.FixtureLookupError):
                request.getfixturevalue("world")
    """),
        "utf-8",
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-1500:]
    assert "knowledge-conformance" not in proc.stdout and "VERDICT" not in proc.stdout
    assert not (tmp_path / "reports").exists()
    failing = tmp_path / "test_fail.py"
    failing.write_text("def test_fails():\n    assert False\n", "utf-8")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, "the plugin must not rewrite another session's exit status"


def test_a_project_with_its_own_target_option_keeps_it(tmp_path: Path) -> None:
    """Another project's conftest owns --target and --deep: it runs, gets its own values, and the
    suite stays reachable there under --kc-target."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        def pytest_addoption(parser):
            parser.addoption("--target", default="theirs")
            parser.addoption("--deep", action="store_true")
    """),
        "utf-8",
    )
    (tmp_path / "test_own.py").write_text(
        textwrap.dedent("""
        def test_own(pytestconfig):
            assert pytestconfig.getoption("--target") == "staging"
            assert pytestconfig.getoption("--deep") is True
    """),
        "utf-8",
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*cmd, "--target", "staging", "--deep"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0 and "VERDICT" not in proc.stdout, proc.stdout[-1500:] + proc.stderr[-800:]
    proc = subprocess.run(
        [
            *cmd,
            "--pyargs",
            "conformance.suite",
            "--kc-target",
            "sim",
            "--requirement",
            "CAP-001",
            "--report-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert "VERDICT: INCOMPLETE" in proc.stdout and (tmp_path / "out" / "results.json").is_file(), proc.stdout[-1500:]


def test_collect_only_touches_no_network_and_writes_nothing(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "conformance.suite",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--target",
        "http://127.0.0.1:9",
        "--target-config",
        str(_live_config(tmp_path)),
        "--report-dir",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-800:]
    assert "cannot reach" not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


def _live_config(root: Path, token: str = "bha_" + "t" * 40) -> Path:
    path = root / "target.toml"
    path.write_text(f'[target]\nroute = "acme"\n[identities.primary]\ntoken = "{token}"\n', "utf-8")
    return path


def test_an_interrupted_or_collection_broken_run_is_not_a_verdict(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "")
    (pkg / "test_broken.py").write_text("import not_a_module_anywhere\n", "utf-8")
    code, out, results = _run(tmp_path, "--target", "sim", "kc_extra")
    assert results is not None and results["verdict"] == "error" and code == 7, out[-1500:]


def test_an_interrupted_xdist_run_is_interrupted_and_counts_the_requests_made(tmp_path: Path) -> None:
    """Ctrl-C under -n 2: the verdict says interrupted (exit 2), and the requests the workers made
    before it are counted (their end-of-run report never comes)."""
    import os
    import signal
    import time

    done = tmp_path / "done"
    done.mkdir()
    _package(
        tmp_path,
        "\n".join(
            [
                f"""
@R('CAP-001')
def test_requests_{i}(world):
    for _ in range(5):
        world.core.capabilities(world.primary.token, world.route)
    open({str(done / str(i))!r}, "w").close()
"""
                for i in range(4)
            ]
            + [
                f"""
@R('CAP-002')
def test_waits_{i}():
    import time
    time.sleep(120)  # still waiting when the interrupt comes, however slowly the other tests ran
"""
                for i in range(2)
            ]
        ),
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--report-dir",
        str(tmp_path / "out"),
        "--target",
        "sim",
        "kc_extra",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 240
    while len(list(done.iterdir())) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    time.sleep(1.0)  # the last fast test's teardown report reaches the controller
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    results = json.loads((tmp_path / "out" / "results.json").read_text("utf-8"))
    assert proc.returncode == 2 and results["verdict"] == "interrupted", out[-1500:]
    assert results["requests"] >= 20, results["requests"]
