"""Target configuration: where the Core is, who the suite is, and the open wire details.

Defaults come from the project's ``wire-defaults.toml``; a ``--target-config``
TOML file overlays them table by table. Secrets may be given as
``{env = "NAME"}`` and are never printed or written to a report.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
from jsonschema.exceptions import ValidationError

from conformance.common.names import WireNames, check_names
from conformance.common.secrets import SECRETS
from conformance.common.transport import MAX_RESPONSE_BYTES
from conformance.common.untrusted import shown
from knowledge_schemas import load_registry, load_wire_defaults


def one_line(message: str) -> str:
    """``message`` safe for a terminal or a CI log, on one line: it may quote a file's content."""
    return shown(message).replace("\n", "\\n")


class ConfigError(ValueError):
    """The target configuration is unusable; the message says what to fix, on one line, with
    whatever it quotes from a file shown as escapes (a key may hold ESC or a newline)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


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
    raise ConfigError(f'{where}: expected a string or {{env = "NAME"}}')


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
    timeout_seconds: float = 30.0
    max_response_bytes: int = MAX_RESPONSE_BYTES  # [target]: the cap on a response body, after decoding
    mcp: dict[str, Any] = field(default_factory=dict)  # the [mcp] table: transport, command, url, token, jobs_command
    kit_route: str | None = None  # [target] kit_route: where the conformance corpus kit was ingested
    documents: dict[str, str] = field(
        default_factory=dict
    )  # [target.documents]: name -> query for a Core's own document
    workspaces: dict[str, IdentityConfig] = field(
        default_factory=dict
    )  # [target.workspaces]: state -> route and identity

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
    parts = urlsplit_checked(url)
    if parts is None:
        return "<not a valid URL>"
    if not parts.scheme:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def urlsplit_checked(url: str) -> SplitResult | None:
    """``urlsplit`` of a URL whose host and port parse, else None (``http://[::1`` raises in urlsplit)."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number in range raises here, not in urlsplit
    except ValueError:
        return None
    return parts


def check_http_url(url: str, what: str) -> None:
    """An http(s) URL with a host, that both the standard library and httpx can parse.

    The message never repeats a URL that does not parse: its credentials could not be told apart."""
    parts = urlsplit_checked(url)
    if parts is None or any(c.isspace() for c in url):
        raise ConfigError(f"{what}: not a valid URL (check for spaces, the brackets of an IPv6 host and the port)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} {redact_url(url)!r}: expected an http:// or https:// URL with a host")
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ConfigError(f"{what} {redact_url(url)!r}: not a valid URL ({type(exc).__name__})") from None


API_PATHS = ("capabilities", "search", "read", "turns")
"""The Agent API's paths of ``[wire.paths]``: what the suite appends to the base URL."""


def api_prefix(paths: dict[str, Any]) -> list[str]:
    """The path segments every Agent API path starts with before its route (``agent-api``, ``v1``,
    ``workspaces`` by default): the part of a request's path the suite adds itself."""
    heads = [str(paths[name]).split("{route}", 1)[0].strip("/").split("/") for name in API_PATHS if name in paths]
    common: list[str] = []
    for parts in zip(*heads, strict=False):
        if len(set(parts)) != 1 or not parts[0]:
            break
        common.append(parts[0])
    return common


def api_prefix_problem(url: str, paths: dict[str, Any]) -> str | None:
    """What to remove from a base URL that already carries the API prefix (``…/agent-api/v1``), or
    None: the suite appends the whole path itself, so such a URL doubles the prefix and every
    request misses (a wall of 404 failures that read as the Core's)."""
    prefix = api_prefix(paths)
    parts = urlsplit_checked(url)
    if not prefix or parts is None:
        return None
    segments = [s for s in parts.path.split("/") if s]
    for at, segment in enumerate(segments):
        tail = segments[at:]
        if segment == prefix[0] and all(a == b for a, b in zip(tail, prefix, strict=False)):
            base = urlunsplit((parts.scheme, parts.netloc, "/".join(["", *segments[:at]]), "", ""))
            return (
                f"the base URL already carries the API prefix; remove {'/' + '/'.join(tail)!r} from it "
                f"(give {redact_url(base)}): the suite adds {'/' + '/'.join(prefix)}/{{route}}/… itself"
            )
    return None


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


_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean (true or false)",
    "object": "a table",
    "array": "an array",
    "null": "nothing",
}


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return "a date or time"


