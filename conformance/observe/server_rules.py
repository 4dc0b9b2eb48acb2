"""The Core's rules one exchange shows by itself, judged with the suite's own checks.

Each function reads one observed exchange and passes (its checks record what held) or raises the
violation of the rule it broke, exactly as the active suite's checks do, so a deviation gets the
same requirement ID whether the suite provoked it or a real client met it."""

from __future__ import annotations

from typing import Any

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.common.rules import Rule, expect
from conformance.observe.observed import Observed
from conformance.server import checks
from conformance.server import rules as server

LIMIT_BOUNDS = {
    "search_max_hints": C.SEARCH_MAX_HINTS,
    "search_max_bytes": C.SEARCH_MAX_BYTES,
    "reference_max_bytes": C.REFERENCE_MAX_BYTES,
    "read_chain_max_bytes": C.READ_CHAIN_MAX_BYTES,
    "reference_ttl_seconds": C.REFERENCE_TTL_SECONDS,
}
LIMIT_VALUES = {
    "read_default_max_bytes": C.READ_DEFAULT_MAX_BYTES,
    "read_min_max_bytes": C.READ_MIN_MAX_BYTES,
    "read_max_max_bytes": C.READ_MAX_MAX_BYTES,
}
UNSUPPORTED = frozenset({404, 405, 501})


def unsupported(cfg: TargetConfig) -> frozenset[int]:
    return frozenset(int(s) for s in cfg.wire["legacy"]["unsupported_statuses"]) or UNSUPPORTED


def cache_control(ob: Observed) -> None:
    """Every Agent API answer says ``Cache-Control: no-store`` (WIRE-003, a SHOULD)."""
    if ob.status == 0 or not ob.seen.headers_known:
        return
    value = ob.seen.header("cache-control") or ""
    expect(
        "no-store" in value.lower(),
        server.WIRE_003,
        f"HTTP {ob.status} answer to {ob.operation} carries Cache-Control {value!r}, not no-store",
    )


def error_answer(ob: Observed, cfg: TargetConfig) -> None:
    """A refusal is the error envelope with a 4xx; no request of the contract gets a 500 (a crash).
    An old endpoint's status (404/405/501) is judged by the sequence rules, not its body."""
    if ob.status == 500:
        server.WIRE_001.fail(f"{ob.operation} answered HTTP 500: {checks.describe(ob.answer())}")
    if 400 <= ob.status < 500 and ob.status not in unsupported(cfg) and ob.readable:
        body = ob.answer()
        if ob.operation == "read" and C.is_reference_error_code(body.get("error") if isinstance(body, dict) else None):
            return  # a reference error's body is judged by its own rules (checks.reference_error), as the suite does
        checks.error_envelope(ob.response(), server.WIRE_001, strict=cfg.strict_codes)


def capabilities(ob: Observed, cfg: TargetConfig) -> dict[str, Any] | None:
    """A 200 capabilities answer advertises the protocol on the asked route (the suite's
    test_capabilities_advertise_the_protocol, on an answer a client got); one to a request
    without a credential breaks CAP-007."""
    if ob.seen.credential is None and ob.status == 200:
        server.CAP_007.fail("capabilities answered 200 to a request without a credential")
    if ob.seen.credential is None and ob.status in (401, 403):
        server.CAP_007.held()
    if ob.status != 200 or not ob.readable:
        return None
    names = cfg.names
    member, limit_name = names.capabilities, names.limits
    body = checks.ok(ob.response(), server.CAP_001, "capabilities")
    strings = set(C.strings_in(body))
    expect(
        C.CAPABILITIES_SCHEMA in strings and C.KNOWLEDGE_SCHEMA in strings,
        server.CAP_002,
        f"capabilities must name {C.CAPABILITIES_SCHEMA} and {C.KNOWLEDGE_SCHEMA}: {checks.describe(body)}",
    )
    route = body.get(member["route"]) if isinstance(body, dict) else None
    expect(route == ob.route, server.CAP_003, f"{member['route']} {route!r}, asked for {ob.route!r}")
    modes = body.get(member["delivery_modes"])
    expect(
        isinstance(modes, list) and sorted(modes) == ["inline", "on_demand"],
        server.CAP_004,
        f"delivery modes {modes!r}",
    )
    limits = body.get(member["limits"])
    expect(isinstance(limits, dict), server.CAP_005, f"capabilities carry no {member['limits']} object")
    for canonical, bound in LIMIT_BOUNDS.items():
        value = limits.get(limit_name[canonical])
        expect(
            isinstance(value, int) and 0 < value <= bound,
            server.CAP_005,
            f"limit {limit_name[canonical]} = {value!r}, contract bound is {bound}",
        )
    for canonical, exact in LIMIT_VALUES.items():
        value = limits.get(limit_name[canonical])
        expect(value == exact, server.CAP_005, f"limit {limit_name[canonical]} = {value!r}, contract value is {exact}")
    checks.schema("capabilities-response", body, names=names)
    return dict(body)


