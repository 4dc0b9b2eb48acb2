"""stdio transports: newline-delimited JSON-RPC on stdin/stdout, logs on stderr."""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Callable

from .agent_tools import AgentTools, SessionContext
from .core_client import CoreClient
from .jobs import DEFAULT_JOB_SECONDS, JobTools
from .mcp_protocol import McpServer, parse_error


def serve_stdio(server: McpServer, context: Callable[[], Any],
                stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> int:
    """Answer each line in order until stdin closes."""
    src = stdin if stdin is not None else sys.stdin.buffer
    dst = stdout if stdout is not None else sys.stdout.buffer
    for line in src:
        if not line.strip():
            continue
        try:
            payload = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            answer: Any = parse_error()
        else:
            answer = server.handle_payload(payload, context())
        if answer is not None:
            dst.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
            dst.flush()
    return 0


def run_agent_stdio(core_url: str, route: str | None) -> int:
    """``python -m blindcore mcp --core-url URL --route ROUTE`` (token: ``KC_AGENT_TOKEN``).

    Without ``--route`` (or with an unexpanded ``{route}``) the route is ``KC_ROUTE``,
    else the workspace of the token itself (``GET /agent-api/v1/session``)."""
    token = os.environ.get("KC_AGENT_TOKEN", "").strip()
    if not token:
        print("blindcore mcp: KC_AGENT_TOKEN is not set; every tool call will be refused",
              file=sys.stderr, flush=True)
    core = CoreClient(core_url)
    if not route or "{" in route:
        route = os.environ.get("KC_ROUTE", "").strip() or None
    fixed: list[str] = [route] if route else []

    def context() -> SessionContext:
        if not fixed and token:
            answer = core.request("GET", "/agent-api/v1/session", token)
            if answer.status == 200 and isinstance(answer.body, dict) and isinstance(answer.body.get("route"), str):
                fixed.append(answer.body["route"])
        # A new context per message: the token is checked against the route on every call.
        return SessionContext(token=token, route=fixed[0] if fixed else "auto")

    server = McpServer(tools=AgentTools(core), name="blindcore-agent-session")
    return serve_stdio(server, context)


def run_jobs_stdio(job_seconds: float | None = None) -> int:
    """``python -m blindcore jobs``: the Fixed Client Token path's three job tools."""
    if job_seconds is None:
        try:
            job_seconds = float(os.environ.get("KC_JOB_SECONDS", DEFAULT_JOB_SECONDS))
        except ValueError:
            job_seconds = DEFAULT_JOB_SECONDS
    server = McpServer(tools=JobTools(job_seconds), name="blindcore-client-token-jobs")
    return serve_stdio(server, lambda: None)