def _key(path: list[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: ValidationError) -> str:
    """One schema violation in a TOML writer's words: the key, what it must be; never the value
    (a mistyped token is still a secret)."""
    path = list(error.absolute_path)
    key, kind = _key(path), str(error.validator)
    expected: Any = error.validator_value
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known))
        if not path:
            hint = [t for t in unknown if t in load_wire_defaults()]
            tip = f" (wire tables go under [wire]: write [wire.{hint[0]}])" if hint else ""
            return f"unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; known: {', '.join(f'[{t}]' for t in known)}{tip}"
        return f"[{key}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}"
    if kind == "enum" and "propertyNames" in error.schema_path:
        return f"[{key}.{error.instance}]: unknown name {error.instance!r}; known: {', '.join(map(str, expected))}"
    if kind == "type":
        types = [str(t) for t in (expected if isinstance(expected, list) else [expected])]
        return f"{key}: expected {' or '.join(_TYPE_WORDS.get(t, t) for t in types)}, got {_toml_type(error.instance)}"
    if kind in ("oneOf", "anyOf") and "description" in schema:
        return f"{key}: expected {schema['description']}, got {_toml_type(error.instance)}"
    if kind == "required":
        missing = [r for r in expected if isinstance(error.instance, dict) and r not in error.instance]
        return f"[{key}]: missing {', '.join(missing)}" if key else f"missing {', '.join(missing)}"
    words = {
        "minLength": "must not be empty",
        "minimum": f"must be at least {expected}",
        "maximum": f"must be at most {expected}",
        "exclusiveMinimum": f"must be greater than {expected}",
        "pattern": f"must match {expected}",
    }
    return f"{key}: {words.get(kind, error.message)}"


def validate_config_data(data: Any, where: str) -> None:
    """Check a parsed target configuration against schemas/target-config.schema.json; the first
    violation (by position in the file's tree) becomes the one-line ConfigError."""
    validator = load_registry().validator("target-config")
    errors = sorted(
        validator.iter_errors(data), key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path])
    )
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{where}: {_describe(errors[0])}{more}")


MAX_FILE_BYTES = 1 << 20
"""A configuration or waivers file is a few kilobytes; a bigger one is a mistake, not a setup."""
MAX_DEPTH = 8
"""Tables and arrays inside each other: the deepest real key is ``wire.names.limits.KEY``."""
MAX_STRING = 16384
"""Characters of one string value (a long token fits); the key names are shorter still."""
MAX_KEY = 256
MAX_INTEGER = 2**63 - 1


def read_toml(path: str, flag: str) -> dict[str, Any]:
    """A TOML file's tables, checked for size, depth and values that no setting can take (NaN, an
    infinity, a huge string), or a ConfigError naming the file and what is wrong with it."""
    data = _parse_toml(_read_text(path, flag), f"{flag} {path}")
    problem = _tree_problem(data)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")  # as the schema's messages: the file, then the key
    return data


def _read_text(path: str, flag: str) -> str:
    """The file as UTF-8 text, at most MAX_FILE_BYTES of it (read no further: it may be endless)."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(
            f"{flag} {path}: is a folder; give the TOML file in it (as `knowledge-sim serve --write-target FILE` writes one)"
        )
    if not file.is_file():
        raise ConfigError(f"{flag} {path}: no such file")
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{flag} {path}: larger than {MAX_FILE_BYTES >> 20} MiB, which no configuration is")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{flag} {path}: not UTF-8 text (byte {exc.start})") from None


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    """``tomllib.loads``, whose every failure is a ConfigError (deep nesting overflows its recursion,
    a number of thousands of digits is refused by ``int``)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid TOML (arrays or tables nested too deeply)") from None
    except ValueError:
        raise ConfigError(f"{where}: not valid TOML (a number too long to read)") from None


