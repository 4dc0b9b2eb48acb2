"""Target configuration: where the Core is, who the suite is, and the open wire details.

Defaults come from the project's ``wire-defaults.toml``; a ``--target-config``
TOML file overlays them table by table. Secrets may be given as
``{env = "NAME"}`` and are never printed or written to a report.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.names import WireNames, check_names
from conformance.secrets import SECRETS
from knowledge_schemas import load_wire_defaults


class ConfigError(ValueError):
    """The target configuration is unusable; the message says what to fix."""


class Secret(str):
    """A string that never shows itself in a repr, a log or a report."""

    def __repr__(self) -> str:
        return "Secret('***')"


def _secret(value: Any, where: str) -> Secret | None:
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"env"}:
        found = os.environ.get(str(value["env"]))
        if not found:
            raise ConfigError(f"{where}: environment variable {value['env']} is not set")
        SECRETS.add(found)
        return Secret(found)
    if isinstance(value, str) and value:
        SECRETS.add(value)
        return Secret(value)
    raise ConfigError(f"{where}: expected a string or {{env = \"NAME\"}}")


@dataclass(frozen=True)
class IdentityConfig:
    """A token the suite may use on a live Core, and what it stands for."""

    name: str
    token: Secret
    route: str
    account: str = ""
    session: str = ""


@dataclass
class TargetConfig:
    target: str = "sim"
    wire: dict[str, Any] = field(default_factory=load_wire_defaults)
    route: str = ""
    identities: dict[str, IdentityConfig] = field(default_factory=dict)
    control_url: str | None = None
    control_token: Secret | None = None
    probe_query: str = "knowledge"
    clock_skew_seconds: float = 0.0
    realtime: bool = False
    rate_limit: float = 0.0
    timeout_seconds: float = 30.0
    sim_quirks: tuple[str, ...] = ()
    sim_seed: int = 0
    run_id: str = "local"
    worker: str = ""  # the pytest-xdist worker ID, "" in a serial run
    mcp: dict[str, Any] = field(default_factory=dict)  # the [mcp] table: transport, command, url, token, jobs_command

    @property
    def namespace(self) -> str:
        """Prefix of every name this process creates on the target (workspaces, turn identities)."""
        return f"{self.run_id}-{self.worker}" if self.worker else self.run_id

    @property
    def is_sim(self) -> bool:
        return self.target in ("sim", "sim+http")

    def path(self, name: str, route: str) -> str:
        return str(self.wire["paths"][name]).replace("{route}", route)

    def code(self, name: str) -> str:
        return str(self.wire["codes"][name])

    def status(self, name: str) -> int:
        return int(self.wire["statuses"][name])

    @property
    def strict_codes(self) -> bool:
        return bool(self.wire["codes"].get("strict", False))

    @property
    def names(self) -> WireNames:
        """The member names of capabilities, limits and turn context on this Core's wire."""
        return WireNames(self.wire["names"])


def redact_url(url: str) -> str:
    """A URL without user-info credentials or query string (tokens sometimes ride there)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.scheme:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _overlay(base: dict[str, Any], extra: dict[str, Any], where: str, prefix: str = "") -> None:
    """Overlay ``extra`` on the defaults, table by table and key by key (nested tables such
    as ``[names.limits]`` key by key too); an unknown table or key is an error."""
    for table, values in extra.items():
        name = f"{prefix}{table}"
        if table not in base:
            raise ConfigError(f"{where}: unknown table [{name}]; known: {', '.join(sorted(base))}")
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: [{name}] must be a table")
        unknown = set(values) - set(base[table])
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} in [{name}]; known: {sorted(base[table])}")
        for key, value in values.items():
            if isinstance(base[table][key], dict):
                _overlay(base[table], {key: value}, where, f"{name}.")
            else:
                base[table][key] = value


MCP_KEYS = ("transport", "command", "url", "token", "jobs_command")


def _mcp_table(table: Any, where: str) -> dict[str, Any]:
    """The [mcp] table: the Agent Session MCP server as a command (stdio) or a URL (streamable
    HTTP, with its bearer token), and the Fixed Client Token stdio server's command."""
    if not isinstance(table, dict) or set(table) - set(MCP_KEYS):
        raise ConfigError(f"{where}: [mcp] takes only {', '.join(MCP_KEYS)}")
    out: dict[str, Any] = {}
    for key in ("command", "jobs_command"):
        if key in table:
            value = table[key]
            if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{where}: [mcp].{key} must be a non-empty list of strings (the argv)")
            out[key] = list(value)
    if "url" in table:
        if not str(table["url"]).startswith(("http://", "https://")):
            raise ConfigError(f"{where}: [mcp].url must be an http(s):// URL")
        out["url"] = str(table["url"])
        SECRETS.add_url(out["url"])
    transport = table.get("transport")  # unset: every path given is checked
    if transport not in (None, "stdio", "http", "both"):
        raise ConfigError(f"{where}: [mcp].transport must be stdio, http or both")
    out["transport"] = transport
    out["token"] = _secret(table.get("token"), f"{where} [mcp].token")
    return out


def load_config(path: str | None, *, target: str | None = None) -> TargetConfig:
    """Build the configuration from an optional TOML file and the --target value."""
    cfg = TargetConfig()
    if path:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"--target-config {path}: no such file")
        try:
            data = tomllib.loads(file.read_text("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        where = str(file)
        if "wire" in data:
            _overlay(cfg.wire, data["wire"], where)
            try:
                check_names(cfg.wire["names"], f"{where} [wire]")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        tgt = data.get("target", {})
        cfg.target = tgt.get("url", cfg.target)
        cfg.route = tgt.get("route", "")
        cfg.probe_query = tgt.get("probe_query", cfg.probe_query)
        cfg.timeout_seconds = float(tgt.get("timeout_seconds", cfg.timeout_seconds))
        cfg.clock_skew_seconds = float(data.get("tolerances", {}).get("clock_skew_seconds", 0.0))
        control = data.get("control", {})
        cfg.control_url = control.get("url")
        SECRETS.add_url(cfg.control_url)
        cfg.control_token = _secret(control.get("token"), f"{where} [control].token")
        cfg.mcp = _mcp_table(data.get("mcp", {}), where)
        for name, ident in data.get("identities", {}).items():
            token = _secret(ident.get("token"), f"{where} [identities.{name}].token")
            if token is None:
                raise ConfigError(f"{where}: [identities.{name}] needs a token")
            cfg.identities[name] = IdentityConfig(name, token, ident.get("route", cfg.route), ident.get("account", ""), ident.get("session", ""))
    if target:
        cfg.target = target
    SECRETS.add_url(cfg.target)
    if not cfg.is_sim:
        if not cfg.target.startswith(("http://", "https://")):
            raise ConfigError(f"--target {redact_url(cfg.target)!r}: expected sim, sim+http or an http(s):// URL")
        if "primary" not in cfg.identities and cfg.control_url is None:
            raise ConfigError("a live target needs [identities.primary] (token and route) or a [control] url to mint identities")
        if "primary" in cfg.identities and not cfg.route:
            cfg.route = cfg.identities["primary"].route
    return cfg
