"""Where the MCP paths under test are: ``--mcp-target``, else the ``[mcp]`` table, else the
bundled simulator's (over stdio and streamable HTTP, reached through the
``knowledge_conformance.targets`` entry points, never by import)."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Sequence
from typing import Any

from conformance.common.config import TargetConfig
from conformance.common.open import Target, factory
from conformance.mcp.records import Endpoint

JOB_SECONDS = 1.0  # how long the bundled simulator's governed jobs stay pending
TOKEN_ENV = "KC_AGENT_TOKEN"
"""The environment variable that hands a configured stdio server the Agent Session token of the
session it acts for (never on its command line, where process listings would show it)."""


def on_route(template: str, route: str) -> str:
    """An MCP URL or argument with ``{route}`` in it names the workspace of each session: a server
    scoped to its route (as every Agent API endpoint is) then gets each world's session on its own.
    Without ``{route}`` the one endpoint serves every route the run creates."""
    return template.replace("{route}", route)


def agent_endpoints(
    cfg: TargetConfig, target: Target, chosen: str | None, token: str, route: str
) -> dict[str, Endpoint]:
    """The Agent Session path for the identity ``token`` on ``route``, by transport."""
    if skipped(chosen):
        return {}
    if chosen:
        if chosen.startswith(("http://", "https://")):
            return {"http": Endpoint("http", url=on_route(chosen, route), token=str(cfg.mcp.get("token") or token))}
        return {"stdio": _stdio(shlex.split(chosen), route, token)}
    found: dict[str, Endpoint] = {}
    if cfg.mcp.get("url"):
        found["http"] = Endpoint("http", url=on_route(cfg.mcp["url"], route), token=str(cfg.mcp.get("token") or token))
    if cfg.mcp.get("command"):
        found["stdio"] = _stdio(cfg.mcp["command"], route, token)
    found = {k: v for k, v in found.items() if _wanted(cfg, k)}
    if found or not cfg.is_sim or target.app is None:
        return found
    base = target.loopback_url()
    argv, env = factory("sim-mcp-stdio")(
        "agent", core_url=base, route=route, token=token, quirks=list(target.settings.sim_quirks)
    )
    return {
        "http": Endpoint("http", url=factory("sim-mcp-http")(base, route), token=token),
        "stdio": Endpoint("stdio", argv=tuple(argv), env=tuple(sorted(env.items()))),
    }


def _stdio(argv: list[str], route: str, token: str) -> Endpoint:
    """A configured stdio server for one session: ``{route}`` in its arguments, the token in its environment."""
    return Endpoint("stdio", argv=tuple(on_route(a, route) for a in argv), env=((TOKEN_ENV, token),))


def _wanted(cfg: TargetConfig, transport: str) -> bool:
    """``[mcp].transport`` picks stdio or http when the table gives both (``both``, or unset: every one given)."""
    return cfg.mcp.get("transport") in (None, "both", transport)


def skipped(chosen: str | None) -> bool:
    """``--mcp-target none``: no MCP check at all, on either path."""
    return chosen is not None and chosen.strip().lower() == "none"


def job_endpoint(cfg: TargetConfig, target: Target, chosen: str | None = None) -> Endpoint | None:
    """The Fixed Client Token stdio server, when there is one to check."""
    if skipped(chosen):
        return None
    if cfg.mcp.get("jobs_command"):
        return Endpoint("stdio", argv=tuple(cfg.mcp["jobs_command"]), path="jobs")
    if not cfg.is_sim or target.app is None or cfg.mcp.get("command") or cfg.mcp.get("url"):
        return None
    argv, env = factory("sim-mcp-stdio")("jobs", quirks=list(target.settings.sim_quirks), job_seconds=JOB_SECONDS)
    return Endpoint("stdio", argv=tuple(argv), env=tuple(sorted(env.items())), path="jobs")


def planned_surfaces(cfg: TargetConfig, chosen: str | None) -> list[dict[str, Any]]:
    """The surfaces a run is set up to check, from the configuration alone (no server is
    started): the Core HTTP surface always, and each MCP transport with what serves it, or why
    none is checked. Mirrors ``agent_endpoints`` and ``job_endpoint``; the results model then
    says whether any check really ran on them."""
    http = {"surface": "http", "label": "Core HTTP", "checked": True, "detail": "the Core API"}
    if skipped(chosen):
        return [
            http,
            {"surface": "mcp", "label": "MCP", "checked": False, "detail": "MCP checks skipped: --mcp-target none"},
        ]
    agent: dict[str, str] = {}
    if chosen:
        agent["http" if chosen.startswith(("http://", "https://")) else "stdio"] = "--mcp-target"
    else:
        if cfg.mcp.get("url"):
            agent["http"] = "[mcp].url"
        if cfg.mcp.get("command"):
            agent["stdio"] = "[mcp].command"
        agent = {k: v for k, v in agent.items() if _wanted(cfg, k)}
        if not agent and cfg.is_sim:
            agent = {"http": "bundled simulator", "stdio": "bundled simulator"}
    jobs = (
        "[mcp].jobs_command"
        if cfg.mcp.get("jobs_command")
        else "bundled simulator"
        if cfg.is_sim and not (cfg.mcp.get("command") or cfg.mcp.get("url"))
        else ""
    )
    out = [http]
    if "stdio" in agent or jobs:
        paths = [f"Agent Session path ({agent['stdio']})"] if "stdio" in agent else []
        paths += [f"Fixed Client Token job path ({jobs})"] if jobs else []
        out.append({"surface": "mcp-stdio", "label": "MCP stdio", "checked": True, "detail": "; ".join(paths)})
    if "http" in agent:
        out.append(
            {
                "surface": "mcp-http",
                "label": "MCP streamable HTTP",
                "checked": True,
                "detail": f"Agent Session path ({agent['http']})",
            }
        )
    if len(out) == 1:
        out.append(
            {
                "surface": "mcp",
                "label": "MCP",
                "checked": False,
                "detail": "no MCP server to check: give --mcp-target or an [mcp] table",
            }
        )
    return out


def describe(endpoints: dict[str, Any]) -> str:
    return ", ".join(f"{k} ({v.describe()})" for k, v in sorted(endpoints.items())) or "none"


def command_problem(chosen: str | None, configured: Sequence[str] | None, jobs: Sequence[str] | None) -> str | None:
    """Why an MCP server command of the run cannot start at all (a usage error, exit 4, before any
    test: never one harness error per MCP test), or None."""
    commands: list[tuple[str, Sequence[str] | str]] = []
    if chosen and not skipped(chosen) and not chosen.startswith(("http://", "https://")):
        commands.append(("--mcp-target", chosen))
    elif not chosen:
        commands += [(f"[mcp].{key}", argv) for key, argv in (("command", configured), ("jobs_command", jobs)) if argv]
    for where, command in commands:
        try:
            argv = shlex.split(command) if isinstance(command, str) else list(command)
        except ValueError as exc:
            return f"{where} {command!r}: {exc} (the command is split as a POSIX shell line)"
        if not argv:
            return (
                f"{where}: the command is empty; give the command that starts the MCP server, an http(s) URL, or none"
            )
        if shutil.which(argv[0]) is None:
            return (
                f"{where}: {argv[0]!r} is not a program this machine can run (not found, or not executable); "
                "give the command that starts the MCP server, an http(s) URL, or none"
            )
    return None