def _nodes(data: dict[str, Any]) -> Iterator[tuple[list[str | int], Any]]:
    """Every value of a parsed file with its key path, parents first, without recursion, and
    never below MAX_DEPTH + 1 levels (what lies deeper is refused by its parent's depth)."""
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if len(path) > MAX_DEPTH:
            continue
        if isinstance(value, dict):
            stack += [([*path, str(k)], v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            stack += [([*path, i], v) for i, v in reversed(list(enumerate(value)))]


def _tree_problem(data: dict[str, Any]) -> str | None:
    """The first value no setting can take, as ``key: what is wrong``, or None."""
    for path, value in _nodes(data):
        problem = _value_problem(path, value)
        if problem is not None:
            return f"{_shown_key(path)}: {problem}"
    return None


def _value_problem(path: list[str | int], value: Any) -> str | None:
    if len(path) > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} tables and arrays"
    if path and isinstance(path[-1], str) and len(path[-1]) > MAX_KEY:
        return f"a key of {len(path[-1])} characters (at most {MAX_KEY})"
    if isinstance(value, str) and len(value) > MAX_STRING:
        return f"a string of {len(value)} characters (at most {MAX_STRING})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, not {value}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        return "a number too large for any setting"
    return None


def _shown_key(path: list[str | int]) -> str:
    """A key path for a message: each part from the file, cut short and shown safe."""
    return _key([part if isinstance(part, int) else shown(part, 64) for part in path]) or "the file"


SECONDS_MAXIMA: dict[tuple[str, ...], float] = {
    ("target", "timeout_seconds"): 3600.0,
    ("tolerances", "clock_skew_seconds"): 60.0,
}
"""The upper bound of a configuration's numbers (the schema has the lower one): an hour is no
request's time, and a bigger number overflows the arithmetic of a deadline. A clock skew is held
to a minute: past it the 300-second expiry probes judge nothing (with 150 s a Core whose
references live 400 s passed REF-001, and near 300 s the expiry model had no interval left)."""


def _check_ranges(data: dict[str, Any], where: str) -> None:
    for keys, most in SECONDS_MAXIMA.items():
        value: Any = data
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float) and value > most:
            raise ConfigError(f"{where}: {'.'.join(keys)}: must be at most {most:g} seconds, not {value:g}")


OPTION_RANGES: dict[str, tuple[float, float, bool]] = {
    "--rate-limit": (0, 1_000_000, False),
    "--harness-timeout": (0, 3600, True),
    "--stateful-examples": (0, 100_000, False),
    "--stateful-steps": (0, 10_000, False),
    "--stateful-seed": (-MAX_INTEGER, MAX_INTEGER, False),
    "--sim-seed": (-MAX_INTEGER, MAX_INTEGER, False),
    "--users": (1, 100_000, False),
    "--spawn-rate": (0, 100_000, True),
    "--identities": (1, 100_000, False),
    "--concurrency": (1, 64, False),
}
"""Each numeric option's least value, greatest value, and whether the least is excluded. argparse
reads ``nan`` and ``inf`` as floats, and a number out of every sane range would surface as a
crash or an endless run after the tests started."""


def option_number_problem(name: str, value: object, flag: str | None = None) -> str | None:
    """Why option ``name`` (spelled ``flag`` on this command line) cannot take ``value``, or None."""
    if name not in OPTION_RANGES or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    least, most, exclusive = OPTION_RANGES[name]
    above = value > least if exclusive else value >= least
    if above and value <= most:  # NaN fails both comparisons
        return None
    wanted = (
        f"a positive number, at most {_number(most)}"
        if exclusive
        else f"a number from {_number(least)} to {_number(most)}"
    )
    return f"{flag or name} must be {wanted}, not {_number(value)}"


def _number(value: float) -> str:
    """A number for a message: a whole one in digits (cut when it has too many), others as ``%g``."""
    if isinstance(value, int):
        digits = str(value)
        return digits if len(digits) <= 24 else f"{digits[:12]}… ({len(digits)} digits)"
    return f"{value:g}"


WORKSPACE_STATES = ("disabled", "legacy", "unavailable")


def _kit_and_workspaces(cfg: TargetConfig, tgt: dict[str, Any], where: str) -> None:
    """``kit_route``, ``[target.documents]`` and ``[target.workspaces]`` (their types are checked by the schema)."""
    cfg.documents = {str(name): str(query) for name, query in tgt.get("documents", {}).items()}
    for state, table in tgt.get("workspaces", {}).items():
        if "identity" in table:
            named = cfg.identities.get(table["identity"])
            if named is None:
                raise ConfigError(
                    f"{where}: [target.workspaces.{state}].identity names [identities.{table['identity']}], "
                    "which is not configured"
                )
            token = named.token
            account, session = named.account, named.session
        else:
            found = _secret(table.get("token"), f"{where} [target.workspaces.{state}].token")
            if found is None:
                raise ConfigError(f"{where}: [target.workspaces.{state}] needs a token or an identity")
            token, account, session = found, "", ""
        cfg.workspaces[state] = IdentityConfig(state, token, str(table["route"]), account, session)
    kit = tgt.get("kit_route")
    if kit is not None:
        primary = cfg.identities.get("primary")
        route = primary.route if primary is not None else cfg.route
        if route and kit != route:
            raise ConfigError(
                f"{where}: [target] kit_route {kit!r} is searched with the primary identity, whose route is {route!r}"
            )
        cfg.kit_route = str(kit)


