"""Bad input is judged, never a crash: a configuration value no setting can take (NaN, an
infinity, absurd depth or size), a numeric option out of range, a malformed waivers file or a
results.json that is not one is a usage error (exit 4) in one line naming the key or the file,
found before any test starts; never exit 3 (a traceback), 7 (a harness error) or, for
``compare --fail-on-new-failures``, 1 (read as a regression)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge_schemas import SCHEMA_DIR
from tests.suite_command import SUITE

CLI = [sys.executable, "-c", "from conformance.cli import main; raise SystemExit(main())"]
GOOD_RESULTS = SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json"
DEEP = 50_000


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)


def _usage_error(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """Exit 4, no traceback, one line of output, no reports: the line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, f"exit {proc.returncode}: {out[-1500:]}"
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-1500:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out[-1500:]
    assert not (tmp_path / "reports").exists(), "a usage error writes no report"
    assert "\x1b" not in out and "\r" not in out, "file content is shown as escapes"
    return lines[0]


def _suite_with(tmp_path: Path, *args: str) -> str:
    """A ``knowledge-conformance run`` refused before any test: its one line."""
    proc = _run(tmp_path, *CLI, "run", "--report-dir", str(tmp_path / "reports"), *args, "--", "-k", "nothing")
    line = _usage_error(proc, tmp_path)
    assert line.startswith("ERROR: "), line
    return line


# ----------------------------------------------------------------- the target configuration
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[target]\ntimeout_seconds = nan\n", "target.timeout_seconds: must be a finite number, not nan"),
        ("[target]\ntimeout_seconds = inf\n", "target.timeout_seconds: must be a finite number, not inf"),
        ("[target]\ntimeout_seconds = 1e400\n", "target.timeout_seconds: must be a finite number, not inf"),
        ("[target]\ntimeout_seconds = 86400\n", "target.timeout_seconds: must be at most 3600 seconds"),
        ("[tolerances]\nclock_skew_seconds = -inf\n", "tolerances.clock_skew_seconds: must be a finite number"),
        ("[tolerances]\nclock_skew_seconds = 1e300\n", "tolerances.clock_skew_seconds: must be at most 60"),
        ("[tolerances]\nclock_skew_seconds = 150\n", "tolerances.clock_skew_seconds: must be at most 60 seconds"),
        ("[wire.statuses]\nunauthorized = " + "9" * 30 + "\n", "wire.statuses.unauthorized: a number too large"),
        ("[target]\nroute = " + "[" * DEEP + "]" * DEEP + "\n", "nested too deeply"),
        ("[target]\nroute = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n", "nested too deeply"),
        ("[wire]\nx = " + "[" * 20 + "]" * 20 + "\n", "nested deeper than 8"),
        ('[target]\nprobe_query = "' + "q" * 20_000 + '"\n', "target.probe_query: a string of 20000 characters"),
        ('[target]\n"' + "k" * 1000 + '" = 1\n', "a key of 1000 characters"),
        ("[target]\ntimeout_seconds = 1" + "0" * 5000 + "\n", "a number too long to read"),
    ],
    ids=[
        "nan",
        "inf",
        "overflow",
        "a-day",
        "minus-inf",
        "huge-skew",
        "skew-past-a-minute",
        "huge-int",
        "deep-array",
        "deep-inline-table",
        "deeper-than-any-key",
        "long-string",
        "long-key",
        "thousands-of-digits",
    ],
)
def test_a_value_no_setting_can_take_is_exit_4_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    config = tmp_path / "target.toml"
    config.write_text(text, "utf-8")
    line = _suite_with(tmp_path, "--target-config", str(config))
    assert expected in line and str(config) in line, line


def test_a_configuration_over_a_mebibyte_is_refused_unread(tmp_path: Path) -> None:
    config = tmp_path / "target.toml"
    config.write_text("# padding\n" * 200_000, "utf-8")
    line = _suite_with(tmp_path, "--target-config", str(config))
    assert f"--target-config {config}: larger than 1 MiB" in line, line


def test_a_key_with_control_bytes_is_shown_as_escapes(tmp_path: Path) -> None:
    config = tmp_path / "target.toml"
    config.write_text('["\\u001b]52;c;aGk=\\u0007\\n::error::x\\r"]\na = 1\n', "utf-8")
    line = _suite_with(tmp_path, "--target-config", str(config))
    assert "unknown table(s)" in line and "\\x1b]52" in line and "\\n\\x3a:error" in line, line


