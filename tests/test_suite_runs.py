"""End to end: the suite's verdicts and reports against the clean, a quirky and a served simulator."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common.walk import WALK_PARTS
from knowledge_schemas import load_registry
from tests.suite_command import SUITE, warm_suite


def _suite(reports: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run the suite in a subprocess; its results.json must always match its schema."""
    cmd = [
        *warm_suite(),
        "--report-dir",
        str(reports),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    results = json.loads((reports / "results.json").read_text("utf-8"))
    assert load_registry().errors("results", results) == []
    return proc.returncode, results, proc.stdout


def _statuses(results: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in results["requirements"]}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[str, Any], str]:
    """One default run against the bundled simulator: its reports folder, exit code, results, output."""
    reports = tmp_path_factory.mktemp("clean")
    return (reports, *_suite(reports))


def test_clean_simulator_in_process_is_conformant_with_every_report(
    clean_run: tuple[Path, int, dict[str, Any], str],
) -> None:
    tmp_path, code, results, out = clean_run
    assert code == 0, out[-2000:]
    assert results["verdict"] == "conformant"
    summary = results["summary"]
    assert summary["server_must_verified"] == summary["server_must_total"] > 50
    assert not [t for t in results["tests"] if t["outcome"] == "skipped"], (
        "in-process runs have control: nothing may be skipped"
    )
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "report.md", "report.html", "junit.xml"}
    stateful = [t for t in results["tests"] if "stateful" in t["nodeid"]]
    # the HTTP contract's model and search_knowledge's: each a tour (it reaches every rule) and its walk in parts
    assert sorted(t["nodeid"].rsplit("[", 1)[1] for t in stateful) == sorted(
        ["tour]", "tour]", "walk1of1]", *(f"walk{i}of{WALK_PARTS}]" for i in range(1, WALK_PARTS + 1))]
    )
    for test in stateful:
        if "[walk" in test["nodeid"]:
            assert test["exercised"] and set(test["exercised"]) <= set(test["requirements"]), test["nodeid"]
            continue
        assert set(test["exercised"]) == set(test["requirements"]), (
            f"{test['nodeid']}: the default walk must reach every rule it claims"
        )
    report = (tmp_path / "report.md").read_bytes()
    assert len(report) < 8 * 1024, (
        f"a clean run's report.md is {len(report)} bytes: too long for a pull-request comment"
    )
    text = report.decode("utf-8")
    assert text.index("**Verdict: CONFORMANT**") < text.index("<details>") and "## Failures" not in text
    print(
        f"\nin-process: {out.strip().splitlines()[-1]}; MUSTs {summary['server_must_verified']}/{summary['server_must_total']}; report.md {len(report)} bytes"
    )


def test_serial_and_concurrent_runs_give_the_same_verdict_and_reports(
    clean_run: tuple[Path, int, dict[str, Any], str], tmp_path: Path
) -> None:
    """``--concurrency 2``: two pytest-xdist workers, each in a world of its own, against the
    default run's serial one."""
    _, serial, one, _ = clean_run
    parallel, two, out = _suite(tmp_path / "xdist", "--concurrency", "2")
    assert serial == parallel == 0, out[-1500:]
    assert one["verdict"] == two["verdict"] == "conformant"
    assert _statuses(one) == _statuses(two)
    assert sorted(t["nodeid"] for t in one["tests"]) == sorted(t["nodeid"] for t in two["tests"])
    assert two["requests"] > 0.9 * one["requests"], "workers' requests must be counted"
    assert (one["configuration"]["workers"], two["configuration"]["workers"]) == (0, 2), "two workers ran"
    for name in ("report.md", "report.html", "junit.xml"):
        assert (tmp_path / "xdist" / name).is_file()


def test_loopback_without_control_is_incomplete_never_passing_what_it_cannot_see(tmp_path: Path) -> None:
    code, results, out = _suite(tmp_path, "--target", "sim+http", "--no-control")
    assert code == 6, out[-2000:]
    assert results["verdict"] == "incomplete"
    statuses = {r["id"]: r["status"] for r in results["requirements"]}
    assert statuses["REF-007"] == "not_verified" and statuses["SRCH-003"] == "verified"
    assert "failed" not in statuses.values()
    s = results["summary"]
    print(
        f"\nloopback, no control: MUSTs verified {s['server_must_verified']}/{s['server_must_total']}, requirements verified {s['verified']}, not verified {s['not_verified']}"
    )


