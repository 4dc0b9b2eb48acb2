"""Capabilities, negotiation, authentication and route isolation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.common import contract as C
from conformance.common.outcomes import NotVerified
from conformance.common.rules import Rule, expect
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import Stated, World

R = pytest.mark.requirement


@R(server.CAP_001, server.CAP_002, server.CAP_003, server.CAP_004, server.CAP_005, server.WIRE_002)
def test_capabilities_advertise_the_protocol(world: World) -> None:
    """Members are looked up by their configured names ([wire.names.capabilities] / [wire.names.limits])."""
    names = world.cfg.names
    member, limit_name = names.capabilities, names.limits
    body = checks.ok(world.core.capabilities(world.primary.token, world.route), server.CAP_001, "capabilities")
    strings = set(C.strings_in(body))
    expect(
        C.CAPABILITIES_SCHEMA in strings and C.KNOWLEDGE_SCHEMA in strings,
        server.CAP_002,
        f"capabilities must name {C.CAPABILITIES_SCHEMA} and {C.KNOWLEDGE_SCHEMA}: {checks.describe(body)}",
    )
    route = body.get(member["route"])
    expect(route == world.route, server.CAP_003, f"{member['route']} {route!r}, asked for {world.route!r}")
    modes = body.get(member["delivery_modes"])
    expect(
        isinstance(modes, list) and sorted(modes) == ["inline", "on_demand"],
        server.CAP_004,
        f"{member['delivery_modes']} {modes!r}",
    )
    limits = body.get(member["limits"])
    expect(
        isinstance(limits, dict),
        server.CAP_005,
        f"capabilities carry no {member['limits']} object: {checks.describe(body)}",
    )
    bounds = {
        "search_max_hints": C.SEARCH_MAX_HINTS,
        "search_max_bytes": C.SEARCH_MAX_BYTES,
        "reference_max_bytes": C.REFERENCE_MAX_BYTES,
        "read_chain_max_bytes": C.READ_CHAIN_MAX_BYTES,
        "reference_ttl_seconds": C.REFERENCE_TTL_SECONDS,
    }
    for canonical, bound in bounds.items():
        name = limit_name[canonical]
        value = limits.get(name)
        expect(
            isinstance(value, int) and 0 < value <= bound,
            server.CAP_005,
            f"limit {name} = {value!r}, contract bound is {bound}",
        )
    exact = {
        "read_default_max_bytes": C.READ_DEFAULT_MAX_BYTES,
        "read_min_max_bytes": C.READ_MIN_MAX_BYTES,
        "read_max_max_bytes": C.READ_MAX_MAX_BYTES,
    }
    for canonical, value in exact.items():
        name = limit_name[canonical]
        expect(
            limits.get(name) == value, server.CAP_005, f"limit {name} = {limits.get(name)!r}, contract value is {value}"
        )
    checks.schema("capabilities-response", body, names=names)


@R(server.CAP_001, server.CAP_003)
def test_every_identity_gets_the_capabilities_of_its_own_route(world: World) -> None:
    """Each identity of the run (their routes differ in name and sort order) negotiates on its
    own route: 200 and that route, not only the primary's."""
    member = world.cfg.names.capabilities["route"]
    routes = sorted({who.route: who for who in world.others.values() if who.route != world.route}.items())
    if not routes:
        pytest.skip("not verified: every identity of the run shares the primary's route")
    for route, who in routes:
        body = checks.ok(world.core.capabilities(who.token, route), server.CAP_001, f"capabilities on route {route!r}")
        expect(body.get(member) == route, server.CAP_003, f"{member} {body.get(member)!r}, asked for {route!r}")


@R(server.CAP_007, server.AUTH_001)
@pytest.mark.parametrize("token", [None, "bha_" + "0" * 44], ids=["no-token", "unknown-token"])
def test_capabilities_need_a_valid_token(world: World, token: str | None) -> None:
    _refused_for_its_token(
        world, world.core.capabilities(token, world.route), server.CAP_007, "capabilities without a valid token"
    )


@R(server.AUTH_001)
@pytest.mark.parametrize("token", [None, "bha_" + "0" * 44], ids=["no-token", "unknown-token"])
@pytest.mark.parametrize("operation", ["search", "read"])
def test_knowledge_calls_need_a_valid_token(world: World, operation: str, token: str | None) -> None:
    """Without a token, and with one no identity holds (a Core that checks only that a token is
    there lets the second through), with the run and reference of a real caller."""
    run_id = world.start_run()
    body = (
        {"query": "binding", "run_id": run_id}
        if operation == "search"
        else {"ref": world.ref_for(run_id), "run_id": run_id}
    )
    what = f"{operation} {'without a token' if token is None else 'with a token no identity holds'}"
    _refused_for_its_token(world, getattr(world.core, operation)(token, world.route, body), server.AUTH_001, what)


def _refused_for_its_token(world: World, response: Any, requirement: Rule, what: str) -> None:
    """A missing or unknown credential is refused. The seed says "authenticated" and that an
    authorization failure is not an empty result, not which status: 401 or 403 (an error
    envelope) both pass; strict demands the configured ``[statuses] unauthorized`` (CHOICES.md)."""
    strict = world.cfg.strict_codes
    configured = world.cfg.status("unauthorized")
    allowed = sorted({configured} if strict else {401, 403, configured})
    expect(
        response.status_code in allowed,
        requirement,
        f"{'strict: ' if strict else ''}{what} answered HTTP {response.status_code}, "
        f"expected {' or '.join(map(str, allowed))}",
    )
    checks.error_envelope(response, server.AUTH_001, strict=strict)


