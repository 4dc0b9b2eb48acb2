"""Runs against one Core served over HTTP, the way CI jobs share a staging Core: runs
repeat and overlap without interfering, clean up after themselves, fail early on a
bad setup, and never let a credential out, even from a Core that echoes it everywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import simulator
from conformance.common.open import serve_over_loopback
from conformance.common.secrets import FRAGMENT
from conformance.report.results import load_waivers
from knowledge_schemas import SCHEMA_DIR, load_catalogue
from simulator.config import SimConfig
from tests.suite_command import SUITE, warm_suite

CONTROL_TOKEN = "ctl-" + "k" * 28


@dataclass
class Served:
    url: str
    app: Any
    seen_tokens: set[str] = field(default_factory=set)

    def config(self, root: Path, extra: str = "") -> Path:
        path = root / "target.toml"
        path.write_text(f'[control]\nurl = "{self.url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n{extra}', "utf-8")
        return path

    def routes(self) -> list[str]:
        return list(self.app.state.core.store.routes())


class EchoCredentials:
    """A careless Core: every credential it is sent comes back in a header, in every error
    body, and in every JSON object it answers with (which also breaks the schemas), at
    so many offsets that any cut the suite makes in a body splits one of them."""

    def __init__(self, app: Any, seen: set[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = auth.partition(" ")[2]
        if token:
            self.seen.add(token)
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = b"".join(chunks)
                    try:
                        data = json.loads(body)
                        if isinstance(data, dict) and token:
                            data["echo"] = [f"{'.' * i}you sent {auth}" for i in range(0, 400, 11)]
                            if "message" in data:
                                data["message"] += f" (token {token})"
                            body = json.dumps(data).encode()
                    except ValueError:
                        pass
                    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                    headers += [(b"content-length", str(len(body)).encode()), (b"x-echo", token.encode())]
                    await send({**start, "headers": headers})
                    await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)


def _serve(wrap: Callable[[Any, set[str]], Any] | None = None) -> tuple[Served, Callable[[], None]]:
    app = simulator.create_app(SimConfig(control_token=CONTROL_TOKEN, demo=False, seed=3))
    served = Served("", app)
    asgi = wrap(app, served.seen_tokens) if wrap else app
    served.url, stop = serve_over_loopback(asgi)
    return served, stop


@pytest.fixture
def served() -> Iterator[Served]:
    core, stop = _serve()
    yield core
    stop()


def _cmd(served: Served, root: Path, name: str, *args: str) -> list[str]:
    """Fresh interpreters: runs compared for agreement each get a string hash seed of their own
    (forked runs share their server's)."""
    return [
        *SUITE,
        "--no-shrink",
        "--target",
        served.url,
        "--target-config",
        str(served.config(root)),
        "--report-dir",
        str(root / name),
        *args,
    ]


ENV = {**os.environ, "KC_CONTROL": CONTROL_TOKEN}


def _results(root: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((root / name / "results.json").read_text("utf-8")))


def _statuses(results: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in results["requirements"]}


def test_two_consecutive_runs_against_one_core_agree_and_clean_up(served: Served, tmp_path: Path) -> None:
    """The second run even reuses the first one's run ID (a replay): that only works if the
    first deleted every workspace it created and no turn identity outlived it."""
    first = subprocess.run(
        _cmd(served, tmp_path, "one", "--run-id", "replay-1"), capture_output=True, text=True, timeout=300, env=ENV
    )
    assert served.routes() == [], "the run must delete the workspaces it created"
    second = subprocess.run(
        _cmd(served, tmp_path, "two", "--run-id", "replay-1"), capture_output=True, text=True, timeout=300, env=ENV
    )
    one, two = _results(tmp_path, "one"), _results(tmp_path, "two")
    assert first.returncode == second.returncode == 0, (first.stdout[-1500:], second.stdout[-1500:])
    assert one["verdict"] == two["verdict"] == "conformant"
    assert _statuses(one) == _statuses(two)
    assert one["run_id"] == two["run_id"] == "replay-1"
    print(
        f"\nrun {one['run_id']} twice: {one['verdict']}, {two['verdict']}, "
        f"MUSTs {two['summary']['server_must_verified']}/{two['summary']['server_must_total']}"
    )


def test_two_concurrent_runs_against_one_core_do_not_interfere(served: Served, tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            _cmd(served, tmp_path, name), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV
        )
        for name in ("left", "right")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for name, proc, out in zip(("left", "right"), procs, outputs, strict=True):
        assert proc.returncode == 0 and _results(tmp_path, name)["verdict"] == "conformant", out[-1500:]
    assert _results(tmp_path, "left")["run_id"] != _results(tmp_path, "right")["run_id"], (
        "each run gets its own namespace"
    )


def test_a_core_that_echoes_credentials_leaks_none_of_them(tmp_path: Path) -> None:
    core, stop = _serve(EchoCredentials)
    try:
        proc = subprocess.run(
            _cmd(core, tmp_path, "r", "--tb=long", "-rA", "--showlocals"),
            capture_output=True,
            text=True,
            timeout=300,
            env=ENV,
        )
    finally:
        stop()
    results = _results(tmp_path, "r")
    assert results["verdict"] == "non-conformant" and proc.returncode == 1, proc.stdout[-1500:]
    secrets = {*core.seen_tokens, CONTROL_TOKEN}
    assert len(secrets) > 5, "the echoing Core must have seen the run's tokens"
    outputs = {
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        **{p.name: p.read_text("utf-8") for p in (tmp_path / "r").iterdir()},
    }
    leaks = {name: sum(text.count(s) for s in secrets) for name, text in outputs.items()}
    print(f"\noccurrences of {len(secrets)} secrets per output: {leaks}")
    assert all(n == 0 for n in leaks.values()), leaks
    # What a cut before scrubbing leaves; a piece like "00000000" is also ordinary text, so not evidence.
    pieces = {piece for s in secrets for piece in (s[:FRAGMENT], s[-FRAGMENT:]) if len(set(piece)) >= 4}
    partial = {name: sorted({p for p in pieces if p in text}) for name, text in outputs.items()}
    assert all(not found for found in partial.values()), (
        partial,
        [s for s in secrets if s[:FRAGMENT] in str(partial) or s[-FRAGMENT:] in str(partial)],
    )
    assert "you sent Bearer ***" in outputs["results.json"], "the echoed body is kept, with the secret masked"


def test_a_url_with_credentials_never_shows_them(tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text('[target]\nroute = "acme"\n[identities.primary]\ntoken = "bha_' + "s" * 40 + '"\n', "utf-8")
    url = "http://alice:pa55word-secret@127.0.0.1:9/core?api_key=query-secret-value"
    cmd = [
        *warm_suite(),
        "--target",
        url,
        "--target-config",
        str(config),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "cannot reach" in out, out[-800:]
    assert "pa55word-secret" not in out and "query-secret-value" not in out and "bha_sss" not in out


@pytest.mark.parametrize(
    ("waivers", "expected"),
    [
        (
            '[[waiver]]\nid = "SRCH-999"\njustification = "x"\nexpires = 2999-01-01\n',
            "not a requirement of the catalogue",
        ),
        ('[[waiver]]\nid = "SRCH-003"\njustification = "x"\n', "lacks ['expires']"),
        ('[[waiver]]\nid = "SRCH-003"\njustification = "x"\nexpires = "soon"\n', "must be a TOML date"),
        ('[[waiver]]\nid = "SRCH-003"\njustification = " "\nexpires = 2999-01-01\n', "needs a justification"),
        ("[[waiver]\n", "not valid TOML"),
    ],
)
def test_bad_waivers_are_refused_with_what_to_fix(tmp_path: Path, waivers: str, expected: str) -> None:
    file = tmp_path / "w.toml"
    file.write_text(waivers, "utf-8")
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_waivers(str(file), load_catalogue())


def test_bad_waivers_fail_before_any_test(tmp_path: Path) -> None:
    file = tmp_path / "w.toml"
    file.write_text('[[waiver]]\nid = "SRCH-999"\njustification = "x"\nexpires = 2999-01-01\n', "utf-8")
    cmd = [
        *warm_suite(),
        "--waivers",
        str(file),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and "not a requirement of the catalogue" in proc.stdout + proc.stderr, proc.stdout[
        -800:
    ]
    assert not re.search(r"\d+ passed", proc.stdout), "no test may run before the waivers are known to be good"
    assert not (tmp_path / "r" / "results.json").exists()


def test_a_datetime_waiver_expiry_is_a_date(tmp_path: Path) -> None:
    file = tmp_path / "w.toml"
    file.write_text(
        '[[waiver]]\nid = "SRCH-003"\njustification = "fix in flight"\nexpires = 2999-01-01T10:00:00Z\n', "utf-8"
    )
    cmd = [
        *warm_suite(),
        "--sim-quirk",
        "search_fourth_hint",
        "--requirement",
        "SRCH-003",
        "--waivers",
        str(file),
        "--report-dir",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    results = _results(tmp_path, "r")
    assert _statuses(results)["SRCH-003"] == "waived", proc.stdout[-1500:]
    assert proc.returncode == 6


def test_an_unwritable_report_folder_fails_before_any_test(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", "utf-8")
    cmd = [
        *warm_suite(),
        "--report-dir",
        str(blocker / "reports"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and "cannot write reports" in proc.stdout + proc.stderr
    assert not re.search(r"\d+ passed", proc.stdout)


def test_compare_reports_lost_coverage_as_a_regression(tmp_path: Path) -> None:
    example = json.loads((SCHEMA_DIR / "examples" / "results" / "valid-non-conformant.json").read_text("utf-8"))
    row = next(r for r in example["requirements"] if r["status"] == "failed")

    def results(statuses: dict[str, str]) -> Path:  # compare reads only files that are valid results.json
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        rows = [
            {**row, "id": k, "status": v, "failures": row["failures"] if v == "failed" else []}
            for k, v in statuses.items()
        ]
        path.write_text(json.dumps({**example, "requirements": rows}), "utf-8")
        return path

    old = results({"A-001": "failed", "A-002": "verified", "A-003": "failed"})
    new = results({"A-001": "not_verified", "A-002": "not_verified", "A-003": "verified"})
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "compare", str(old), str(new), "--fail-on-new-failures"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout
    lost = proc.stdout.split("Coverage lost")[1].split("Fixed")[0]
    assert "A-001: failed -> not_verified" in lost and "A-002: verified -> not_verified" in lost
    assert "A-003: failed -> verified" in proc.stdout.split("Fixed")[1]


def test_unreachable_control_is_a_harness_error_not_a_failure(tmp_path: Path) -> None:
    served, stop = _serve()
    url = served.url
    stop()
    core, stop2 = _serve()
    try:
        config = tmp_path / "t.toml"
        config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n', "utf-8")
        cmd = [
            *warm_suite(),
            "-k",
            "capabilities",
            "--target",
            core.url,
            "--target-config",
            str(config),
            "--report-dir",
            str(tmp_path / "r"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    finally:
        stop2()
    results = _results(tmp_path, "r")
    assert results["verdict"] == "error" and proc.returncode == 7, proc.stdout[-1500:]
    assert "failed" not in _statuses(results).values()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=1)
