"""The hostile scenarios as data: which route the proxy answers with what, how the suite is run
against it, and what its outputs must hold.

Classes: output injection (HTML, Markdown, CI commands, terminal escapes, XML) and echoed
secrets; from the OWASP API Security Top 10, API4 (unrestricted resource consumption: trickle,
slow headers, decompression bomb, huge and endless bodies, huge headers) and API8 (security
misconfiguration: a gateway's HTML error page, redirects to another host); from GitHub's Actions
hardening guide, untrusted input reaching logs as workflow commands; and malformed protocol
(deep JSON, duplicate keys, wrongly typed members). Each run selects only the few suite tests that
reach the attacked route, so the whole kit stays cheap.

``pending`` names, per check, the fix a scenario still waits for: that check is a strict xfail,
which turns into a failure (and must be removed) once the fix lands."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tests.hostile import payloads

MIB = 1024 * 1024

ROUTES: Mapping[str, tuple[str, str]] = {
    "read": ("POST", r"/knowledge/read$"),
    "search": ("POST", r"/knowledge/search$"),
    "capabilities": ("GET", r"/knowledge/capabilities$"),
    "turns": ("POST", r"/turns$"),
    "root": ("GET", r"^/$"),
}
"""Route name: method and a pattern of the request path (query excluded)."""

READ_TEST = ("-k", "test_default_pages_fit_16384_bytes")
"""One test whose first read reaches the attacked answer, and fails on it."""
READ_TESTS = ("-k", "test_requested_max_bytes_bounds_every_page and not 5001")
"""Three tests (4096, 16384, 32768), each failing on its first read, in that order: one answer
each. The reports show three failures of a rule, sorted by test ID (16384 first, whole in
report.md's fence), so a scenario rotates three answers and each reaches every output."""
CAPABILITIES_TEST = ("-k", "test_capabilities_advertise_the_protocol")
"""One test that reads the capabilities once and checks every member."""


@dataclass(frozen=True)
class Answer:
    """What the proxy answers on the attacked route. ``kind`` picks a writer in ``server``:
    ``static`` (status, headers, and each attacked request the next of ``bodies``: content type
    and text), ``echo`` (every spelling of every secret), ``trickle``
    (headers at once, then the body one byte every ``every`` s), ``slow_headers`` (the head one
    byte every ``every`` s), ``gzip_bomb`` (``size`` compressed bytes), ``big_body`` (``size``
    bytes), ``endless`` (chunks until the client leaves), ``huge_header`` (one of ``size`` bytes),
    ``deep_json`` (``size`` levels), ``rewrite`` (the simulator's answer through ``transform``),
    ``redirect`` (``status`` to another host, the request's token in the query)."""

    kind: str
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: str = ""
    bodies: tuple[tuple[str, str], ...] = ()
    every: float = 0.0
    size: int = 0
    transform: str = ""

    def describe(self) -> str:
        """One short phrase for the results table."""
        if self.kind in ("trickle", "slow_headers"):
            return f"{self.kind.replace('_', ' ')} 1 byte / {self.every:g} s"
        if self.size:
            return f"{self.kind.replace('_', ' ')} {_size(self.size)}"
        return f"{self.kind} {self.transform or self.status}".strip()


def _size(size: int) -> str:
    return f"{size / MIB:g} MiB" if size >= MIB else f"{size:,}"


@dataclass(frozen=True)
class Scenario:
    """One hostile server and what a suite run against it must leave. ``exits`` are the
    acceptable exit codes (the verdict the attack must produce); ``wall_seconds`` the time the
    run must end within; ``rss_mib`` the suite's peak resident memory bound; ``reports`` whether
    the run must write its reports (a stop in pre-flight writes none); ``reaches`` the tags
    (``payloads.tagged``) that must reach every text output, or the checks prove nothing."""

    name: str
    klass: str
    route: str
    answer: Answer
    exits: frozenset[int]
    select: tuple[str, ...] = READ_TEST
    timeout_seconds: float = 15.0
    """The run's ``[target] timeout_seconds``. It bounds the control requests too, which this server
    forwards to the simulator: the large corpus upload took over 3 s on a loaded machine, and the
    attack was never reached. The scenarios that are about time set their own, short."""
    wall_seconds: float = 60.0
    rss_mib: int = 512
    reports: bool = True
    reaches: tuple[str, ...] = ()
    pending: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def error_body(message: str) -> str:
    """A JSON error envelope carrying ``message`` (first, so a cut display still shows it)."""
    return json.dumps({"message": message, "error": "invalid_request"})


def _lone_surrogate(body: str) -> str:
    """The body with one more member whose value is a lone surrogate (a JSON escape)."""
    return body[:-1] + f', "detail": "{payloads.LONE_SURROGATE} {payloads.MARKER}"}}'


def _trickle_bound(timeout: float) -> float:
    """The issue's bound for a trickling server: 2 x timeout_seconds + 30 s."""
    return 2 * timeout + 30


def text(tag: str) -> tuple[str, str]:
    """A payload group as a raw text/plain body: nothing escaped for the suite to hide behind."""
    return "text/plain; charset=utf-8", payloads.tagged(tag, payloads.GROUPS[tag])


def in_json(tag: str) -> tuple[str, str]:
    """A payload group as a JSON refusal's message, with a lone surrogate beside it."""
    return "application/json", _lone_surrogate(error_body(payloads.tagged(tag, payloads.GROUPS[tag])))


GATEWAY_PAGE = (
    f"<!doctype html><html><body><h1>{payloads.MARKER}:gateway 502 Bad Gateway</h1>"
    + "".join(payloads.HTML[1:])
    + "</body></html>"
)
HOSTILE_HEADERS = (("X-Kc-Hostile", payloads.HTML[0]), ("X-Kc-Ci", "::error::kc-hostile-header"))

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("clean", "baseline (no attack)", "read", Answer("forward"), frozenset({0, 6})),
    Scenario(
        "html-in-read-refusals",
        "injection: HTML/script in element, attribute, raw-text and srcdoc contexts",
        "read",
        Answer("static", 400, HOSTILE_HEADERS, bodies=(text("img-script"), text("svg-details"), in_json("iframe"))),
        frozenset({1}),
        select=READ_TESTS,
        reaches=("img-script", "svg-details", "iframe"),
    ),
    Scenario(
        "markdown-in-read-refusals",
        "injection: Markdown breakout of fences and code spans (mention, link, image, HTML, table)",
        "read",
        Answer("static", 400, bodies=(text("inline"), text("fence"), in_json("fence"))),
        frozenset({1}),
        select=READ_TESTS,
        reaches=("fence", "inline"),
    ),
    Scenario(
        "controls-in-read-refusals",
        "injection: CI commands, terminal escapes, invalid XML (untrusted input in logs)",
        "read",
        Answer("static", 400, HOSTILE_HEADERS, bodies=(text("ci-github"), text("terminal-xml"), in_json("ci-others"))),
        frozenset({1}),
        select=READ_TESTS,
        reaches=("ci-github", "terminal-xml", "ci-others"),
    ),
    Scenario(
        "payloads-as-wrong-types-in-200",
        "malformed protocol + injection: a 200 capabilities answer, members of wrong types holding payloads",
        "capabilities",
        Answer("rewrite", transform="payload_types"),
        frozenset({1}),
        select=CAPABILITIES_TEST,
    ),
    Scenario(
        "html-error-page",
        "API8 security misconfiguration: a gateway's HTML error page with script",
        "read",
        Answer("static", 502, bodies=(("text/html; charset=utf-8", GATEWAY_PAGE),)),
        frozenset({1}),
        reaches=("gateway",),
    ),
    Scenario(
        "secrets-echoed",
        "secrets: every spelling of every token echoed",
        "read",
        Answer("echo", 400),
        frozenset({1}),
        reaches=("echo",),
    ),
    Scenario(
        "secrets-as-wrong-types-in-200",
        "secrets: every spelling as the members of a 200 capabilities answer (quoted by schema checks)",
        "capabilities",
        Answer("rewrite", transform="secret_types"),
        frozenset({1}),
        select=CAPABILITIES_TEST,
    ),
    Scenario(
        "redirect-to-another-host",
        "API8: redirects (301/302/303/307/308) to another host, token in the query",
        "read",
        Answer("redirect", 307),
        frozenset({1}),
    ),
    Scenario(
        "trickle-read",
        "API4 time: a read body trickles",
        "read",
        Answer("trickle", 200, (("Content-Type", "application/json"),), error_body("x" * 4096), every=2.0),
        frozenset({7}),
        timeout_seconds=3.0,
        wall_seconds=_trickle_bound(3.0),
    ),
    Scenario(
        "slow-headers-preflight",
        "API4 time: the pre-flight's GET / sends its head slowly",
        "root",
        Answer("slow_headers", 200, (("Content-Type", "application/json"),), "{}", every=2.0),
        frozenset({7}),
        timeout_seconds=3.0,
        wall_seconds=_trickle_bound(3.0),
        reports=False,
    ),
    Scenario(
        "gzip-bomb",
        "API4 memory: a 2 MiB gzip bomb (2 GiB inflated)",
        "read",
        Answer("gzip_bomb", size=2 * MIB),
        frozenset({1, 7}),
    ),
    Scenario(
        "body-200mib", "API4 memory: a 200 MiB read body", "read", Answer("big_body", size=200 * MIB), frozenset({1, 7})
    ),
    Scenario("endless-chunked", "API4 memory: an endless chunked body", "read", Answer("endless"), frozenset({1, 7})),
    Scenario(
        "header-10mib",
        "malformed protocol: a 10 MiB header",
        "read",
        Answer("huge_header", size=10 * MIB),
        frozenset({1}),
    ),
    Scenario(
        "deep-json",
        "malformed protocol: 100k-deep JSON in a 200 read",
        "read",
        Answer("deep_json", size=100_000),
        frozenset({1}),
    ),
    Scenario(
        "duplicate-keys",
        "malformed protocol: every member of a 200 capabilities answer twice (a wrong value first)",
        "capabilities",
        Answer("rewrite", transform="duplicate_keys"),
        frozenset({1}),
        select=CAPABILITIES_TEST,
    ),
    Scenario(
        "wrong-types-in-200",
        "malformed protocol: a 200 read whose members have the wrong types",
        "read",
        Answer("rewrite", transform="wrong_types"),
        frozenset({1}),
    ),
)

BY_NAME: Mapping[str, Scenario] = MappingProxyType({s.name: s for s in SCENARIOS})
