"""``knowledge-conformance observe`` as a command: usage errors exit 4 before anything starts, a
recording is judged with the suite's exit codes, and the proxy runs in front of the simulator
until interrupted, then writes the reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import simulator
from conformance.cli import main
from conformance.clients.reference_client import ReferenceClient
from conformance.common.control import Control
from simulator.config import SimConfig
from tests.serving import free_port, wait_until_it_answers
from tests.test_observe_support import CONTROL, served

ROUTE = "/agent-api/v1/workspaces/acme"


@pytest.mark.parametrize(
    "arguments",
    [
        [],
        ["--upstream", "ftp://core.example"],
        ["--upstream", "http://core.example", "--listen", "nowhere"],
        ["--upstream", "http://core.example", "--har", "x.har"],
        ["--upstream", "http://core.example", "--queue", "0"],
        ["--har", "no-such-file.har"],
    ],
)
def test_a_usage_mistake_exits_4(arguments: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["observe", *arguments, "--reports", str(tmp_path)])
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 4
    assert not (tmp_path / "results.json").exists()


def test_a_listen_port_in_use_exits_4_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port another process holds is the command's mistake (exit 4, one line), not the suite's (it was 3)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(
            ["observe", "--upstream", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{port}", "--reports", str(tmp_path)]
        )
    assert code == 4
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"cannot listen on 127.0.0.1:{port}" in err, err
    assert not (tmp_path / "results.json").exists()


def _entry(at: str, path: str, request: Any, status: int, answer: Any) -> dict[str, Any]:
    return {
        "startedDateTime": at,
        "time": 5,
        "request": {
            "method": "POST",
            "url": f"https://core.example{ROUTE}{path}",
            "headers": [{"name": "Authorization", "value": "Bearer bha_" + "a" * 44}],
            "postData": {"mimeType": "application/json", "text": json.dumps(request)},
        },
        "response": {
            "status": status,
            "headers": [{"name": "Cache-Control", "value": "no-store"}],
            "content": {"mimeType": "application/json", "text": json.dumps(answer)},
        },
    }


def _har(tmp_path: Path, hints: int) -> Path:
    hint = {"title": "t", "summary": "s", "ref": "r"}
    answer = {"status": "ok", "trust": "reference_only", "hints": [{**hint, "ref": f"r{i}"} for i in range(hints)]}
    entry = _entry("2030-01-01T00:00:00.000Z", "/knowledge/search", {"query": "q", "run_id": "run"}, 200, answer)
    path = tmp_path / f"{hints}.har"
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry]}}), "utf-8")
    return path


@pytest.mark.parametrize(("hints", "code", "verdict"), [(3, 0, "conformant"), (4, 1, "non-conformant")])
def test_a_recording_is_judged_with_the_suites_exit_codes(hints: int, code: int, verdict: str, tmp_path: Path) -> None:
    assert main(["observe", "--har", str(_har(tmp_path, hints)), "--reports", str(tmp_path / "r")]) == code
    results = json.loads((tmp_path / "r" / "results.json").read_text("utf-8"))
    assert results["verdict"] == verdict and results["summary"]["observed_exchanges"] == 1


@pytest.mark.parametrize(
    ("fixture", "violated"), [("transcript-clean.json", set()), ("transcript-read-refreshes-expiry.json", {"REF-001"})]
)
def test_the_suites_transcript_gets_the_verdict_its_model_gives(
    fixture: str, violated: set[str], tmp_path: Path
) -> None:
    """The stateful model's replay (conformance.server.transcript.replay) and observe name the same rule."""
    from conformance.common.config import TargetConfig
    from conformance.server.transcript import replay

    path = Path(__file__).parent / "fixtures" / fixture
    deviation = replay(json.loads(path.read_text("utf-8")), TargetConfig())
    assert ({deviation.requirement} if deviation else set()) == violated
    code = main(["observe", "--transcript", str(path), "--reports", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text("utf-8"))
    assert {r["id"] for r in results["requirements"] if r["status"] == "failed"} == violated
    assert code == (1 if violated else 0)


def test_strict_holds_the_core_to_the_projects_choices_too(tmp_path: Path) -> None:
    """A reference error without next_action: the seed allows it (the SDK builds the feedback);
    --strict, like a run's [wire] codes.strict, names REF-012 (the strict-only quirk error_without_next_action)."""
    search = {"status": "ok", "trust": "reference_only", "hints": [{"title": "t", "summary": "s", "ref": "r0"}]}
    expired = {"error": "knowledge_reference_expired", "message": "expired"}
    entries = [
        _entry("2030-01-01T00:00:00.000Z", "/knowledge/search", {"query": "q", "run_id": "run"}, 200, search),
        _entry("2030-01-01T00:10:00.000Z", "/knowledge/read", {"ref": "r0", "run_id": "run"}, 410, expired),
    ]
    path = tmp_path / "expired.har"
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": entries}}), "utf-8")
    assert main(["observe", "--har", str(path), "--reports", str(tmp_path / "r")]) == 0
    assert main(["observe", "--har", str(path), "--strict", "--reports", str(tmp_path / "s")]) == 1
    results = json.loads((tmp_path / "s" / "results.json").read_text("utf-8"))
    assert {r["id"] for r in results["requirements"] if r["status"] == "failed"} == {"REF-012"}


def test_a_recording_without_the_contract_is_incomplete(tmp_path: Path) -> None:
    path = tmp_path / "empty.har"
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": []}}), "utf-8")
    assert main(["observe", "--har", str(path), "--reports", str(tmp_path / "r")]) == 6


def test_the_proxy_runs_until_interrupted_then_reports(tmp_path: Path) -> None:
    app = simulator.create_app(SimConfig(control_token=CONTROL, demo=False, seed=5))
    port = free_port()
    with served(app) as core:
        control = Control.of_core(core, CONTROL)
        control.create_workspace("obs-cli")
        control.replace_corpus(
            "obs-cli",
            [{"id": "kb", "items": [{"id": "a", "title": "Homepage binding", "content": "homepage binding " * 40}]}],
        )
        token = control.mint("alice", "obs-cli")["token"]
        command = [
            sys.executable,
            "-m",
            "conformance.cli",
            "observe",
            "--upstream",
            core,
            "--listen",
            f"127.0.0.1:{port}",
        ]
        command += ["--reports", str(tmp_path / "r"), "--record-har", str(tmp_path / "seen.har")]
        with (tmp_path / "observe.log").open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        try:
            proxy = f"http://127.0.0.1:{port}"
            wait_until_it_answers(proxy, process, tmp_path / "observe.log", "observe", 60)
            with httpx.Client(base_url=proxy, timeout=30) as http:
                client = ReferenceClient(http, "obs-cli", token)
                assert client.get_knowledge_capabilities().supported
                run = client.start_turn(
                    "homepage binding",
                    {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m"},
                    knowledge_delivery="on_demand",
                )["run_id"]
                hint = client.search_knowledge({"query": "homepage binding", "runId": run})["hints"][0]
                assert client.read_chain(hint["ref"], run).complete
        finally:
            process.send_signal(signal.SIGINT)
            code = process.wait(60)
            control.close()
    assert code == 0, (tmp_path / "observe.log").read_text()
    results = json.loads((tmp_path / "r" / "results.json").read_text("utf-8"))
    assert results["verdict"] == "conformant" and results["summary"]["observed_judged"] >= 4
    assert json.loads((tmp_path / "seen.har").read_text("utf-8"))["log"]["entries"]
    assert token[4:20] not in (tmp_path / "seen.har").read_text("utf-8")