def search(ob: Observed) -> dict[str, Any] | None:
    """A 200 search answer: hints, status, trust, reference sizes and the 4096-byte bound."""
    if ob.status != 200:
        return None
    if not ob.readable:
        size = ob.seen.response.size
        expect(size < 0 or size <= C.SEARCH_MAX_BYTES, server.SRCH_008, f"search JSON is {size} bytes, over 4096")
        return None
    return checks.search_response(ob.response())


def page_bound(ob: Observed) -> tuple[int | None, Rule]:
    """The bound a page is held to and the rule it falls under: the default (READ-004), an asked
    max_bytes in range (READ-005), or one outside the range clamped into it (READ-006)."""
    asked = ob.field("max_bytes")
    if not isinstance(asked, int) or isinstance(asked, bool):
        return None, server.READ_004
    if C.READ_MIN_MAX_BYTES <= asked <= C.READ_MAX_MAX_BYTES:
        return asked, server.READ_005
    return min(max(asked, C.READ_MIN_MAX_BYTES), C.READ_MAX_MAX_BYTES), server.READ_006


def oversize_tokens(ob: Observed) -> None:
    """A reference or cursor over 4096 bytes is refused (READ-008)."""
    for name in ("ref", "cursor"):
        value = ob.field(name)
        if isinstance(value, str) and C.utf8_size(value) > C.REFERENCE_MAX_BYTES:
            expect(
                ob.status != 200,
                server.READ_008,
                f"a {name} of {C.utf8_size(value)} bytes (over {C.REFERENCE_MAX_BYTES}) was accepted",
            )


def read_refusal(ob: Observed, cfg: TargetConfig) -> None:
    """A max_bytes out of range is refused with the envelope or clamped, never a crash (READ-006);
    one in range is never refused for its value (READ-005)."""
    asked = ob.field("max_bytes")
    if not isinstance(asked, int) or isinstance(asked, bool) or ob.status == 200:
        return
    inside = C.READ_MIN_MAX_BYTES <= asked <= C.READ_MAX_MAX_BYTES
    if not inside:
        expect(ob.status < 500, server.READ_006, f"max_bytes {asked} answered HTTP {ob.status}")
        return
    body = ob.answer()
    code = body.get("error") if isinstance(body, dict) else None
    if ob.status == 400 and code == cfg.code("invalid_request"):
        server.READ_005.fail(f"max_bytes {asked}, inside 4096..32768, was refused: {checks.describe(body)}")


def page(ob: Observed, cfg: TargetConfig) -> dict[str, Any] | None:
    """A 200 page: fields, trust, its byte bound, honest flags, whole characters (checks.page)."""
    if ob.status != 200:
        return None
    limit, rule = page_bound(ob)
    if not ob.readable:
        size, bound = ob.seen.response.size, limit or C.READ_DEFAULT_MAX_BYTES
        expect(size < 0 or size <= bound, rule, f"read JSON is {size} bytes, over {bound}")
        return None
    ref = ob.field("ref")
    if not isinstance(ref, str):
        return None
    return checks.page(ob.response(), ref=ref, max_bytes=limit, requirement_bound=rule, strict=cfg.strict_codes)
