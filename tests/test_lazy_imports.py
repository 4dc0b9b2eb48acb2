"""A suite process imports the ``mcp`` SDK only when it opens an MCP session: some 0.4 s of CPU
that every scoped run, every run without MCP and every pytest-xdist worker whose share holds no
MCP test would otherwise pay (conformance/mcp/records.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.seed_allowed import CONTROL_TOKEN, core, served
from tests.suite_command import SUITE

PROBE = """
import json, sys
import pytest
code = pytest.main(sys.argv[1:])
print(json.dumps({"code": int(code), "sdk": sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp."))}))
"""


def _imported(tmp_path: Path, *args: str) -> dict[str, object]:
    """What the suite imported, run against the simulator served as a live Core (in process, the
    bundled simulator's own MCP server would import the SDK); ``{url}`` in an argument is its URL."""
    suite = SUITE[SUITE.index("pytest") + 1 :]
    with served(core()) as url:
        config = tmp_path / "target.toml"
        config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = "{CONTROL_TOKEN}"\n', "utf-8")
        live = ["--target", url, "--target-config", str(config), "--report-dir", str(tmp_path / "reports")]
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *suite, *live, *(a.replace("{url}", url) for a in args)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    last = done.stdout.strip().splitlines()[-1]
    found: dict[str, object] = json.loads(last)
    return found


def test_a_whole_run_without_an_mcp_server_imports_no_mcp_sdk(tmp_path: Path) -> None:
    """Every test of the suite against a live Core with no MCP server configured: the MCP tests
    find no endpoint and open nothing (the ``mcp_agents`` fixture included)."""
    found = _imported(tmp_path)
    assert found["code"] == 0 and found["sdk"] == [], found  # the clean simulator: every test passed


def test_a_run_with_mcp_tests_imports_the_sdk(tmp_path: Path) -> None:
    """The probe sees an import when there is one (else the test above proves nothing)."""
    mcp = "{url}/agent-api/v1/workspaces/{route}/mcp"  # the served simulator's Agent Session MCP path
    found = _imported(tmp_path, "--requirement", "MCP-001", "--mcp-target", mcp)
    assert "mcp" in found["sdk"], found  # type: ignore[operator]