@R(server.AUTH_002)
@pytest.mark.parametrize("direction", ["theirs_here", "mine_there"])
def test_a_token_of_another_workspace_gets_no_data(world: World, direction: str) -> None:
    """Both ways round: a Core that compares a token's workspace with the route by order, not
    equality, lets one of them through."""
    stranger = world.need("other_route")
    who, owner = (stranger, world.primary) if direction == "theirs_here" else (world.primary, stranger)
    route = owner.route
    for response in (
        world.core.capabilities(who.token, route),
        world.core.search(who.token, route, {"query": "binding", "run_id": world.start_run(owner)}),
    ):
        expect(
            400 <= response.status_code < 500,
            server.AUTH_002,
            f"a token of route {who.route!r} got HTTP {response.status_code} on {route!r}",
        )
        checks.error_envelope(response, server.AUTH_002)


@R(server.WIRE_001)
@pytest.mark.parametrize(
    "route", ["a", "x" * 65, "Bad Route", "-dash-first"], ids=["one-char", "65-chars", "space-upper", "dash-first"]
)
def test_a_route_that_is_not_the_tokens_gets_an_error_envelope(world: World, route: str) -> None:
    """Whatever a Core takes for a well-formed route, these are not this token's workspace: the
    answer is a 4xx error envelope (a malformed route included), never a success or a 5xx."""
    response = world.core.capabilities(world.primary.token, route)
    expect(
        400 <= response.status_code < 500,
        server.WIRE_001,
        f"capabilities on route {route!r} answered HTTP {response.status_code}",
    )
    checks.error_envelope(response, server.WIRE_001, strict=world.cfg.strict_codes)


@R(server.WIRE_003)
def test_responses_are_not_cacheable(world: World) -> None:
    response = world.core.capabilities(world.primary.token, world.route)
    expect(
        "no-store" in response.headers.get("cache-control", ""),
        server.WIRE_003,
        f"Cache-Control is {response.headers.get('cache-control')!r}",
    )


@R(server.CAP_006)
def test_disabled_workspace_reports_enabled_false(in_state: Callable[[str], Stated]) -> None:
    """A workspace kept disabled ([target.workspaces.disabled]) or set so through control."""
    world = in_state("disabled").world
    body = checks.ok(world.core.capabilities(world.primary.token, world.route), server.CAP_006, "capabilities")
    enabled = world.cfg.names.capabilities["enabled"]
    expect(body.get(enabled) is False, server.CAP_006, f"a disabled workspace reports {enabled} {body.get(enabled)!r}")


@R(server.TURN_003, server.WIRE_001)
def test_a_disabled_workspace_accepts_an_on_demand_turn(in_state: Callable[[str], Stated]) -> None:
    """enabled false means the protocol exists (CAP-006): a client that negotiated it emits
    knowledge_delivery on_demand. The seed does not say the turn must then succeed, so by default
    a refusal (a 4xx envelope) passes too; strict expects the turn (CHOICES.md)."""
    world = in_state("disabled").world
    response = world.core.turn(world.primary.token, world.route, world.core.turn_body("homepage binding", "on_demand"))
    if response.status_code != 200 and not world.cfg.strict_codes:
        checks.error_envelope(response, server.WIRE_001)  # the seed does not say a disabled Core must take the turn
        raise NotVerified(
            f"not verified: the disabled workspace refused the on_demand turn (HTTP {response.status_code}), "
            "which the seed allows; TURN-003 is shown by the turns of an enabled workspace"
        )
    checks.ok(response, server.TURN_003, "an on_demand turn while knowledge is disabled")


@R(server.CAP_006, server.WIRE_001)
@pytest.mark.parametrize("delivery", ["inline", "unset", "on_demand"])
def test_a_disabled_workspace_delivers_no_knowledge_in_a_turn(in_state: Callable[[str], Stated], delivery: str) -> None:
    """enabled false means knowledge is disabled: a turn that asks for inline delivery, on_demand
    delivery (a Core may fall back to inline text when it cannot search), or none carries no
    document text either (an error answer carries none by construction)."""
    world = in_state("disabled").world
    if not world.docs:
        pytest.skip("not verified: no document text is known to look for (no control, no corpus kit)")
    response = world.core.turn(
        world.primary.token,
        world.route,
        world.core.turn_body("homepage binding", None if delivery == "unset" else delivery),
    )
    body = checks.body_of(response, server.WIRE_001)
    leaked = world.document_text().leaked(body)
    expect(
        leaked is None,
        server.CAP_006,
        f"a turn of a disabled workspace (delivery {delivery}) carries document text: {leaked!r}",
    )


@R(server.SRCH_009)
def test_disabled_workspace_searches_with_status_disabled(in_state: Callable[[str], Stated]) -> None:
    """Its own test, so a Core that also misreports capabilities is still checked here."""
    stated = in_state("disabled")
    found = checks.search_response(stated.world.search("binding", stated.need_run()))
    expect(
        found["status"] == "disabled" and found["hints"] == [],
        server.SRCH_009,
        f"search while disabled: {checks.describe(found)}",
    )
