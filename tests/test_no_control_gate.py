"""A Core without the test-control extension, as most staging and production deployments are: the
simulator served with ``--no-control``, seeded from the exported corpus kit through its ordinary
seeding path (``--corpus DIR --route staging``, with a workspace per state), and the suite run
against it from a target configuration alone (identities, probe_query, ``kit_route``,
``[target.documents]``, ``[target.workspaces]``). Nothing may fail or error; the budget, page and
state rules must be verified there; and a Core broken on the wire must fail its rule."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.target.config import ConfigError, load_config
from knowledge_schemas import load_registry

READ_CHAIN_MAX_BYTES = 131072
WITHOUT_CONTROL = ("READ-010", "READ-011", "READ-016", "READ-020", "CAP-006", "SRCH-009", "SRCH-010")
DOCUMENTS = '\n[target.documents]\nlong = "overdoc"\nmultibyte = "cutsdoc"\n'


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kit")
    done = _cli("corpus", "export", str(folder), timeout=120)
    assert done.returncode == 0, done.stderr
    return folder


def test_the_kit_names_a_unique_probe_and_a_purpose_for_every_document(kit: Path) -> None:
    manifest = json.loads((kit / "manifest.json").read_text("utf-8"))
    entries = manifest["documents"]
    texts = {e["key"]: (kit / e["file"]).read_bytes().decode("utf-8") for e in entries}
    for entry in entries:
        assert entry["purpose"] and entry["probe"] in texts[entry["key"]]
        assert len(texts[entry["key"]].encode()) == entry["content_bytes"]
        others = [k for k, text in texts.items() if k != entry["key"] and entry["probe"] in text]
        others += [e["key"] for e in entries if e is not entry and entry["probe"] in e["title"]]
        assert not others, f"probe {entry['probe']!r} of {entry['key']} is also in {others}"
    sizes = sorted(e["content_bytes"] for e in entries)
    assert sizes[-1] > READ_CHAIN_MAX_BYTES and READ_CHAIN_MAX_BYTES in sizes
    assert any(ord(ch) > 0xFFFF for ch in texts["unicode"]) and {e["base"] for e in entries} == {"kb-main", "kb-second"}


@contextmanager
def _staging(kit: Path, target: Path, *quirks: str) -> Iterator[str]:
    """``knowledge-sim serve --no-control`` seeded from the kit; yields its URL once the target configuration is written."""
    cmd = [sys.executable, "-m", "simulator.cli", "serve", "--no-control", "--port", "0", "--corpus", str(kit)]
    cmd += ["--route", "staging", "--write-target", str(target), *(a for q in quirks for a in ("--quirk", q))]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    banner = proc.stderr
    assert banner is not None
    try:
        lines: list[str] = []
        for line in banner:
            lines.append(line)
            if "target configuration written" in line:
                break
        assert target.is_file(), "".join(lines)[-1500:]
        threading.Thread(target=lambda: [None for _ in banner], daemon=True).start()  # a full pipe would stall it
        assert any(line.lstrip().startswith("primary: route staging") for line in lines), "tokens printed by role"
        url = str(tomllib.loads(target.read_text("utf-8"))["target"]["url"])
        for _ in range(200):
            try:
                httpx.get(f"{url}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _run(target: Path, reports: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = _cli("run", "--target-config", str(target), "--report-dir", str(reports), *extra)
    results = json.loads((reports / "results.json").read_text("utf-8"))
    assert load_registry().errors("results", results) == []
    return done.returncode, results, done.stdout


def test_a_core_without_control_is_judged_from_the_kit_and_its_configuration(kit: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.toml"
    with _staging(kit, target) as url:
        assert httpx.get(f"{url}/_control/v1/", timeout=10).status_code == 404
        with target.open("a", encoding="utf-8") as file:
            file.write(DOCUMENTS)
        code, results, out = _run(target, tmp_path / "reports", "--scope", "server@no-control")
    summary = results["summary"]
    statuses = {r["id"]: r for r in results["requirements"]}
    missing = sorted(
        f"{r['id']}: {r['reason']}"
        for r in results["requirements"]
        if r["surface"] == "server" and r["level"] == "MUST" and r["status"] != "verified"
    )
    print(
        f"\nno control: server MUSTs verified {summary['server_must_verified']}/{summary['server_must_total']}; "
        f"not verified: {missing}"
    )
    assert summary["tests_failed"] == summary["tests_errored"] == 0, out[-3000:]
    assert not [r["id"] for r in results["requirements"] if r["status"] == "failed"]
    for rid in WITHOUT_CONTROL:
        assert statuses[rid]["status"] == "verified", f"{rid}: {statuses[rid]['reason']}"
    scope = results["scope"]
    assert scope["label"] == "server@no-control" and scope["must_total"] >= 52, scope
    assert scope["must_verified"] == scope["must_total"], (scope, missing)
    assert code == 0 and results["verdict"] == "conformant", out[-3000:]
    report = (tmp_path / "reports" / "report.md").read_text("utf-8")
    assert "CONFORMANT within scope server@no-control" in report


def test_a_core_broken_on_the_wire_fails_its_rule_without_control(kit: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.toml"
    with _staging(kit, target, "no_read_budget") as _:
        code, results, out = _run(target, tmp_path / "reports", "--requirement", "READ-010")
    statuses = {r["id"]: r["status"] for r in results["requirements"]}
    assert code == 1 and results["verdict"] == "non-conformant", out[-3000:]
    assert statuses["READ-010"] == "failed"


def test_a_kit_document_not_found_leaves_its_rules_not_verified(tmp_path: Path) -> None:
    """The kit's route named, but nothing of the kit ingested there (the demo corpus instead):
    never a failure, never a harness error; each rule that needs a kit document says which."""
    target = tmp_path / "target.toml"
    with _staging_demo(target) as _:
        text = target.read_text("utf-8").replace(
            'probe_query = "binding"', 'probe_query = "binding"\nkit_route = "staging"'
        )
        target.write_text(text, "utf-8")
        code, results, out = _run(
            target, tmp_path / "reports", "--requirement", "READ-010", "--requirement", "SRCH-008"
        )
    assert code == 6, out[-3000:]
    statuses = {r["id"]: r for r in results["requirements"]}
    assert statuses["READ-010"]["status"] == "not_verified"
    assert "kit document 'big' not found on route 'staging'" in statuses["READ-010"]["reason"] + " ".join(
        t.get("message", "") or "" for t in results["tests"]
    )


@contextmanager
def _staging_demo(target: Path) -> Iterator[str]:
    """The demo corpus served as a staging deployment (no kit)."""
    with _staging(Path(__file__).resolve().parent.parent / "simulator" / "demo", target) as url:
        yield url


_PRIMARY = '[identities.primary]\ntoken = "bha_primary_token"\nroute = "staging"\n'


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('[target.workspaces.disabled]\nroute = "off"\nidentity = "other_account"\n', "[identities.other_account]"),
        ('[target.workspaces.disabled]\nroute = "off"\ntoken = "bha_x_token"\nidentity = "primary"\n', "workspaces"),
        ('[target.workspaces.disabled]\nroute = "off"\n', "workspaces"),
        ('[target.workspaces.paused]\nroute = "off"\ntoken = "bha_x_token"\n', "unknown key(s) paused"),
        ('[target.workspaces.legacy]\nroute = "old"\ntoken = "bha_x_token"\nurl = "x"\n', "unknown key(s) url"),
        ("[target.documents]\nlong = 3\n", "expected a string"),
        ('[target]\nkit_route = "elsewhere"\n', "kit_route 'elsewhere'"),
    ],
)
def test_the_no_control_tables_refuse_what_they_do_not_know(tmp_path: Path, toml: str, says: str) -> None:
    config = tmp_path / "target.toml"
    config.write_text(_PRIMARY + toml, "utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(str(config), target="http://core.example.test")
    assert says in str(refused.value), str(refused.value)


def test_the_no_control_tables_are_read(tmp_path: Path) -> None:
    config = tmp_path / "target.toml"
    config.write_text(
        '[target]\nroute = "staging"\nkit_route = "staging"\n[target.documents]\nlong = "annual report"\n'
        '[target.workspaces.legacy]\nroute = "old"\nidentity = "primary"\n' + _PRIMARY,
        "utf-8",
    )
    cfg = load_config(str(config), target="http://core.example.test")
    assert cfg.kit_route == "staging" and cfg.documents == {"long": "annual report"}
    assert cfg.workspaces["legacy"].route == "old" and cfg.workspaces["legacy"].token == "bha_primary_token"
