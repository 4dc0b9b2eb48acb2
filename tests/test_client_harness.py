"""Client conformance through the harness protocol (issue: client and host conformance).

The reference client's harness is conformant; every broken-client miniature is caught with
exactly the IDs and exit code of schemas/client-miniatures.yaml; the Node harness (standard
library only) is conformant too where Node is installed. Each run is a whole
``knowledge-conformance client`` subprocess against one served simulator shared by the module.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.cli import main
from conformance.clients.core import DEFAULT_CONTROL_TOKEN
from conformance.clients.miniatures import MINIATURES
from conformance.clients.protocol import Harness, HarnessProtocolError, problems
from conformance.common.secrets import SECRETS
from conformance.common.served import TOKEN_ENV, ServedSimulator
from knowledge_schemas import load_catalogue, load_registry, load_yaml
from tests.suite_command import warm_cli

ROOT = Path(__file__).resolve().parent.parent
TABLE = load_yaml("client-miniatures.yaml")["miniatures"]
CHOSEN = os.environ.get("KC_CLIENT_MINIATURES", "fast")
RUN = [m for m in TABLE if CHOSEN == "all" or (CHOSEN == "fast" and m.get("fast")) or m["name"] in CHOSEN.split(",")]
NODE = shutil.which("node")
CLI = str(Path(sys.executable).parent / "knowledge-conformance")


@pytest.fixture(scope="module")
def core() -> Iterator[ServedSimulator]:
    served = ServedSimulator(seed=0, frozen_clock=True)
    try:
        yield served
    finally:
        served.close()


def client_run(harness: str, core: ServedSimulator, tmp: Path) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [
            *warm_cli(),
            "client",
            "--harness",
            harness,
            "--core",
            core.url,
            "--control-token",
            core.control_token,
            "--report-dir",
            str(tmp),
            "--run-id",
            secrets.token_hex(4),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    results = json.loads((tmp / "results.json").read_text("utf-8")) if (tmp / "results.json").exists() else {}
    return done.returncode, results, done.stdout[-3000:] + done.stderr[-2000:]


def failed(results: dict[str, Any]) -> set[str]:
    return {r["id"] for r in results["requirements"] if r["status"] == "failed"}


def _client_checked() -> set[str]:
    """Every requirement a client check names (its own, and another surface's it also shows)."""
    import importlib
    import pkgutil

    import conformance.suite.clients

    tagged: set[str] = set()
    for info in pkgutil.iter_modules(conformance.suite.clients.__path__):
        module = importlib.import_module(f"conformance.suite.clients.{info.name}")
        for obj in vars(module).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == "requirement":
                    tagged.update(mark.args)
                if mark.name == "parametrize":
                    tagged.update(
                        rid
                        for c in mark.args[1]
                        if hasattr(c, "marks")
                        for m in c.marks
                        if m.name == "requirement"
                        for rid in m.args
                    )
    return tagged


def test_the_table_names_every_miniature_and_only_client_or_host_rules() -> None:
    assert not load_registry().errors("client-miniatures", {"miniatures": TABLE})
    assert [m["name"] for m in TABLE] == list(MINIATURES)
    catalogue = load_catalogue()
    for m in TABLE:
        for rid in m["violates"]:
            assert catalogue[rid].surface in ("client", "host"), f"{m['name']}: {rid} is not a client or host rule"
        levels = {catalogue[rid].level for rid in m["violates"]}
        assert m["exit"] == (7 if not levels else 1 if "MUST" in levels else 0), m["name"]


def test_every_client_and_host_rule_has_a_check_or_a_reason() -> None:
    """Every client/host rule a wire shows is claimed by a client check, or is one no harness can show."""
    from conformance.clients.scope import UNSHOWABLE

    tagged = _client_checked()
    shown = {r.id for r in load_catalogue() if r.surface in ("client", "host") and r.via != "none"}
    assert shown - tagged == set()
    assert set(UNSHOWABLE) <= tagged, "each rule no harness can show is reported with its reason by a skipped check"


def test_the_protocol_schema_refuses_a_malformed_answer() -> None:
    assert problems("answer", {"id": 1, "ok": True, "value": {}}) == []
    assert problems("answer", {"id": 1, "ok": True}), "an ok answer needs a value"
    assert problems("answer", {"id": 1, "ok": False, "error": {"kind": "nope", "message": "x"}}), (
        "error kinds are a closed set"
    )
    assert problems("capabilities_value", {"supported": "yes"})


def test_the_reference_client_is_conformant(core: ServedSimulator, tmp_path: Path) -> None:
    code, results, out = client_run(f"{sys.executable} -m conformance.clients.reference", core, tmp_path)
    assert code == 0, out
    assert results["verdict"] == "conformant" and not failed(results)
    assert results["target"].startswith("client knowledge-conformance reference client "), results["target"]
    verified = {r["id"] for r in results["requirements"] if r["status"] == "verified"}
    gate = {r.id for r in load_catalogue() if r.surface in ("client", "host") and r.level == "MUST" and r.via != "none"}
    assert gate - verified == {"DSH-002", "DSH-004", "MCP-007"}, "every client/host MUST a harness can show is verified"
    assert "READ-017" in verified
    reasons = {r["id"]: r["reason"] for r in results["requirements"]}
    assert reasons["DSH-004"].startswith("not shown by a harness")
    assert "VERDICT: CONFORMANT" in out and "client/host MUSTs verified 21/21" in out


@pytest.mark.parametrize("miniature", RUN, ids=[m["name"] for m in RUN])
def test_a_broken_client_is_caught_with_its_exact_ids(
    miniature: dict[str, Any], core: ServedSimulator, tmp_path: Path
) -> None:
    code, results, out = client_run(
        f"{sys.executable} -m conformance.clients.miniatures {miniature['name']}", core, tmp_path
    )
    assert (code, failed(results)) == (miniature["exit"], set(miniature["violates"])), out
    if miniature["exit"] == 7:
        messages = " ".join(str(t.get("message") or "") for t in results["tests"])
        assert results["verdict"] == "error" and "is not a capabilities_value" in messages + out


def test_a_harness_that_does_not_start_is_one_harness_error_with_its_reason(
    core: ServedSimulator, tmp_path: Path
) -> None:
    """Before: 1,600+ lines of fixture tracebacks and a verdict saying only "the harness did not start"."""
    code, results, out = client_run(
        f"{sys.executable} -c 'import sys; print(\"boom-tail\", file=sys.stderr); sys.exit(3)'", core, tmp_path
    )
    assert code == 7 and results["verdict"] == "error", out
    assert "did not start" in results["target"]
    assert "Traceback" not in out and len(out.splitlines()) < 40, out
    reason = "the harness exited before answering start (exit 3)"
    assert f"harness error: the harness did not start: {reason}: boom-tail" in out and "  boom-tail" in out, out
    assert [t["outcome"] for t in results["tests"]] == ["error"], "no test ran after the start failed"
    assert (
        reason in results["tests"][0]["message"]
        and "VERDICT: ERROR" in out
        and reason in out.split("VERDICT: ERROR")[1]
    )


def _fake_harness(tmp_path: Path, body: str) -> str:
    script = tmp_path / "h.py"
    script.write_text("import json, sys\n" + body, "utf-8")
    return f"{sys.executable} {script}"


START_VALUE = {
    "client": {"name": "c", "version": "1"},
    "harness": {"name": "h", "version": "1"},
    "surfaces": ["client"],
}
CONNECTION = {
    "key": "main",
    "route": "r",
    "token": "t",
    "binding": {"hubUrl": "http://127.0.0.1:9", "clientAppId": "a", "workspace": "r", "sessionId": "s"},
}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            "print('hello there', flush=True); sys.stdin.read()",
            r"the harness printed something that is not one JSON line \(answering start\): 'hello there'",
        ),
        ("sys.stdin.read()", "no answer to start within 1 s"),
        (
            "c = json.loads(sys.stdin.readline()); print(json.dumps({'id': c['id'], 'ok': True, 'value': {'protocol': 'knowledge-harness.v2', "
            f"**{START_VALUE!r}}}}}), flush=True); sys.stdin.read()",
            r'/protocol: expected knowledge-harness\.v1, the harness answered start with "knowledge-harness\.v2"',
        ),
        (
            "print('why', file=sys.stderr); sys.exit(5)",
            r"the harness exited before answering start \(exit 5\): why",
        ),
    ],
    ids=["garbage", "hangs", "other-protocol", "exits"],
)
def test_a_start_failure_says_its_real_reason_on_one_line(tmp_path: Path, body: str, reason: str) -> None:
    running = Harness(_fake_harness(tmp_path, body), timeout=1)
    try:
        with pytest.raises(HarnessProtocolError) as caught:
            running.start("http://127.0.0.1:9", [CONNECTION])
    finally:
        running.close(stop=False)
    assert re.fullmatch(reason, str(caught.value)), str(caught.value)


