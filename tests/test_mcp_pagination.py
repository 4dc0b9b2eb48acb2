"""A paginated MCP list is read through every page: a server that lists one tool a page (standard
MCP, ``nextCursor``) shows all its tools to every check, and one whose cursors go round in a
circle ends the walk instead of holding the run."""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.mcp.records import Endpoint
from conformance.mcp.session import MAX_PAGES, connect

PAGING_SERVER = r"""
import json, sys
TOOLS = ["search_business_knowledge", "read_business_knowledge", "search_knowledge"]
CIRCLE = sys.argv[1] == "circle"
out = sys.stdout.buffer
def send(obj):
    out.write(json.dumps(obj).encode() + b"\n"); out.flush()
for line in sys.stdin.buffer:
    msg = json.loads(line)
    rid, method = msg.get("id"), msg.get("method")
    if rid is None:
        continue
    if method == "initialize":
        info = {"name": "pager", "version": "1"}
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": info}})
    elif method == "tools/list":
        page = int((msg.get("params") or {}).get("cursor") or 0)
        result = {"tools": [{"name": TOOLS[page % len(TOOLS)], "inputSchema": {"type": "object"}}]}
        if CIRCLE or page + 1 < len(TOOLS):
            result["nextCursor"] = str((page + 1) % 2 if CIRCLE else page + 1)
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
"""


def _server(tmp_path: Path, mode: str) -> Endpoint:
    script = tmp_path / "pager.py"
    script.write_text(PAGING_SERVER, "utf-8")
    return Endpoint("stdio", argv=(sys.executable, str(script), mode))


def test_every_page_of_tools_list_is_read(tmp_path: Path) -> None:
    with connect(_server(tmp_path, "pages"), 10) as session:
        names = [t.name for t in session.tools()]
    assert names == ["search_business_knowledge", "read_business_knowledge", "search_knowledge"]


def test_cursors_that_go_round_end_the_walk(tmp_path: Path) -> None:
    with connect(_server(tmp_path, "circle"), 10) as session:
        names = [t.name for t in session.tools()]
    assert 2 <= len(names) < MAX_PAGES, names
