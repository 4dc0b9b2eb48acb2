"""The suite on an MCP server on the official TypeScript MCP SDK, in ``examples/independent/mcp-ts/``:
the Agent Session path (over streamable HTTP per route and over stdio), the Fixed Client Token job
path and seed 003's ``search_knowledge``, with an in-process Core and the control extension, written
blind from the seeds, CONVENTIONS and ``schemas/``. It passes its own tests, the suite calls it
CONFORMANT at default settings on both transports, and each of its broken variants
(``variants.json``: one plausible TypeScript or adapter bug each) NON-CONFORMANT, failing the IDs it
breaks.

``KC_MCPTS_VARIANTS`` picks the variants: ``fast`` (default, a few of different kinds CI can
afford), ``all``, or a comma-separated list of names. Every variant, one suite run each (about a
minute a run): ``KC_MCPTS_VARIANTS=all pytest tests/test_mcp_ts.py``. Its ``node_modules`` come
from ``npm ci`` (CI runs it); without them the tests skip, except under CI, where they fail."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import pytest

from tests.serving import SuiteRun, assert_node_tests_pass, choose_variants, free_port, run_suite, served

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "examples" / "independent" / "mcp-ts"
BIN = PACKAGE / "bin" / "knowledge-mcp-ts.mjs"
SDK = PACKAGE / "node_modules" / "@modelcontextprotocol" / "sdk"
NODE = shutil.which("node")
VARIANTS = {v["name"]: v for v in json.loads((PACKAGE / "variants.json").read_text("utf-8"))}
FAST = ("mcp_budget_flag_dropped", "mcp_caps_5xx_legacy", "sk_text_not_json")
"""One relayed answer, one negotiation and one search_knowledge bug."""
CHOSEN = choose_variants(os.environ.get("KC_MCPTS_VARIANTS", "fast"), list(VARIANTS), FAST)
pytestmark = pytest.mark.skipif(NODE is None, reason="no node on this machine (CI has Node 20)")


@pytest.fixture(autouse=True)
def _node_modules() -> None:
    """The SDK installed by ``npm ci``: a missing one skips here, and fails under CI (never a silent skip)."""
    if not SDK.is_dir():
        reason = f"{PACKAGE.relative_to(ROOT)}/node_modules is missing: npm ci --prefix {PACKAGE.relative_to(ROOT)}"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI installs them first: .ci/run)")
        pytest.skip(reason)


def _run(variant: str, tmp_path: Path) -> SuiteRun:
    """One whole suite run at default settings against the server (``variant``, or the clean one for
    ""), on its Core, its control extension and its Agent Session MCP path over both transports."""
    assert NODE is not None
    port, token = free_port(), secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}"
    broken = ["--broken", variant] if variant else []  # a stdio child need not inherit the environment
    config = tmp_path / "target.toml"
    config.write_text(
        f"[target]\nurl = {json.dumps(url)}\n\n"
        f'[control]\nurl = {json.dumps(url + "/_control/v1")}\ntoken = {{env = "MCPTS_CONTROL_TOKEN"}}\n\n'
        f"[mcp]\nurl = {json.dumps(url + '/agent-api/v1/workspaces/{route}/mcp')}\n"
        f"command = {json.dumps([NODE, str(BIN), 'stdio', '--route', '{route}', '--core-url', url, *broken])}\n"
        f"jobs_command = {json.dumps([NODE, str(BIN), 'jobs', *broken])}\n"
        'transport = "both"\n',
        "utf-8",
    )
    environment = {k: v for k, v in os.environ.items() if k != "MCPTS_BROKEN"}
    server_env = {**environment, "MCPTS_CONTROL_TOKEN": token, "MCPTS_BROKEN": variant}
    command = [NODE, str(BIN), "serve", "--port", str(port)]
    with served(command, url + "/", tmp_path / "server.log", "knowledge-mcp-ts", env=server_env):
        suite_env = {**environment, "MCPTS_CONTROL_TOKEN": token}
        return run_suite(["--target-config", str(config)], tmp_path / "reports", env=suite_env, cwd=tmp_path)


def test_the_mcp_ts_server_passes_its_own_tests() -> None:
    assert NODE is not None
    assert_node_tests_pass(NODE, PACKAGE)


def test_the_suite_calls_the_mcp_ts_server_conformant(tmp_path: Path) -> None:
    run = _run("", tmp_path)
    assert run.failed == {} and run.errors == [], (run.failed, run.errors[:3])
    summary = run.results["summary"]
    assert summary["server_must_verified"] == summary["server_must_total"], summary
    assert summary["mcp_must_verified"] == summary["mcp_must_total"], summary
    assert summary["tool_must_verified"] == summary["tool_must_total"], summary
    checked = {s["surface"] for s in run.results["surfaces"] if s["checked"]}
    assert checked == {"http", "mcp-stdio", "mcp-http"}, run.results["surfaces"]
    assert run.code == 0 and run.results["verdict"] == "conformant", run.output


@pytest.mark.parametrize("variant", CHOSEN)
def test_a_broken_mcp_ts_server_fails_the_ids_it_breaks(variant: str, tmp_path: Path) -> None:
    run = _run(variant, tmp_path)
    breaks = set(VARIANTS[variant]["breaks"])
    assert run.errors == [] and run.code == 1, (run.code, run.errors[:3])
    assert breaks <= set(run.failed), f"{variant} breaks {sorted(breaks)}; the suite failed {sorted(run.failed)}"