def test_the_sane_configuration_still_loads(tmp_path: Path) -> None:
    from conformance.common.config import load_config

    config = tmp_path / "target.toml"
    config.write_text("[target]\ntimeout_seconds = 3600\n[tolerances]\nclock_skew_seconds = 2.5\n", "utf-8")
    cfg = load_config(str(config))
    assert (cfg.timeout_seconds, cfg.clock_skew_seconds) == (3600.0, 2.5)


# ----------------------------------------------------------------- numeric options
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rate-limit", "nan"], "--rate-limit must be a number from 0 to 1000000, not nan"),
        (["--rate-limit", "inf"], "--rate-limit must be a number from 0 to 1000000, not inf"),
        (["--stateful-examples", "-3"], "--stateful-examples must be a number from 0 to 100000, not -3"),
        (["--stateful-steps", "999999999"], "--stateful-steps must be a number from 0 to 10000"),
        (["--stateful-seed", "9" * 40], "--stateful-seed must be a number from"),
        (["--concurrency", "0"], "--concurrency must be a number from 1 to 64, not 0"),
        (["--concurrency", "500"], "--concurrency must be a number from 1 to 64, not 500"),
    ],
)
def test_a_numeric_option_out_of_range_is_exit_4(tmp_path: Path, args: list[str], expected: str) -> None:
    assert expected in _suite_with(tmp_path, *args)


@pytest.mark.parametrize("config", [None, '[target]\nurl = ""\n'])
def test_an_empty_target_is_exit_4_never_the_bundled_simulator(tmp_path: Path, config: str | None) -> None:
    """An unset CI variable (``--target "$CORE_URL"``) must not turn a gate into a run against the
    bundled simulator, which passes."""
    if config is None:
        line = _suite_with(tmp_path, "--target", "")
    else:
        (tmp_path / "target.toml").write_text(config, "utf-8")
        line = _suite_with(tmp_path, "--target-config", str(tmp_path / "target.toml"))
    assert "empty" in line, line


@pytest.mark.parametrize(
    ("args", "config", "expected"),
    [
        (["--mcp-target", "/no/such/server --stdio"], None, "--mcp-target: '/no/such/server' is not a program"),
        (["--mcp-target", "no-such-mcp-server-program"], None, "'no-such-mcp-server-program' is not a program"),
        (["--mcp-target", "'unclosed"], None, "No closing quotation"),
        ([], '[mcp]\ncommand = ["/no/such/server"]\n', "[mcp].command: '/no/such/server' is not a program"),
    ],
)
def test_an_mcp_server_command_that_cannot_start_is_exit_4(
    tmp_path: Path, args: list[str], config: str | None, expected: str
) -> None:
    """One usage line before any test, never one harness error per MCP test."""
    if config is not None:
        (tmp_path / "target.toml").write_text(config, "utf-8")
        args = [*args, "--target-config", str(tmp_path / "target.toml")]
    assert expected in _suite_with(tmp_path, *args)


def test_a_target_configuration_folder_is_named_as_one(tmp_path: Path) -> None:
    line = _suite_with(tmp_path, "--target-config", str(tmp_path))
    assert "is a folder; give the TOML file in it" in line, line


def test_the_pytest_plugin_refuses_the_same_numbers(tmp_path: Path) -> None:
    """The suite run through pytest itself, not the command: the same check, before any test."""
    proc = _run(tmp_path, *SUITE, "--report-dir", str(tmp_path / "reports"), "--rate-limit", "nan", "-k", "nothing")
    line = _usage_error(proc, tmp_path)
    assert "--rate-limit must be a number from 0 to 1000000, not nan" in line, line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["client", "--harness", "x", "--timeout", "99999"],
            "ERROR: --timeout must be a positive number, at most 3600",
        ),
        (["load", "--spawn-rate", "inf"], "knowledge-conformance load: --spawn-rate must be a positive number"),
        (["load", "--users", "1000000000"], "knowledge-conformance load: --users must be a number from 1 to 100000"),
    ],
)
def test_the_other_commands_refuse_numbers_out_of_range(tmp_path: Path, argv: list[str], expected: str) -> None:
    proc = _run(tmp_path, *CLI, *argv, "--report-dir", str(tmp_path / "reports"))
    assert expected in _usage_error(proc, tmp_path)


