"""An MCP target named per route (``{route}`` in its URL): each world's session opens on its own
workspace, so a server scoped to its route (as the bundled simulator's streamable-HTTP mount is)
passes the search_knowledge checks, which build their worlds in workspaces of their own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conformance.mcp.endpoints import on_route
from tests.seed_allowed import CONTROL_TOKEN, core, only, served
from tests.suite_command import warm_suite


def test_a_route_template_names_each_session_s_workspace() -> None:
    assert on_route("https://c.example/agent-api/v1/workspaces/{route}/mcp", "kc-1-sk-2") == (
        "https://c.example/agent-api/v1/workspaces/kc-1-sk-2/mcp"
    )
    assert on_route("https://c.example/mcp", "kc-1") == "https://c.example/mcp"


def test_the_search_knowledge_checks_pass_a_route_scoped_mcp_server(tmp_path: Path) -> None:
    with served(core()) as url:
        config = tmp_path / "target.toml"
        config.write_text(
            f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_ROUTE_CONTROL"}}\n'
            f'[mcp]\nurl = "{url}/agent-api/v1/workspaces/{{route}}/mcp"\n',
            "utf-8",
        )
        reports = tmp_path / "reports"
        cmd = [*warm_suite()]
        cmd += ["--no-shrink", "--target", url, "--target-config", str(config), "--report-dir", str(reports)]
        cmd += only("SK-001", "SK-005", "SK-018", "MCP-001", "MCP-004")
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "KC_ROUTE_CONTROL": CONTROL_TOKEN}
        )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    status = {r["id"]: r["status"] for r in results["requirements"]}
    errors = [t["message"] for t in results["tests"] if t["outcome"] == "error"]
    assert errors == [] and [t for t in results["tests"] if t["outcome"] == "failed"] == [], done.stdout[-3000:]
    assert all(status[rid] == "verified" for rid in ("SK-001", "SK-005", "SK-018", "MCP-001", "MCP-004")), status
