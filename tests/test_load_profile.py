"""The load profile (``knowledge-conformance load``): a short headless Locust run against the
served clean simulator finds no violation, and against each quirk only concurrency shows
(``caught_by: load`` in quirk-outcomes.yaml) it fails the quirk's requirements.

Each run is a subprocess: Locust patches the standard library for gevent on import, which no
pytest process should get. Nothing here is timed: a run lasts a few seconds so that many
simultaneous steps happen, and only what the checks saw is asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.load.report import LoadFigures, build, results_of
from conformance.load.tally import Tally
from knowledge_schemas import load_registry
from simulator.quirks import QUIRKS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="needs the 'load' extra (Locust)")
LOAD_QUIRKS = sorted(q.name for q in QUIRKS.values() if q.caught_by == "load")
SCOPE = ["REF-009", "READ-005", "SRCH-008"]


def load(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    reports = tmp_path / "reports"
    cmd = [
        sys.executable,
        "-c",
        "from conformance.cli import main; raise SystemExit(main())",
        "load",
        "--users",
        "4",
        "--spawn-rate",
        "4",
        "--run-time",
        "6s",
        "--report-dir",
        str(reports),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    found = reports / "results.json"
    assert found.is_file(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    results = json.loads(found.read_text("utf-8"))
    assert load_registry().errors("results", results) == []
    return proc.returncode, results, proc.stdout


def failed(results: dict[str, Any]) -> set[str]:
    return {r["id"] for r in results["requirements"] if r["status"] == "failed"}


def test_the_clean_simulator_keeps_the_contract_under_load(tmp_path: Path) -> None:
    code, results, out = load(tmp_path)
    figures = results["configuration"]["load"]
    assert (code, results["verdict"]) == (0, "conformant"), out
    assert failed(results) == set() and figures["violations"] == {}
    assert figures["requests"] > 0 and figures["failures"] == 0  # no 5xx, no dropped request
    # Every requirement of the profile was judged by checks that ran (else the verdict would be incomplete).
    assert {r["status"] for r in results["requirements"]} == {"verified"}
    assert all(figures["checks"][r["id"]] > 0 for r in results["requirements"])
    assert (tmp_path / "reports" / "report.md").read_text("utf-8").count("## Load") == 1


@pytest.mark.parametrize("name", LOAD_QUIRKS)
def test_a_quirk_only_concurrency_shows_is_caught_under_load(tmp_path: Path, name: str) -> None:
    quirk = QUIRKS[name]
    code, results, out = load(tmp_path, "--sim-quirk", name)
    assert set(quirk.violates) <= failed(results), out
    assert code == quirk.exit and results["verdict"] == "non-conformant"
    assert all(results["configuration"]["load"]["violations"][rid] > 0 for rid in quirk.violates)
    broken = next(r for r in results["requirements"] if r["id"] == quirk.violates[0])
    assert broken["failures"][0]["exchanges"], "a violation comes with the exchange that showed it"


def test_the_distributed_mode_adds_up_its_workers(tmp_path: Path) -> None:
    """The recipe of docs/load.md: a master and a worker of conformance/load/locustfile.py; the worker
    provisions its own world, ships its tally, and the master writes the reports and exits with
    the verdict's code."""
    import conformance.load
    from conformance.common import served as serve

    locust = Path(sys.executable).parent / "locust"
    locustfile = str(Path(conformance.load.__file__).parent / "locustfile.py")
    served, port, reports = serve.ServedSimulator(), str(serve.free_port()), tmp_path / "reports"
    master_cmd = [
        str(locust),
        "-f",
        locustfile,
        "--master-bind-port",
        port,
        "--master",
        "--headless",
        "--expect-workers",
        "1",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "10s",
        "--host",
        served.url,
        "--kc-control-token",
        served.control_token,
        "--kc-report-dir",
        str(reports),
    ]
    worker_cmd = [str(locust), "-f", locustfile, "--worker", "--master-host", "127.0.0.1", "--master-port", port]
    with (tmp_path / "master.log").open("wb") as master_log, (tmp_path / "worker.log").open("wb") as worker_log:
        master = subprocess.Popen(master_cmd, stdout=master_log, stderr=subprocess.STDOUT)
        worker = subprocess.Popen(worker_cmd, stdout=worker_log, stderr=subprocess.STDOUT)
        try:
            code = master.wait(timeout=240)
            worker.wait(timeout=60)
        finally:
            for process in (master, worker):
                if process.poll() is None:
                    process.kill()
            served.close()
    logs = "\n".join((tmp_path / f"{n}.log").read_text("utf-8", "replace")[-1500:] for n in ("master", "worker"))
    results = json.loads((reports / "results.json").read_text("utf-8"))
    assert load_registry().errors("results", results) == []
    figures = results["configuration"]["load"]
    assert (code, results["verdict"], figures["violations"]) == (0, "conformant", {}), logs
    assert figures["requests"] > 0 and all(figures["checks"][r["id"]] > 0 for r in results["requirements"]), logs


