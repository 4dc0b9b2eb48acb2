"""A served simulator with a kept store survives a kill -9 and a restart: nothing published is
lost, references issued before still read, and new IDs never collide with stored ones."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

CONTROL = "restart-control-token"
API = "/agent-api/v1/workspaces/keep"
CTL = {"Authorization": f"Bearer {CONTROL}"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _served(database: Path, *extra: str) -> Iterator[tuple[httpx.Client, subprocess.Popen[bytes]]]:
    port = _port()
    cmd = [
        sys.executable,
        "-m",
        "simulator.cli",
        "serve",
        "--port",
        str(port),
        "--database",
        str(database),
        "--control-token",
        CONTROL,
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                http.get("/_control/v1/clock", headers=CTL)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the simulator did not start"
                time.sleep(0.2)
        yield http, proc
    finally:
        http.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _read(http: httpx.Client, auth: dict[str, str], run: str, ref: str) -> httpx.Response:
    return http.post(f"{API}/knowledge/read", json={"ref": ref, "run_id": run}, headers=auth)


def test_a_killed_and_restarted_simulator_keeps_its_store_and_its_references(tmp_path: Path) -> None:
    database = tmp_path / "core.sqlite"
    with _served(database) as (http, proc):
        assert http.post("/_control/v1/workspaces", json={"route": "keep"}, headers=CTL).status_code == 201
        corpus = {"bases": [{"id": "kb", "items": [{"id": "d", "title": "persistence", "content": "first words"}]}]}
        assert http.put("/_control/v1/workspaces/keep/corpus", json=corpus, headers=CTL).status_code < 300
        token = http.post("/_control/v1/identities", json={"account": "a", "route": "keep"}, headers=CTL).json()[
            "token"
        ]
        auth = {"Authorization": f"Bearer {token}"}
        turn = {
            "client_conversation_id": "c",
            "client_turn_id": "t1",
            "user_message_id": "m",
            "user_input": "persistence",
        }
        run = http.post(f"{API}/turns", json=turn, headers=auth).json()["run_id"]
        published = http.post(
            "/_control/v1/workspaces/keep/items/d/revisions", json={"content": "second words"}, headers=CTL
        )
        assert published.status_code == 201
        hints = http.post(f"{API}/knowledge/search", json={"query": "persistence", "run_id": run}, headers=auth).json()[
            "hints"
        ]
        ref = hints[0]["ref"]
        before: dict[str, Any] = _read(http, auth, run, ref).json()
        assert before["content"] == "second words"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    with _served(database) as (http, _):
        again = _read(http, auth, run, ref)
        assert again.status_code == 200, again.text  # the same signing key, the same run
        assert json.loads(again.content)["content"] == "second words" and again.json()["revision"] == before["revision"]
        ids = set()
        for n in range(20):  # every new ID is fresh: a replayed ID stream collided with stored ones (HTTP 500)
            response = http.post(
                "/_control/v1/workspaces/keep/items/d/revisions", json={"content": f"words {n}"}, headers=CTL
            )
            assert response.status_code == 201, response.text
            ids.add(response.json()["revision_id"])
            turn = {**turn, "client_turn_id": f"t-after-{n}"}
            started = http.post(f"{API}/turns", json=turn, headers=auth)
            assert started.status_code == 200 and started.json()["run_id"] != run, started.text
        assert len(ids) == 20 and before["revision"] not in ids


def test_unseeded_simulators_share_no_signing_key_and_no_tokens(tmp_path: Path) -> None:
    """Two default starts: their demo tokens differ, and a reference of one is refused by the other."""
    tokens = []
    refs = []
    for n in range(2):
        with _served(tmp_path / f"{n}.sqlite") as (http, _):
            assert http.post("/_control/v1/workspaces", json={"route": "keep"}, headers=CTL).status_code == 201
            corpus = {"bases": [{"id": "kb", "items": [{"id": "d", "title": "persistence", "content": "words"}]}]}
            http.put("/_control/v1/workspaces/keep/corpus", json=corpus, headers=CTL)
            token = http.post("/_control/v1/identities", json={"account": "a", "route": "keep"}, headers=CTL).json()[
                "token"
            ]
            auth = {"Authorization": f"Bearer {token}"}
            turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "x"}
            run = http.post(f"{API}/turns", json=turn, headers=auth).json()["run_id"]
            hints = http.post(
                f"{API}/knowledge/search", json={"query": "persistence", "run_id": run}, headers=auth
            ).json()["hints"]
            tokens.append(token)
            refs.append(hints[0]["ref"])
            if n == 1:
                # the first instance's reference, presented to the second with the second's own run
                foreign = _read(http, auth, run, refs[0])
                assert foreign.status_code in range(400, 500), foreign.text
    assert tokens[0] != tokens[1] and refs[0] != refs[1]


def test_the_control_extension_is_not_served_publicly_with_the_default_credential() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "serve", "--host", "0.0.0.0", "--port", str(_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--control-token" in proc.stderr
