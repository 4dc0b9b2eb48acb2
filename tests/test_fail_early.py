"""A bad setup fails before any test runs, with exit 4 and one line saying what to fix:
never a traceback, never exit 3, never a harness error (exit 7) after the tests ran.
And the command line's own nits: the run ID in junit.xml and on the console, exit 4 for
its usage errors, and ``compare`` refusing a file that is not a results.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import simulator
from conformance.cli import main
from conformance.common.config import ConfigError, load_config, validate_config_data
from conformance.common.open import known_quirks, serve_over_loopback
from conformance.report.results import load_waivers
from knowledge_schemas import SCHEMA_DIR, load_catalogue, load_wire_defaults
from simulator.config import SimConfig
from simulator.quirks import QUIRKS
from tests.suite_command import warm_cli, warm_suite

CONTROL_TOKEN = "ctl-" + "q" * 28
WRONG_CONTROL_TOKEN = "ctl-wrong-" + "w" * 22


def _suite(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A suite run limited to one requirement, so that a setup this file expects to be refused
    but is not still ends quickly (and then fails the assertions below)."""
    cmd = [
        *warm_suite(),
        "--report-dir",
        str(tmp_path / "reports"),
        "--requirement",
        "CAP-001",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def _one_line_usage_error(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, f"exit {proc.returncode}: {out[-1500:]}"
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-1500:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), out[-1500:]
    assert not (tmp_path / "reports" / "results.json").exists(), "a usage error writes no report"
    return lines[0]


def _config(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "target.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return path


# ----------------------------------------------------------------- 1. target URL
@pytest.mark.parametrize("url", ["http://[::1", "http://user:pa55word-secret@[::1/x"])
def test_a_bad_target_url_is_one_line_and_exit_4(tmp_path: Path, url: str) -> None:
    line = _one_line_usage_error(_suite(tmp_path, "--target", url), tmp_path)
    assert "--target: not a valid URL" in line
    assert "pa55word-secret" not in line


@pytest.mark.parametrize("target", ["sim", "sim+http"])
@pytest.mark.parametrize(
    "table",
    [
        '[identities.primary]\ntoken = "tok-abcdefgh"\nroute = "r"\n',
        '[control]\nurl = "http://core.example/_control/v1"\ntoken = "ctl-abcdefgh"\n',
    ],
)
def test_a_live_core_s_configuration_with_the_bundled_simulator_is_refused(
    tmp_path: Path, target: str, table: str
) -> None:
    """The simulator knows none of a live Core's identities: every request was refused, and the
    run said NON-CONFORMANT (12 MUSTs failed on 401s) where the mistake was the command's."""
    path = _config(tmp_path, '[target]\nurl = "http://core.example"\n' + table)
    with pytest.raises(ConfigError, match=rf"^--target {re.escape(target)} is the bundled simulator, but "):
        load_config(str(path), target=target)


@pytest.mark.parametrize(
    "url", ["http://", "https://:8080/", "http://core.example:99999/", "http://core .example/", "ftp://core.example/"]
)
def test_a_url_without_scheme_or_host_is_refused(tmp_path: Path, url: str) -> None:
    path = _config(tmp_path, '[identities.primary]\ntoken = "tok-abcdefgh"\nroute = "r"\n')
    with pytest.raises(ConfigError, match=r"^--target"):
        load_config(str(path), target=url)


def test_a_bad_url_in_the_configuration_names_the_file(tmp_path: Path) -> None:
    path = _config(
        tmp_path, '[target]\nurl = "http://[::1"\n[identities.primary]\ntoken = "tok-abcdefgh"\nroute = "r"\n'
    )
    with pytest.raises(ConfigError, match=re.escape(f"{path} [target].url: not a valid URL")):
        load_config(str(path))


# ----------------------------------------------------------------- 2. file encoding and syntax
def test_a_configuration_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = _config(tmp_path, b'\xff\xfe[target]\nroute = "r"\n')
    line = _one_line_usage_error(_suite(tmp_path, "--target-config", str(path)), tmp_path)
    assert str(path) in line and "not UTF-8 text" in line, line


def test_a_configuration_file_that_is_not_toml_is_named(tmp_path: Path) -> None:
    path = _config(tmp_path, b'[target\nroute = "r"\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert str(path) in str(info.value) and "not valid TOML (" in str(info.value) and "\n" not in str(info.value)


# ----------------------------------------------------------------- 3. types, checked by the schema
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[target]\ntimeout_seconds = "30"\n', "target.timeout_seconds: expected a number, got a string"),
        ("[target]\nurl = 5\n", "target.url: expected a string, got a number"),
        ('[target]\nprobe_query = ""\n', "target.probe_query: must not be empty"),
        ('[identities]\nprimary = "tok-abcdefgh"\n', "identities.primary: expected a table, got a string"),
        (
            "[identities.primary]\ntoken = 123456789\n",
            'identities.primary.token: expected a non-empty string or {env = "NAME"}',
        ),
        ('[identities.primary]\nroute = "r"\n', "[identities.primary]: missing token"),
        ('[identities.primery]\ntoken = "tok-abcdefgh"\n', "unknown name 'primery'; known: primary"),
        ('[tolerances]\nclock_skew_seconds = "2"\n', "tolerances.clock_skew_seconds: expected a number, got a string"),
        ('[wire]\ncodes = {strict = "false"}\n', "wire.codes.strict: expected a boolean (true or false), got a string"),
        ("[wire]\ncodes = {strict = 1}\n", "wire.codes.strict: expected a boolean (true or false), got a number"),
        ('[wire.statuses]\nunauthorized = "401"\n', "wire.statuses.unauthorized: expected an integer, got a string"),
        (
            '[wire.legacy]\nunsupported_statuses = [404, "405"]\n',
            "wire.legacy.unsupported_statuses[1]: expected an integer",
        ),
        ("[wire.paths]\nsearch = 7\n", "wire.paths.search: expected a string, got a number"),
        ("[wire]\nauth = {header = 1}\n", "wire.auth.header: expected a string, got a number"),
        (
            '[identites.primary]\ntoken = "tok-abcdefgh"\n',
            "unknown table(s) [identites]; known: [control], [identities], [mcp], [target]",
        ),
        ('[paths]\nsearch = "/s"\n', "write [wire.paths]"),
        ('[control]\nurl = "http://core.example/_control/v1"\n', "[control] needs both url and token"),
    ],
)
def test_a_mistyped_configuration_names_the_key(tmp_path: Path, text: str, expected: str) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    message = str(info.value)
    assert expected in message and message.startswith(str(path)) and "\n" not in message, message


def test_a_mistyped_secret_is_never_echoed(tmp_path: Path) -> None:
    path = _config(tmp_path, '[identities.primary]\ntoken = {env = "KC_T", value = "hunter2-secret"}\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert "identities.primary.token" in str(info.value) and "hunter2" not in str(info.value)


def test_only_a_toml_boolean_turns_strict_on(tmp_path: Path) -> None:
    assert load_config(str(_config(tmp_path, "[wire]\ncodes = {strict = true}\n"))).strict_codes is True
    assert load_config(str(_config(tmp_path, "[wire]\ncodes = {strict = false}\n"))).strict_codes is False
    line = _one_line_usage_error(
        _suite(tmp_path, "--target-config", str(_config(tmp_path, '[wire]\ncodes = {strict = "false"}\n'))), tmp_path
    )
    assert "wire.codes.strict" in line


def test_the_schema_accepts_the_documented_configuration_and_every_wire_default() -> None:
    """The documented example (docs/live-core.md) and wire-defaults.toml itself (as a [wire] table)
    are valid: the schema is no stricter than what the project documents (tests/test_docs.py checks
    every other example)."""
    validate_config_data({"wire": load_wire_defaults()}, "wire-defaults.toml")
    page = (SCHEMA_DIR.parent / "docs" / "live-core.md").read_text("utf-8")
    example = re.search(r"```toml\n(.*?)```", page, re.S)
    assert example is not None
    import tomllib

    validate_config_data(tomllib.loads(example.group(1)), "docs/live-core.md")


# ----------------------------------------------------------------- 4. waivers
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("waiver = [1, 2]\n", "waiver 1 is not a table"),
        ('[[waiver]]\nid = 7\njustification = "x"\nexpires = 2999-01-01\n', "waiver 1 id must be a string"),
        (
            '[[waiver]]\nid = "SRCH-003"\njustification = ["x"]\nexpires = 2999-01-01\n',
            "waiver 1 justification must be a string",
        ),
        ('[[waiver]]\nid = "SRCH-003"\n', "lacks ['expires', 'justification']"),
    ],
)
def test_a_malformed_waiver_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    file = tmp_path / "w.toml"
    file.write_text(text, "utf-8")
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_waivers(str(file), load_catalogue())