# ---------------------------------------------------------- usage errors, before any load
def _refused(tmp_path: Path, *extra: str) -> str:
    """Run ``load`` expecting a usage error: exit 4 and one line on stderr; returns that line."""
    cmd = [
        sys.executable,
        "-c",
        "from conformance.cli import main; raise SystemExit(main())",
        "load",
        "--report-dir",
        str(tmp_path / "reports"),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    lines = proc.stderr.strip().splitlines()
    assert (proc.returncode, len(lines)) == (4, 1), (proc.returncode, proc.stderr[-2000:])
    assert not (tmp_path / "reports" / "results.json").exists()
    return lines[0]


def test_an_unreachable_target_or_control_is_a_usage_error(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{closed_port()}"
    config = tmp_path / "target.toml"
    config.write_text(f'[control]\nurl = "{closed}/_control/v1"\ntoken = "t0ken-of-the-test"\n', "utf-8")
    line = _refused(tmp_path, "--target", closed, "--target-config", str(config))
    assert "--target" in line and "cannot reach it" in line and "t0ken-of-the-test" not in line


def test_a_control_extension_unreachable_or_refusing_its_token_is_a_usage_error(tmp_path: Path) -> None:
    from conformance.common import served as serve

    served = serve.ServedSimulator()
    try:
        for control, token, expected in (
            (f"http://127.0.0.1:{closed_port()}", served.control_token, "cannot reach it"),
            (served.url, "not-the-control-token", "refused the [control] token"),
        ):
            config = tmp_path / "target.toml"
            config.write_text(f'[control]\nurl = "{control}/_control/v1"\ntoken = "{token}"\n', "utf-8")
            line = _refused(tmp_path, "--target", served.url, "--target-config", str(config))
            assert "[control] url" in line and expected in line and token not in line, line
    finally:
        served.close()


@pytest.mark.parametrize(
    "option",
    [
        ("--identities", "-5"),
        ("--identities", "0"),
        ("--users", "0"),
        ("--spawn-rate", "nan"),
        ("--spawn-rate", "-1"),
        ("--run-time", "0"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error(tmp_path: Path, option: tuple[str, str]) -> None:
    assert option[0] in _refused(tmp_path, *option)


def test_the_served_simulator_gets_its_control_token_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any local user reads a command line (``ps``): the run's control credential goes in the environment."""
    from conformance.common import served as serve
    from conformance.common.outcomes import HarnessError

    seen: dict[str, Any] = {}

    class Exited:
        returncode = 1

        def __init__(self, cmd: list[str], **kwargs: Any) -> None:
            seen.update(cmd=cmd, env=kwargs.get("env") or {})

        def poll(self) -> int:
            return 1

    monkeypatch.setattr(subprocess, "Popen", Exited)  # the module serve uses
    with pytest.raises(HarnessError):
        serve.ServedSimulator()
    token = seen["env"]["KNOWLEDGE_SIM_CONTROL_TOKEN"]
    assert len(token) >= 32 and not any(token in arg for arg in seen["cmd"]) and "--control-token" not in seen["cmd"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------- the judging can fail
def _passed(tally: Tally, ids: list[str]) -> None:
    """Checks of ``ids`` that passed in the tally's process (its ledger)."""
    for rid in ids:
        tally.ledger.record(rid)


def _figures() -> LoadFigures:
    return LoadFigures(users=2, spawn_rate=1.0, run_time=1.0, requests=10)


def test_one_violation_fails_its_requirement_and_the_run() -> None:
    tally = Tally()
    _passed(tally, SCOPE)
    tally.violated("REF-009", "[REF-009] a ref was accepted", {"method": "POST"})
    run = build(tally, SCOPE, _figures(), target="t", run_id="r1", started=0.0, configuration={})
    status = {r.id: r.status for r in run.requirements}
    assert status == {"REF-009": "failed", "READ-005": "verified", "SRCH-008": "verified"}
    assert run.verdict == "non-conformant" and run.configuration["load"]["violations"] == {"REF-009": 1}


def test_a_requirement_no_check_reached_leaves_the_run_incomplete() -> None:
    tally = Tally()
    _passed(tally, ["REF-009", "READ-005"])
    run = build(tally, SCOPE, _figures(), target="t", run_id="r1", started=0.0, configuration={})
    assert run.verdict == "incomplete" and {r.id for r in run.requirements if r.status == "not_verified"} == {
        "SRCH-008"
    }


def test_a_step_nothing_could_judge_is_a_harness_error() -> None:
    tally = Tally()
    _passed(tally, SCOPE)
    tally.error("ConnectError", "no answer from the target")
    assert [t.outcome for t in results_of(tally, SCOPE)].count("error") == 1
    assert build(tally, SCOPE, _figures(), target="t", run_id="r1", started=0.0, configuration={}).verdict == "error"


def test_workers_tallies_add_up_on_the_master() -> None:
    one, two, master = Tally(), Tally(), Tally()
    _passed(one, ["REF-009"])
    one.violated("REF-009", "first", None)
    two.violated("REF-009", "second", None)
    for worker in (one, two):
        master.merge(worker.to_data())
    assert master.violations["REF-009"] == 2 and master.checks["REF-009"] == 1
    assert [s["message"] for s in master.samples["REF-009"]] == ["first", "second"]