def test_a_run_leaves_its_folder_as_it_found_it_but_for_its_reports(tmp_path: Path) -> None:
    """No ``.pytest_cache``, ``.benchmarks`` or ``.hypothesis`` in the folder a run starts in (a CI
    checkout): Hypothesis keeps its Unicode tables in the user's cache, built once there, not again
    in every folder and process (conformance.plugin.hypothesis_home)."""
    folder, cache = tmp_path / "checkout", tmp_path / "cache"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    env["XDG_CACHE_HOME"] = str(cache)
    cmd = [*SUITE, "--report-dir", "reports", "--requirement", "WIRE-001", "-k", "generated"]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    results = json.loads((folder / "reports" / "results.json").read_text("utf-8"))
    assert [t["outcome"] for t in results["tests"]] and {t["outcome"] for t in results["tests"]} == {"passed"}, (
        proc.stdout[-2000:]
    )
    assert sorted(p.name for p in folder.iterdir()) == ["reports"]
    kept = cache / "knowledge-conformance" / "hypothesis" / "unicode_data"
    assert list(kept.rglob("codec-*.json.gz")), "the generated requests' UTF-8 table is kept in the user's cache"


def test_quirk_run_shows_the_failed_clause_and_a_reproduction(tmp_path: Path) -> None:
    code, results, _ = _suite(tmp_path, "--sim-quirk", "search_fourth_hint")
    assert code == 1 and results["verdict"] == "non-conformant"
    html = (tmp_path / "report.html").read_text("utf-8")
    assert "Verdict: NON-CONFORMANT" in html and "SRCH-003" in html
    assert "Search returns at most three title/summary/ref hints" in html and "curl -sS -X POST" in html
    assert "bha_" not in html + (tmp_path / "results.json").read_text("utf-8"), "tokens must never reach a report"
    md = (tmp_path / "report.md").read_text("utf-8")
    assert "bha_" not in md and "$TOKEN'" not in md
    # Failures first, each with its title and the request its check judged (a search, even in a
    # test whose last requests were reads), as a curl line naming its identity.
    assert md.index("## Failures") < md.index("## Counts") < md.index("<details><summary>Requirement matrix")
    assert "### SRCH-003 (MUST) At most three hints" in md
    assert "# identity: primary\ncurl -sS -X POST" in md and '-H "Authorization: Bearer $CORE_TOKEN_PRIMARY"' in md
    failed = [t for t in results["tests"] if t["violated"] == "SRCH-003"]
    relayed = [t for t in failed if "/mcp/" in t["nodeid"]]  # judged on the tools' answers: their calls, no exchange
    assert all(t["tool_calls"] for t in relayed)
    for test in (t for t in failed if t not in relayed):
        judged = [e for e in test["exchanges"] if e["judged"]]
        assert len(judged) == 1 and judged[0]["operation"] == "search", test["nodeid"]
        assert judged[0]["identity"] == "primary" and judged[0]["curl"].startswith("# identity: primary\n")


def test_waiver_keeps_a_known_deviation_visible_but_not_gating(tmp_path: Path) -> None:
    waivers = tmp_path / "waivers.toml"
    waivers.write_text('[[waiver]]\nid = "SRCH-003"\njustification = "fix in flight"\nexpires = 2999-01-01\n', "utf-8")
    code, results, out = _suite(
        tmp_path / "r", "--sim-quirk", "search_fourth_hint", "--waivers", str(waivers), "--requirement", "SRCH-003"
    )
    statuses = {r["id"]: r["status"] for r in results["requirements"]}
    assert statuses["SRCH-003"] == "waived"
    assert code == 6, out[-1500:]  # the other MUSTs were deselected, so the run is incomplete, not failed


