"""A Core without the test-control extension, as most staging and production deployments are: the
simulator served with ``--no-control``, seeded from the exported corpus kit through its ordinary
seeding path (``--corpus DIR --route staging``, with a workspace per state), and the suite run
against it from a target configuration alone (identities, probe_query, ``kit_route``,
``[target.documents]``, ``[target.workspaces]``). Nothing may fail or error; the budget, page and
state rules must be verified there; and a Core broken on the wire (quirks of several areas) must fail
its rules within the declared scope, ``server@no-control``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common.config import ConfigError, load_config
from conformance.common.scope import parse_scope
from knowledge_schemas import load_registry
from knowledge_schemas.catalogue import load_catalogue
from simulator.quirks import QUIRKS

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


BROKEN_ON_THE_WIRE = (
    "search_fourth_hint",  # a search bound
    "no_read_budget",  # the chain budget
    "ref_any_route",  # a reference binding
    "disabled_still_enabled",  # a workspace kept disabled
    "route_unchecked",  # authorization
)
"""Quirks of different areas that a request shows: each must fail its rules in a run without control
(five, to keep CI short; every quirk of the table is a Core the in-process runs fail)."""
SCOPE = "server@no-control"
RUNS_AT_ONCE = 3  # each run mostly waits (start-up, collection, requests): three share two cores well


def _violated_in_scope(quirk: str) -> tuple[str, ...]:
    members = set(parse_scope(SCOPE).members(load_catalogue()))
    return tuple(rid for rid in QUIRKS[quirk].violates if rid in members)


def _broken_run(kit: Path, folder: Path, quirk: str) -> tuple[int, dict[str, Any], str]:
    """``knowledge-sim serve --no-control ... --quirk QUIRK``, and the suite within the scope,
    narrowed to the quirk's rules."""
    folder.mkdir()
    target = folder / "target.toml"
    narrowed = [a for rid in _violated_in_scope(quirk) for a in ("--requirement", rid)]
    with _staging(kit, target, quirk):
        return _run(target, folder / "reports", "--scope", SCOPE, *narrowed)


@pytest.fixture(scope="module")
def broken_runs(
    kit: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Future[tuple[int, dict[str, Any], str]]]]:
    """The runs of every quirk this session selected, a few at once (each case waits for its own)."""
    selected = [
        str(item.callspec.params["quirk"])
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_a_core_broken_on_the_wire_fails_its_rule_without_control"
    ]
    root = tmp_path_factory.mktemp("broken")
    with ThreadPoolExecutor(RUNS_AT_ONCE) as pool:
        yield {quirk: pool.submit(_broken_run, kit, root / quirk, quirk) for quirk in dict.fromkeys(selected)}


@pytest.mark.parametrize("quirk", BROKEN_ON_THE_WIRE)
def test_a_core_broken_on_the_wire_fails_its_rule_without_control(
    quirk: str, broken_runs: dict[str, Future[tuple[int, dict[str, Any], str]]]
) -> None:
    expected = _violated_in_scope(quirk)
    assert expected, f"{quirk} violates nothing within {SCOPE}"
    code, results, out = broken_runs[quirk].result()
    statuses = {r["id"]: r["status"] for r in results["requirements"]}
    assert results["scope"]["label"] == SCOPE and results["summary"]["tests_errored"] == 0, out[-3000:]
    assert code == 1 and results["verdict"] == "non-conformant", out[-3000:]
    assert {rid: statuses[rid] for rid in expected} == dict.fromkeys(expected, "failed"), out[-3000:]


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