def test_a_waiver_that_is_not_a_table_fails_before_any_test(tmp_path: Path) -> None:
    file = tmp_path / "w.toml"
    file.write_text("waiver = [1, 2]\n", "utf-8")
    line = _one_line_usage_error(_suite(tmp_path, "--waivers", str(file)), tmp_path)
    assert "waiver 1 is not a table" in line


# ----------------------------------------------------------------- 5. quirks
def test_the_suite_knows_the_simulators_quirks_through_the_entry_point() -> None:
    assert known_quirks() == frozenset(QUIRKS)


def test_an_unknown_quirk_fails_before_any_test(tmp_path: Path) -> None:
    line = _one_line_usage_error(_suite(tmp_path, "--sim-quirk", "search_fourth_hnt"), tmp_path)
    assert "search_fourth_hnt" in line and "search_fourth_hint" in line, line


@pytest.mark.parametrize("tick", ["-0.000001", "nan", "1"])
def test_a_clock_tick_out_of_range_fails_before_any_test(tmp_path: Path, tick: str) -> None:
    line = _one_line_usage_error(_suite(tmp_path, "--sim-clock-tick", tick), tmp_path)
    assert "--sim-clock-tick must be at least 0 and below 1 second" in line, line


def test_a_clock_tick_for_a_live_target_fails_before_any_test(tmp_path: Path) -> None:
    config = _config(tmp_path, '[control]\nurl = "http://127.0.0.1:9/_control/v1"\ntoken = "a-control-token"\n')
    proc = _suite(tmp_path, "--target", "http://127.0.0.1:9", "--target-config", str(config), "--sim-clock-tick", "0")
    line = _one_line_usage_error(proc, tmp_path)
    assert "--sim-clock-tick applies to the bundled simulator only" in line, line