@pytest.mark.parametrize(
    "bad", [["--target", "ftp://nowhere"], ["--requirement", "NOPE-999"], ["--target-config", "/nonexistent.toml"]]
)
def test_bad_options_are_usage_errors(tmp_path: Path, bad: list[str]) -> None:
    cmd = [
        *warm_suite(),
        "--reports",
        str(tmp_path),
        *bad,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (1, 4), proc.stdout[-800:]
    assert any(word in proc.stdout + proc.stderr for word in ("expected sim", "unknown ID", "no such file"))


def test_failing_stateful_run_stores_its_sequence_and_compare_flags_it(tmp_path: Path) -> None:
    _, clean, _ = _suite(tmp_path / "clean", "-k", "stateful")
    code, broken, _ = _suite(
        tmp_path / "broken", "-k", "stateful", "--sim-quirk", "revision_change_ignored", "--no-shrink"
    )
    assert code == 1
    stateful = next(t for t in broken["tests"] if "/server/test_stateful.py::" in t["nodeid"])
    assert stateful["violated"] == "REF-008"
    assert stateful["sequence"][0] == "state = KnowledgeContract()" and any(
        "publish_revision" in s for s in stateful["sequence"]
    )
    html = (tmp_path / "broken" / "report.html").read_text("utf-8")
    assert "Minimal failing sequence" in html and "state.publish_revision" in html
    cmd = [
        sys.executable,
        "-m",
        "conformance.cli",
        "compare",
        str(tmp_path / "clean" / "results.json"),
        str(tmp_path / "broken" / "results.json"),
        "--fail-on-new-failures",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "REF-008: verified -> failed" in proc.stdout, proc.stdout
    assert clean["verdict"] == "incomplete"  # only the stateful test ran


@pytest.fixture
def served_core(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The simulator served over HTTP without control, like a live Core; its tokens read from its banner."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator.cli", "serve", "--port", str(port), "--no-control"],
        stderr=subprocess.PIPE,
        text=True,
    )
    banner = proc.stderr
    assert banner is not None
    tokens: dict[str, str] = {}
    try:
        for line in banner:
            found = re.search(r"account (\w+), session ([0-9a-f-]+): (bha_\w+)", line)
            if found:
                tokens.setdefault(f"{found[1]}:{found[2]}", found[3])
            if "control" in line or len(tokens) == 3:
                break
        # Keep reading its request log, or a full pipe would stall the server.
        threading.Thread(target=lambda: [None for _ in banner], daemon=True).start()
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", tokens
    finally:
        proc.terminate()
        proc.wait(10)


def test_live_core_with_configured_identities_and_no_control(
    served_core: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, tokens = served_core
    alice = [t for k, t in tokens.items() if k.startswith("alice:")]
    sessions = {k.split(":")[1] for k in tokens if k.startswith("alice:")}
    assert len(sessions) == 2, tokens
    bob = next(t for k, t in tokens.items() if k.startswith("bob:"))
    config = tmp_path / "target.toml"
    config.write_text(
        '[target]\nroute = "demo"\nprobe_query = "homepage binding"\n'
        '[identities.primary]\ntoken = {env = "KC_T1"}\n[identities.other_session]\ntoken = {env = "KC_T2"}\n'
        '[identities.other_account]\ntoken = {env = "KC_T3"}\n',
        "utf-8",
    )
    env = {**os.environ, "KC_T1": alice[0], "KC_T2": alice[1], "KC_T3": bob}
    cmd = [
        sys.executable,
        "-m",
        "conformance.cli",
        "run",
        "--target",
        url,
        "--target-config",
        str(config),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    results = json.loads((tmp_path / "r" / "results.json").read_text("utf-8"))
    assert proc.returncode == 6 and results["verdict"] == "incomplete", proc.stdout[-1500:]
    statuses = {r["id"]: r["status"] for r in results["requirements"]}
    assert "failed" not in statuses.values()
    assert statuses["REF-004"] == statuses["REF-009"] == statuses["READ-005"] == "verified"
    assert (
        statuses["REF-003"] == statuses["REF-005"] == "not_verified"
    )  # their own cases skipped: no such identity configured
    assert statuses["READ-015"] == statuses["REF-001"] == "not_verified"  # nothing to compare with, no clock
    for report in (tmp_path / "r").iterdir():
        text = report.read_text("utf-8")
        assert not any(t in text for t in tokens.values()), f"a token reached {report.name}"
    missing = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "KC_T1": ""})
    assert missing.returncode == 4 and "KC_T1 is not set" in missing.stdout + missing.stderr
