"""The simulator's MCP servers on the official ``mcp`` SDK (low-level ``Server``: the tool
schemas are the project's own, from ``schemas/``, not derived from Python signatures).

- Agent Session path over streamable HTTP, mounted in the simulator app at
  ``/agent-api/v1/workspaces/{route}/mcp``: the session acts as the bearer token of its
  HTTP requests on the route of its URL (both fixed by its first call), on the same Core.
- Agent Session path over stdio (``knowledge-sim mcp``): the token comes from the
  environment (``KNOWLEDGE_SIM_TOKEN``), the route from ``--route``; the Core is a URL
  (``--core-url``) or, without one, an in-process simulator with the demo workspace.
- Fixed Client Token stdio path (``knowledge-sim mcp --path jobs``): the three job tools.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from simulator.mcp.jobs import JobTools
from simulator.mcp.tools import AgentTools, CoreHttp, Session, ToolError

MCP_PATH = "/agent-api/v1/workspaces/{route}/mcp"
TOKEN_ENV = "KNOWLEDGE_SIM_TOKEN"
NAME = "knowledge-sim"
# Host and Origin values the MCP endpoint accepts by default: this machine only ("name:*" is any port).
LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*")
LOOPBACK_ORIGINS = tuple(f"{scheme}://{host}" for scheme in ("http", "https") for host in LOOPBACK_HOSTS)

SessionOf = Callable[[ServerRequestContext[Any, Any]], Session]


def agent_server(tools: AgentTools, session_of: SessionOf) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools.tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            session = session_of(ctx)
        except ToolError as err:
            return tools.failure(params.name, err)
        return await tools.call(session, params.name, dict(params.arguments or {}))

    return Server(NAME, version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def job_server(jobs: JobTools) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=jobs.tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await jobs.call(params.name, dict(params.arguments or {}))

    return Server(NAME + "-jobs", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


class HttpSessions:
    """Session state per Agent Session and route (the bearer token and the route of the URL),
    and per MCP session where the transport has one (the handshake era's ``Mcp-Session-Id``):
    the stateless 2026 protocol revision has no MCP session, and the current run is then the
    Agent Session's."""

    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str, str], Session] = {}

    def __call__(self, ctx: ServerRequestContext[Any, Any]) -> Session:
        request = ctx.request
        headers = getattr(request, "headers", None) or {}
        scheme, _, token = str(headers.get("authorization", "")).partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        route = str((getattr(request, "path_params", None) or {}).get("route", ""))
        key = (str(headers.get("mcp-session-id", "")), token, route)
        if key not in self.sessions:
            self.sessions[key] = Session(token=token or None, route=route or None)
        return self.sessions[key]


class LazyMcpApp:
    """Streamable HTTP for the agent path, mountable in any app: the SDK's session manager
    starts on the first request, so the host app needs no lifespan (uvicorn's
    ``lifespan="off"`` included)."""

    def __init__(self, server: Server[Any], security: TransportSecuritySettings | None = None) -> None:
        self.manager = StreamableHTTPSessionManager(app=server, security_settings=security)
        self.inner = StreamableHTTPASGIApp(self.manager)
        self.ready: anyio.Event | None = None

    async def _run(self, ready: anyio.Event) -> None:
        async with self.manager.run():
            ready.set()
            await anyio.sleep_forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.ready is None:
            import asyncio

            self.ready = anyio.Event()
            task = asyncio.get_running_loop().create_task(self._run(self.ready))
            self.__dict__["_task"] = task  # keep a reference: the manager lives as long as the loop
        await self.ready.wait()
        await self.inner(scope, receive, send)


def transport_security(hosts: Sequence[str] = (), origins: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection of the streamable-HTTP endpoint (the MCP transport requires the
    ``Origin`` check): a request whose ``Host`` is not a loopback name (or one of ``hosts``) gets
    421, one whose ``Origin`` is foreign (not loopback, not one of ``origins``) gets 403. A request
    without ``Origin`` (any non-browser client) passes the origin check."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*LOOPBACK_HOSTS, *hosts],
        allowed_origins=[*LOOPBACK_ORIGINS, *origins],
    )


def mount(
    app_for_core: Callable[[], Any], tools_class: type[AgentTools], security: TransportSecuritySettings | None = None
) -> LazyMcpApp:
    """The agent path for the simulator app: its Core requests go back through the app itself."""
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=_Deferred(app_for_core)), base_url="http://sim.local")
    return LazyMcpApp(agent_server(tools_class(CoreHttp(client)), HttpSessions()), security or transport_security())


class _Deferred:
    """The app, looked up at the first request (the MCP route is built before the app exists)."""

    def __init__(self, get: Callable[[], Any]) -> None:
        self.get = get

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.get()(scope, receive, send)


# ----------------------------------------------------------------- stdio
def stdio_command(
    path: str = "agent",
    *,
    core_url: str | None = None,
    route: str | None = None,
    token: str | None = None,
    quirks: list[str] | tuple[str, ...] = (),
    job_seconds: float | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that serve the simulator's MCP path over stdio (the suite
    finds this through the ``knowledge_conformance.targets`` entry point, never by import)."""
    argv = [sys.executable, "-m", "simulator.cli", "mcp", "--path", path]
    if core_url:
        argv += ["--core-url", core_url]
    if route:
        argv += ["--route", route]
    if job_seconds is not None:
        argv += ["--job-seconds", str(job_seconds)]
    for quirk in quirks:
        argv += ["--quirk", quirk]
    env = {TOKEN_ENV: token} if token else {}
    if os.environ.get("PYTHONPATH"):  # the MCP client passes on only a few variables: the same code as this process
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return argv, env


def http_endpoint(base_url: str, route: str) -> str:
    """The streamable-HTTP URL of the Agent Session path for ``route`` on a simulator at ``base_url``
    (found by the suite through the ``knowledge_conformance.targets`` entry point)."""
    return base_url.rstrip("/") + MCP_PATH.format(route=route)