# ----------------------------------------------------------------- 6. control credential
@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    app = simulator.create_app(SimConfig(control_token=CONTROL_TOKEN, demo=False, seed=5))
    url, stop = serve_over_loopback(app)
    yield url
    stop()


def test_a_wrong_control_token_fails_before_any_test(served_url: str, tmp_path: Path) -> None:
    config = _config(tmp_path, f'[control]\nurl = "{served_url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n')
    env = {**os.environ, "KC_CONTROL": WRONG_CONTROL_TOKEN}
    proc = _suite(tmp_path, "--target", served_url, "--target-config", str(config), env=env)
    line = _one_line_usage_error(proc, tmp_path)
    assert "refused the [control] token (401)" in line, line
    assert WRONG_CONTROL_TOKEN not in proc.stdout + proc.stderr
    collect = _suite(tmp_path, "--target", served_url, "--target-config", str(config), "--collect-only", env=env)
    assert collect.returncode == 0, "--collect-only makes no request"


def test_the_right_control_token_passes_the_check(served_url: str, tmp_path: Path) -> None:
    config = _config(tmp_path, f'[control]\nurl = "{served_url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n')
    proc = _suite(
        tmp_path,
        "--target",
        served_url,
        "--target-config",
        str(config),
        env={**os.environ, "KC_CONTROL": CONTROL_TOKEN},
    )
    assert proc.returncode in (0, 6), proc.stdout[-1500:]
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-1500:]


