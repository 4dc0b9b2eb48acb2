"""What a careless or hostile client sends gets a 4xx error envelope, never a 5xx."""

from __future__ import annotations

import json

import pytest

from conformance.common.rules import expect
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import World

R = pytest.mark.requirement

CASES: dict[str, bytes] = {
    "malformed-json": b'{"query": ',
    "empty-body": b"",
    "array-body": b"[1, 2, 3]",
    "string-body": b'"hello"',
    "wrong-types": json.dumps({"query": 42, "run_id": ["x"], "ref": {"a": 1}, "max_bytes": "big"}).encode(),
    "unknown-field": json.dumps(
        {"query": "binding", "run_id": "00000000-0000-4000-8000-000000000000", "owner": "root"}
    ).encode(),
    "lone-surrogate": b'{"query": "\\ud800", "ref": "\\udfff", "run_id": "x", "user_input": "\\ud800"}',
    "invalid-utf8": b'{"query": "\xff\xfe", "ref": "\xc3"}',
    "nul-and-controls": json.dumps({"query": "a\u0000b\u0007", "ref": "\u0000", "run_id": "\u0000"}).encode(),
    "deep-nesting": b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    "huge-body": b'{"query": "' + b"x" * (1024 * 1024 + 16) + b'"}',
    "huge-number": b'{"max_bytes": 1e400, "limit": 99999999999999999999999999999}',
}


@R(server.WIRE_001)
@pytest.mark.parametrize("operation", ["search", "read", "turns"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_a_4xx_envelope(world: World, operation: str, case: str) -> None:
    path = world.cfg.path(operation, world.route)
    response = world.core.raw("POST", path, world.primary.token, CASES[case], {"Content-Type": "application/json"})
    checks.error_envelope(response, server.WIRE_001, strict=world.cfg.strict_codes)


ONE_DEFECT_RUN_IDS = {"number": 5, "array": ["x"], "object": {"a": 1}, "boolean": True}
"""A run_id of another type, in a request valid in every other member: the bodies above mix
several defects, and a Core that refuses the first one it meets never reaches its type check."""


@R(server.WIRE_001)
@pytest.mark.parametrize("operation", ["search", "read"])
@pytest.mark.parametrize("kind", sorted(ONE_DEFECT_RUN_IDS))
def test_a_run_id_of_another_type_alone_gets_a_4xx_envelope(world: World, operation: str, kind: str) -> None:
    run_id = world.start_run()
    valid = {"query": "binding"} if operation == "search" else {"ref": world.ref_for(run_id)}
    body = json.dumps({**valid, "run_id": ONE_DEFECT_RUN_IDS[kind]}).encode()
    response = world.core.raw(
        "POST", world.cfg.path(operation, world.route), world.primary.token, body, {"Content-Type": "application/json"}
    )
    checks.error_envelope(response, server.WIRE_001, strict=world.cfg.strict_codes)


@R(server.WIRE_001)
def test_json_under_another_content_type_is_read_or_refused(world: World) -> None:
    """A valid search sent as text/plain. The seed says nothing about media types: reading it (a
    valid search response) or refusing it (a 4xx error envelope) both pass, a 5xx never; strict
    expects this project's 415 unsupported_media_type (CHOICES.md)."""
    body = json.dumps({"query": "binding", "run_id": world.start_run()}).encode()
    response = world.core.raw(
        "POST",
        world.cfg.path("search", world.route),
        world.primary.token,
        body,
        {"Content-Type": "text/plain; charset=utf-8"},
    )
    expect(response.status_code < 500, server.WIRE_001, f"JSON sent as text/plain answered HTTP {response.status_code}")
    if world.cfg.strict_codes:
        status, code = world.cfg.status("unsupported_media_type"), world.cfg.code("unsupported_media_type")
        expect(
            response.status_code == status,
            server.WIRE_001,
            f"strict: JSON sent as text/plain answered HTTP {response.status_code}, configured {status} {code!r}",
        )
        envelope = checks.error_envelope(response, server.WIRE_001, strict=True)
        expect(
            envelope["error"] == code,
            server.WIRE_001,
            f"strict: JSON sent as text/plain got error {envelope['error']!r}, configured {code!r}",
        )
    elif response.status_code == 200:
        checks.search_response(response, what="a search sent as text/plain")
    else:
        checks.error_envelope(response, server.WIRE_001)


@R(server.WIRE_001)
@pytest.mark.parametrize("max_bytes", [0, 10**9])
def test_an_out_of_range_max_bytes_alone_never_gets_a_server_error(world: World, max_bytes: int) -> None:
    """The seed lets a Core refuse a max_bytes outside 4096..32768 or clamp it (READ-006 judges
    which); a 5xx is neither, for the one defect of an otherwise valid read. A refusal is a 4xx
    envelope; a page is left to READ-006's tests."""
    run_id = world.start_run()
    response = world.read(world.ref_for(run_id), run_id, max_bytes=max_bytes)
    expect(
        response.status_code < 500,
        server.WIRE_001,
        f"a read valid but for max_bytes {max_bytes} got HTTP {response.status_code}, a server error",
    )
    if response.status_code != 200:
        checks.error_envelope(response, server.WIRE_001, strict=False)