def load_config(path: str | None, *, target: str | None = None) -> TargetConfig:
    """Build the configuration from an optional TOML file and the --target value."""
    cfg = TargetConfig()
    source = "--target"
    if path:
        data = read_toml(path, "--target-config")
        where = str(path)
        validate_config_data(data, where)
        _check_ranges(data, where)
        if "wire" in data:
            _overlay(cfg.wire, data["wire"], where)
            try:
                check_names(cfg.wire["names"], f"{where} [wire]")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        tgt = data.get("target", {})
        url_given = "url" in tgt
        if isinstance(tgt.get("url"), str) and not tgt["url"].strip():
            raise ConfigError(
                f"{where}: [target] url is empty: give an http(s):// URL, or leave url out to test the bundled simulator"
            )
        cfg.target = tgt.get("url", cfg.target)
        source = f"{path} [target].url"
        cfg.route = tgt.get("route", "")
        cfg.probe_query = tgt.get("probe_query", cfg.probe_query)
        cfg.timeout_seconds = float(tgt.get("timeout_seconds", cfg.timeout_seconds))
        cfg.max_response_bytes = int(tgt.get("max_response_bytes", cfg.max_response_bytes))
        cfg.clock_skew_seconds = float(data.get("tolerances", {}).get("clock_skew_seconds", 0.0))
        control = data.get("control", {})
        cfg.control_url = control.get("url")
        SECRETS.add_url(cfg.control_url)
        cfg.control_token = _secret(control.get("token"), f"{where} [control].token")
        cfg.mcp = _mcp_table(data.get("mcp", {}), where)
        if (cfg.control_url is None) != (cfg.control_token is None):
            raise ConfigError(f"{where}: [control] needs both url and token (or neither)")
        if cfg.control_url is not None:
            check_http_url(cfg.control_url, f"{where} [control].url")
        for name, ident in data.get("identities", {}).items():
            token = _secret(ident.get("token"), f"{where} [identities.{name}].token")
            if token is None:
                raise ConfigError(f"{where}: [identities.{name}] needs a token")
            cfg.identities[name] = IdentityConfig(
                name, token, ident.get("route", cfg.route), ident.get("account", ""), ident.get("session", "")
            )
        _kit_and_workspaces(cfg, tgt, where)
        if cfg.identities and not url_given and not target:
            raise ConfigError(
                f"{where}: identities are configured but [target] has no url, so the run would test the bundled "
                "simulator with them; add url, or remove the identities to test the bundled simulator"
            )
    if target is not None and not target.strip():
        raise ConfigError("--target is empty (an unset variable?): give sim, sim+http or an http(s):// URL")
    if target:
        cfg.target, source = target, "--target"
        live = [
            what for what, given in (("identities", cfg.identities), ("a [control] table", cfg.control_url)) if given
        ]
        if cfg.is_sim and live:
            raise ConfigError(
                f"--target {target} is the bundled simulator, but {path} configures {' and '.join(live)} of a live "
                "Core, which the simulator does not know (every request would be refused): give that Core's URL, "
                "or leave out --target-config to test the bundled simulator"
            )
    SECRETS.add_url(cfg.target)
    if not cfg.is_sim:
        if not cfg.target.startswith(("http://", "https://")):
            raise ConfigError(f"{source} {redact_url(cfg.target)!r}: expected sim, sim+http or an http(s):// URL")
        check_http_url(cfg.target, source)
        prefix_problem = api_prefix_problem(cfg.target, cfg.wire["paths"])
        if prefix_problem is not None:
            raise ConfigError(f"{source} {redact_url(cfg.target)!r}: {prefix_problem}")
        if "primary" not in cfg.identities and cfg.control_url is None:
            raise ConfigError(
                "a live target needs [identities.primary] (token and route) or a [control] url to mint identities"
            )
        if "primary" in cfg.identities and not cfg.route:
            cfg.route = cfg.identities["primary"].route
    return cfg