@contextmanager
def _web_page(hold: float = 0.0) -> Iterator[str]:
    """A web server that answers every request with nginx's page (after ``hold`` seconds); its URL."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def _page(self) -> None:
            time.sleep(hold)
            body = b"<html><body>Welcome to nginx!</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _page

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_control_url_that_serves_a_web_page_fails_before_any_test(tmp_path: Path) -> None:
    """A [control] url on a web server (nginx's page to every path): one line, exit 4; the run had
    gone on to exit 7 with some 29,000 console lines."""
    with _web_page() as url:
        config = _config(tmp_path, f'[control]\nurl = "{url}/_control/v1"\ntoken = "{CONTROL_TOKEN}"\n')
        line = _one_line_usage_error(_suite(tmp_path, "--target", url, "--target-config", str(config)), tmp_path)
    assert "answered 200 with text/html, not the control extension's JSON" in line, line


def test_an_mcp_url_that_serves_a_web_page_or_never_answers_stops_before_any_test(
    served_url: str, tmp_path: Path
) -> None:
    """An MCP URL given by mistake had been judged as a server that broke MCP-001, MCP-012 and
    SK-009, and one that never answers held the run ten minutes: a web page is a usage error
    (exit 4), a silent server a harness error (exit 7), each one line before any test."""
    config = _config(tmp_path, f'[control]\nurl = "{served_url}/_control/v1"\ntoken = "{CONTROL_TOKEN}"\n')
    live = ["--target", served_url, "--target-config", str(config)]
    with _web_page() as page:
        line = _one_line_usage_error(_suite(tmp_path, *live, "--mcp-target", f"{page}/mcp"), tmp_path)
    assert "serves a web page (HTML), not an MCP endpoint" in line, line
    with _web_page(hold=60) as silent:
        config.write_text(config.read_text("utf-8") + "[target]\ntimeout_seconds = 2\n", "utf-8")
        cli = [*warm_cli(), "run", *live, "--mcp-target", f"{silent}/mcp", "--report-dir", str(tmp_path / "r")]
        proc = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 7, out[-1500:]
    assert "did not answer initialize within 2 s" in out and len(out.splitlines()) == 1, out[-1500:]


# ----------------------------------------------------------------- 7, 8. the CLI's run: run ID in junit.xml and on the console
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path_factory.mktemp("cli")
    cmd = [
        str(Path(sys.executable).parent / "knowledge-conformance"),
        "run",
        "--run-id",
        "kc-cli-7",
        "--report-dir",
        str(root / "reports"),
        "--",
        "--requirement",
        "CAP-001",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root), root / "reports"


def test_junit_names_the_run_id(cli_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, reports = cli_run
    assert proc.returncode in (0, 6), proc.stdout[-1500:]
    suite = ET.parse(reports / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in suite.findall("./properties/property")}
    assert props.get("run_id") == "kc-cli-7", props


def test_the_cli_prints_the_header_with_target_and_run_id(
    cli_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, _ = cli_run
    header = [line for line in proc.stdout.splitlines() if line.startswith("knowledge-conformance ")]
    assert header and "target=bundled simulator" in header[0] and "run_id=kc-cli-7" in header[0], proc.stdout[:1500]


# ----------------------------------------------------------------- 9. the CLI's usage errors
@pytest.mark.parametrize(
    "argv",
    [["run", "--fail-on", "sometimes"], ["run", "--rate-limit", "fast"], ["compare", "one.json"], [], ["launch"]],
)
def test_the_cli_usage_errors_exit_4(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 4
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--run-id", "--mcp-target"])
def test_an_empty_run_id_or_mcp_target_is_a_usage_error(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unset variable: ``--run-id ""`` drew a fresh ID (the replay asked for was lost) and
    ``--mcp-target ""`` checked the bundled simulator's MCP instead."""
    assert main(["run", flag, ""]) == 4
    assert f"{flag} is empty" in capsys.readouterr().err


def test_an_empty_requirement_is_a_usage_error(tmp_path: Path) -> None:
    """``--requirement ""`` said "unknown ID(s) " and named nothing."""
    line = _one_line_usage_error(_suite(tmp_path, "--requirement", ""), tmp_path)
    assert "--requirement is empty" in line, line


def test_the_docs_document_exit_4_for_usage_errors() -> None:
    page = (SCHEMA_DIR.parent / "docs" / "scopes.md").read_text("utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| 4 |"))
    assert "usage error" in row and "`knowledge-conformance` command" in row, row


# ----------------------------------------------------------------- 10. compare
@pytest.mark.parametrize("body", ['{"requirements": [{"x": 1}]}', "[1, 2]", '{"requirements": []}', '"results"'])
def test_compare_refuses_a_file_that_is_not_a_results_json(
    tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json"
    bad = tmp_path / "bad.json"
    bad.write_text(body, "utf-8")
    for argv in (["compare", str(bad), str(good)], ["compare", str(good), str(bad)]):
        assert main(argv) == 4
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{bad}: not a results.json of this suite" in err, err


def test_compare_still_reads_a_valid_results_json(capsys: pytest.CaptureFixture[str]) -> None:
    good = str(SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json")
    assert main(["compare", good, good, "--fail-on-new-failures"]) == 0
    assert (
        json.loads((SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json").read_text("utf-8"))["verdict"]
        in capsys.readouterr().out
    )


# ----------------------------------------------------------------- 11. a verdict the suite cannot build
BROKEN_WRITER = """
from pathlib import Path

import conformance.report.writers as writers
from conformance.common.secrets import SECRETS


def _broken(*args, **kwargs):
    secret = max(SECRETS.values, key=len)  # one the run holds: it must not reach the console
    Path("secret.txt").write_text(secret, "utf-8")
    raise ValueError(f"the writer broke while holding {secret}")


writers.write_all = _broken
"""


def test_a_report_the_suite_cannot_build_is_an_internal_error_not_a_verdict(tmp_path: Path) -> None:
    """A crash while the verdict and its reports are built is the suite's own fault: exit 3
    (internal error), never 1, which a CI gate reads as "non-conformant"; its message is scrubbed."""
    from tests.suite_command import SUITE

    (tmp_path / "kc_broken_writer.py").write_text(BROKEN_WRITER, "utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    cmd = [*SUITE, "-p", "kc_broken_writer", "--report-dir", str(tmp_path / "reports"), "--requirement", "CAP-001"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, f"exit {proc.returncode}: {out[-1500:]}"
    assert "VERDICT: ERROR  (could not build the reports: ValueError: the writer broke" in out, out[-1500:]
    secret = (tmp_path / "secret.txt").read_text("utf-8")
    assert len(secret) >= 8 and secret not in out, "the exception's secret reached the console"
