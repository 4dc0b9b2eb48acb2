"""Where the MCP paths under test are: ``--mcp-target``, else the ``[mcp]`` table, else the
bundled simulator's (over stdio and streamable HTTP, reached through the
``knowledge_conformance.targets`` entry points, never by import)."""

from __future__ import annotations

import shlex
from typing import Any

from conformance.config import TargetConfig
from conformance.mcp_client import Endpoint
from conformance.target import Target, _factory, serve_over_loopback

JOB_SECONDS = 1.0  # how long the bundled simulator's governed jobs stay pending


def _loopback(target: Target) -> str:
    """The bundled simulator over loopback: the target's own URL, or its app served beside it."""
    if not target.base_url.startswith("http://sim.local"):
        return target.base_url
    found = target.__dict__.get("_mcp_url")
    if found is None:
        found, stop = serve_over_loopback(target.app)
        target.__dict__["_mcp_url"] = found
        target._closers = (*target._closers, stop)
    return str(found)


def agent_endpoints(cfg: TargetConfig, target: Target, chosen: str | None, token: str, route: str) -> dict[str, Endpoint]:
    """The Agent Session path for the identity ``token`` on ``route``, by transport."""
    if chosen is not None and chosen.strip().lower() == "none":
        return {}
    if chosen:
        if chosen.startswith(("http://", "https://")):
            return {"http": Endpoint("http", url=chosen, token=str(cfg.mcp.get("token") or token))}
        return {"stdio": Endpoint("stdio", argv=tuple(shlex.split(chosen)))}
    found: dict[str, Endpoint] = {}
    if cfg.mcp.get("url"):
        found["http"] = Endpoint("http", url=cfg.mcp["url"], token=str(cfg.mcp.get("token") or token))
    if cfg.mcp.get("command"):
        found["stdio"] = Endpoint("stdio", argv=tuple(cfg.mcp["command"]))
    if found or not cfg.is_sim or target.app is None:
        return found
    base = _loopback(target)
    argv, env = _factory("sim-mcp-stdio")("agent", core_url=base, route=route, token=token, quirks=list(cfg.sim_quirks))
    return {"http": Endpoint("http", url=_factory("sim-mcp-http")(base, route), token=token),
            "stdio": Endpoint("stdio", argv=tuple(argv), env=tuple(sorted(env.items())))}


def job_endpoint(cfg: TargetConfig, target: Target) -> Endpoint | None:
    """The Fixed Client Token stdio server, when there is one to check."""
    if cfg.mcp.get("jobs_command"):
        return Endpoint("stdio", argv=tuple(cfg.mcp["jobs_command"]))
    if not cfg.is_sim or target.app is None or cfg.mcp.get("command") or cfg.mcp.get("url"):
        return None
    argv, env = _factory("sim-mcp-stdio")("jobs", quirks=list(cfg.sim_quirks), job_seconds=JOB_SECONDS)
    return Endpoint("stdio", argv=tuple(argv), env=tuple(sorted(env.items())))


def describe(endpoints: dict[str, Any]) -> str:
    return ", ".join(f"{k} ({v.describe()})" for k, v in sorted(endpoints.items())) or "none"
