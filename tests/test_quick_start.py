"""The curl quick start for SDK authors (docs/simulator.md), run as it is written (on a free port instead of
8765): a turn, a search, a read and its next page, a chain past the budget, and expiry through the
control clock; each answer it saved is checked here. Also the banner's labels: every token it
prints names its role, and a kept store's identities get their roles back."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator import create_app
from simulator.config import SimConfig
from simulator.corpus import DEMO_DIR, load_corpus, roles_in, seed_staging

ROOT = Path(__file__).resolve().parent.parent
CHAIN_BUDGET = 131072


def _quick_start() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "simulator.md").read_text("utf-8"), re.S)
    found = [block for block in blocks if "knowledge-sim serve --port 8765 2> sim.log" in block]
    assert len(found) == 1, "docs/simulator.md has one curl quick start"
    return str(found[0])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _json_values(text: str) -> list[Any]:
    """Concatenated JSON values (curl writes no newline after a body)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def _document(name: str) -> str:
    return next(DEMO_DIR.rglob(name)).read_bytes().decode("utf-8")


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="the quick start needs curl and jq")
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    script = _quick_start().replace("8765", str(_free_port())).replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KNOWLEDGE_SIM_CONTROL_TOKEN", None)
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the server it starts in the background is in its group
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    log = (tmp_path / "sim.log").read_text("utf-8") if (tmp_path / "sim.log").is_file() else ""
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-2000:]}\n{log[-2000:]}"

    printed = [line for line in log.splitlines() if "bha_" in line]
    assert printed and all(re.match(r"  (primary|same_session|other_session|other_account): route", t) for t in printed)

    def saved(name: str) -> Any:
        return json.loads((tmp_path / name).read_text("utf-8"))

    turn = saved("turn.json")
    assert turn["context"]["knowledge_delivery"]["mode"] == "on_demand"
    assert turn["context"]["knowledge"] == [] == turn["context"]["knowledge_refs"]
    search = saved("search.json")
    assert search["status"] == "ok" and 1 <= len(search["hints"]) <= 3
    assert search["hints"][0]["title"] == "API changelog"
    assert len((tmp_path / "search.json").read_bytes()) <= 4096
    changelog = _document("api-changelog.md")
    first, second = saved("page1.json"), saved("page2.json")
    assert first["ref"] == second["ref"] == search["hints"][0]["ref"]
    assert first["truncated"] is True and first["next_cursor"] and len((tmp_path / "page1.json").read_bytes()) <= 16384
    assert changelog.startswith(first["content"] + second["content"]) and second["content"]

    archive = _document("support-ticket-archive.md")
    chain = _json_values((tmp_path / "chain.jsonl").read_text("utf-8"))
    text = "".join(page["content"] for page in chain)
    assert len(archive.encode()) > CHAIN_BUDGET and archive.startswith(text)
    assert CHAIN_BUDGET - 32768 < len(text.encode()) <= CHAIN_BUDGET
    last = chain[-1]
    assert last["budget_exhausted"] is True and last["truncated"] is True and last["next_cursor"] is None
    assert all(page["next_cursor"] for page in chain[:-1])

    expired = saved("expired.json")
    assert expired["error"] == "knowledge_reference_expired" and expired["next_action"] == "search_knowledge"
    again = saved("again.json")
    assert again["status"] == "ok" and again["hints"][0]["ref"] != search["hints"][0]["ref"]
    assert '"knowledge_reference_expired","next_action":"search_knowledge"' in out


def test_a_kept_store_gives_its_identities_their_roles_back(tmp_path: Path) -> None:
    """``--route`` on a store kept from an earlier start labels the same tokens (and writes the same
    target configuration); an identity minted later, through control, takes no role."""
    config = SimConfig(seed=3, database=str(tmp_path / "sim.db"), demo=False)
    core = create_app(config).state.core
    roles, states = seed_staging(core, load_corpus(str(DEMO_DIR)), "staging")
    core.store.mint_identity("carol", "staging", core.config.hub, None)
    again = create_app(config).state.core
    assert roles_in(again.store, "staging", again.config.hub) == (roles, states)
    assert set(roles) == {"primary", "same_session", "other_session", "other_account", "other_route", "other_hub"}


def test_the_demo_identities_each_hold_one_role() -> None:
    core = create_app(seed=1).state.core
    roles, states = roles_in(core.store, core.config.demo_route, core.config.hub)
    assert list(roles) == ["primary", "same_session", "other_session", "other_account"] and states == {}
    assert {i.token for i in core.store.identities(core.config.demo_route)} == {i.token for i in roles.values()}