# ----------------------------------------------------------------- waivers
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("waiver = " + "[" * DEEP + "]" * DEEP + "\n", "not valid TOML (arrays or tables nested too deeply)"),
        ('[[waiver]]\nid = "CAP-001"\njustification = "x"\nexpires = 2999-01-01\nn = nan\n', "waiver[0].n"),
        ("# x\n" * 300_000, "larger than 1 MiB"),
    ],
    ids=["deep", "nan", "huge"],
)
def test_a_malformed_waivers_file_is_exit_4_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    waivers = tmp_path / "waivers.toml"
    waivers.write_text(text, "utf-8")
    line = _suite_with(tmp_path, "--waivers", str(waivers))
    assert expected in line and str(waivers) in line, line


# ----------------------------------------------------------------- compare
def _results(**changes: object) -> dict[str, object]:
    data: dict[str, object] = json.loads(GOOD_RESULTS.read_text("utf-8"))
    data.update(changes)
    return data


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def _bad_results() -> dict[str, bytes]:
    good = GOOD_RESULTS.read_text("utf-8")
    return {
        "deep": ("[" * DEEP + "]" * DEEP).encode(),
        "deep-inside": json.dumps(_results(configuration={"x": _nested(200)})).encode(),
        "duplicate-key": good.replace("{", '{"verdict": "conformant", ', 1).encode(),
        "nan": good.replace("{", '{"x": NaN, ', 1).encode(),
        "not-utf8": b"\xff\xfe{}",
        "not-json": b"{'verdict': 1}",
        "control-bytes": json.dumps(_results(verdict="\x1b]52;c;aGk=\x07\r::error::x")).encode(),
        "empty": b"",
    }


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("deep", "not a results.json of this suite (nested deeper than 64)"),
        ("deep-inside", "not a results.json of this suite (nested deeper than 64)"),
        ("duplicate-key", "not JSON (the key 'verdict' appears twice in one object)"),
        ("nan", "not JSON (NaN is not a JSON number)"),
        ("not-utf8", "not JSON (not UTF-8 text at byte 0)"),
        ("not-json", "not JSON (Expecting property name"),
        ("control-bytes", "not a results.json of this suite (/verdict:"),
        ("empty", "not JSON"),
    ],
)
def test_compare_on_a_malformed_file_is_exit_4_never_a_regression(tmp_path: Path, case: str, expected: str) -> None:
    bad = tmp_path / f"{case}.json"
    bad.write_bytes(_bad_results()[case])
    for pair in ((bad, GOOD_RESULTS), (GOOD_RESULTS, bad)):
        proc = _run(tmp_path, *CLI, "compare", *map(str, pair), "--fail-on-new-failures")
        line = _usage_error(proc, tmp_path)
        assert line.startswith(f"knowledge-conformance: {bad}: ") and expected in line, line


@pytest.mark.parametrize("case", ["too-large", "folder"])
def test_compare_refuses_what_is_no_file_of_results(tmp_path: Path, case: str) -> None:
    bad = tmp_path / "results.json"
    if case == "folder":
        bad.mkdir()
    else:
        with bad.open("wb") as handle:
            handle.truncate((32 << 20) + 1)  # sparse: no time spent writing it
    proc = _run(tmp_path, *CLI, "compare", str(bad), str(GOOD_RESULTS), "--fail-on-new-failures")
    line = _usage_error(proc, tmp_path)
    assert line.startswith(f"knowledge-conformance: {bad}: "), line
    assert ("larger than 32 MiB" if case == "too-large" else "no such file") in line, line


def test_compare_still_gates_a_real_regression(tmp_path: Path) -> None:
    """Exit 1 keeps its meaning: a valid pair where a rule that was verified now fails."""
    old = _results()
    new = json.loads(json.dumps(old))
    failed = next(r for r in new["requirements"] if r["status"] == "failed")
    verified = next(r for r in new["requirements"] if r["status"] == "verified")
    verified.update(status="failed", failures=failed["failures"])
    files = [tmp_path / "old.json", tmp_path / "new.json"]
    for file, data in zip(files, (old, new), strict=True):
        file.write_text(json.dumps(data), "utf-8")
    proc = _run(tmp_path, *CLI, "compare", *map(str, files), "--fail-on-new-failures")
    assert proc.returncode == 1 and "New failures (1)" in proc.stdout, proc.stdout + proc.stderr