def test_a_missing_harness_executable_is_a_harness_error() -> None:
    with pytest.raises(HarnessProtocolError, match=r"cannot start the harness '/nonexistent/harness': .*No such file"):
        Harness("/nonexistent/harness")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--harness", ""], "--harness: the command is empty"),
        (["--harness", "   "], "--harness: the command is empty"),
        (["--harness", "python 'x"], "No closing quotation"),
        (["--harness", "x", "--timeout", "0"], "--timeout must be a positive number of seconds, not 0"),
        (["--harness", "x", "--timeout", "-1"], "--timeout must be a positive number of seconds, not -1"),
        (["--harness", "x", "--timeout", "nan"], "--timeout must be a positive number of seconds"),
    ],
)
def test_a_bad_harness_option_is_a_one_line_usage_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before: exit 7 and a traceback (IndexError, shlex's ValueError, "the runner built an invalid start command")."""
    code = main(["client", *args, "--report-dir", str(tmp_path)])
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert code == 4 and len(lines) == 1 and lines[0].startswith("ERROR: ") and message in lines[0], lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--harness", "", "--harness-core", "http://127.0.0.1:9"], "--harness: the command is empty"),
        (
            ["--harness", "x", "--harness-timeout", "-1", "--harness-core", "http://127.0.0.1:9"],
            "--harness-timeout must be a positive",
        ),
    ],
)
def test_the_pytest_options_refuse_a_bad_harness_before_anything_starts(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "conformance.suite.clients",
            "-q",
            "-p",
            "no:cacheprovider",
            "--report-dir",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    lines = [line for line in out.splitlines() if line.strip()]
    assert done.returncode == 4 and "Traceback" not in out and len(lines) == 1 and message in lines[0], out[-1500:]
    assert not (tmp_path / "results.json").exists()


def test_the_served_simulator_has_a_random_control_token_never_on_its_command_line(core: ServedSimulator) -> None:
    """Before: --seed and the fixed default token, which any local user could use to drive its control extension."""
    other = ServedSimulator(seed=0, frozen_clock=True)
    try:
        assert core.control_token != other.control_token and DEFAULT_CONTROL_TOKEN not in (
            core.control_token,
            other.control_token,
        )
        assert core.control_token in SECRETS.values
        argv = " ".join(map(str, core.process.args))  # type: ignore[arg-type]
        assert core.control_token not in argv and "--control-token" not in argv
        clock = core.url + "/_control/v1/clock"
        assert httpx.get(clock, headers={"Authorization": f"Bearer {DEFAULT_CONTROL_TOKEN}"}).status_code in (401, 403)
        assert httpx.get(clock, headers={"Authorization": f"Bearer {core.control_token}"}).status_code == 200
        assert TOKEN_ENV == "KNOWLEDGE_SIM_CONTROL_TOKEN"
    finally:
        other.close()


@pytest.mark.skipif(
    NODE is None, reason="Node.js is not installed: the Node harness (examples/harness/node) is not run"
)
def test_the_node_harness_is_conformant(core: ServedSimulator, tmp_path: Path) -> None:
    code, results, out = client_run(f"{NODE} {ROOT / 'examples' / 'harness' / 'node' / 'harness.mjs'}", core, tmp_path)
    assert code == 0 and results["verdict"] == "conformant", out
    assert "Node" in results["target"]


def test_the_control_extension_shows_bodies_and_accounts_and_answers_a_canned_response() -> None:
    """The two control knobs client checks need, in-process: the transcript's request bodies and the
    account of the token (never the token), and respond_next (once, only for its endpoint and route)."""
    from conformance.common.transport import InProcessTransport
    from simulator.app import create_app

    app = create_app(seed=0)
    core_ = app.state.core
    ident = core_.store.identities("demo")[0]
    http = httpx.Client(transport=InProcessTransport(app), base_url="http://sim")
    control = {"Authorization": f"Bearer {core_.config.control_token}"}
    user = {"Authorization": f"Bearer {ident.token}"}
    caps = "/agent-api/v1/workspaces/demo/knowledge/capabilities"
    armed = http.post(
        "/_control/v1/faults",
        headers=control,
        json={
            "kind": "respond_next",
            "route": "demo",
            "endpoint": "capabilities",
            "status": 503,
            "body": {"error": "x"},
        },
    )
    assert armed.status_code == 201
    refused = http.post(
        "/_control/v1/faults", headers=control, json={"kind": "fail_next_read_unavailable", "status": 503}
    )
    assert refused.status_code == 400, "status belongs to respond_next only"
    assert (
        http.post(
            "/agent-api/v1/workspaces/demo/knowledge/search", headers=user, json={"query": "x", "runId": "r"}
        ).status_code
        == 400
    )
    first, second = http.get(caps, headers=user), http.get(caps, headers=user)
    assert (first.status_code, first.json()) == (503, {"error": "x"})
    assert second.status_code == 200, "a canned answer fires once"
    entries = http.get("/_control/v1/transcript", headers=control).json()["requests"]
    search = next(e for e in entries if e["path"].endswith("/knowledge/search"))
    assert search["body"] == {"query": "x", "runId": "r"} and search["account"] == ident.account
    assert search["session_id"] == ident.session_id and ident.token not in json.dumps(entries)
    http.close()


def test_a_canned_answer_can_wait_for_a_chains_next_page_and_need_not_be_json() -> None:
    """respond_next ``after``: that many requests go through first (a chain broken mid-way); ``text``: the
    answer is not JSON. The canned request's own body is on the transcript."""
    from conformance.common.transport import InProcessTransport
    from simulator.app import create_app

    app = create_app(seed=0)
    core_ = app.state.core
    ident = core_.store.identities("demo")[0]
    http = httpx.Client(transport=InProcessTransport(app), base_url="http://sim")
    control = {"Authorization": f"Bearer {core_.config.control_token}"}
    user = {"Authorization": f"Bearer {ident.token}"}
    read = "/agent-api/v1/workspaces/demo/knowledge/read"
    fault = {"kind": "respond_next", "route": "demo", "endpoint": "read", "status": 502, "text": "<html>", "after": 1}
    assert http.post("/_control/v1/faults", headers=control, json=fault).status_code == 201
    through = http.post(read, headers=user, json={"ref": "x", "run_id": "r1"})
    canned = http.post(read, headers=user, json={"ref": "y", "run_id": "r2"})
    again = http.post(read, headers=user, json={"ref": "z", "run_id": "r3"})
    assert through.status_code == 400 and again.status_code == 400, "only the second request is canned"
    assert (canned.status_code, canned.text, canned.headers["content-type"].split(";")[0]) == (
        502,
        "<html>",
        "text/plain",
    )
    reads = [e for e in http.get("/_control/v1/transcript", headers=control).json()["requests"] if e["path"] == read]
    assert [e["body"]["ref"] for e in reads] == ["x", "y", "z"] and reads[1]["status"] == 502
    refused = {"kind": "fail_next_read_unavailable", "after": 1}
    assert http.post("/_control/v1/faults", headers=control, json=refused).status_code == 400
    http.close()


def test_a_core_that_cannot_be_reached_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [CLI, "client", "--harness", "unused", "--core", "http://127.0.0.1:9", "--report-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 4 and "cannot reach it" in done.stderr + done.stdout
    assert not (tmp_path / "results.json").exists()


def test_the_documented_exchange_is_valid() -> None:
    """Every line of docs/harness-protocol.md's example exchange is a protocol command or answer."""
    text = (ROOT / "docs" / "harness-protocol.md").read_text("utf-8")
    lines = [line for line in text.splitlines() if line.startswith(("> {", "< {"))]
    assert len(lines) >= 10
    for line in lines:
        message = json.loads(line[2:])
        assert problems("command" if line[0] == ">" else "answer", message) == [], line[:80]
