"""The 4096-byte bound of references and cursors: above it refused, at it not refused for its
size (in ASCII and in multi-byte padding)."""

from __future__ import annotations

import httpx
import pytest

from conformance.common import contract as C
from conformance.common.rules import expect
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import World

R = pytest.mark.requirement


def _padded(token: str, size: int, unit: str = "A") -> str:
    """``token`` with ``unit`` appended (then ASCII) up to exactly ``size`` UTF-8 bytes."""
    count, rest = divmod(size - C.utf8_size(token), C.utf8_size(unit))
    return token + unit * count + "A" * rest


def _token_probe(world: World, field: str) -> tuple[str, str, str]:
    """``(run_id, ref, token)``: a fresh reference, and the ref or a cursor of it to pad."""
    run_id = world.start_run()
    ref = world.ref_for(run_id, world.docs.get("unicode"))
    first = world.page(ref, run_id, C.READ_MIN_MAX_BYTES)
    if (
        field == "cursor" and first["next_cursor"] is None
    ):  # padding the ref and sending it as a cursor would judge no cursor
        pytest.skip("not verified: the document found fits one page, so there is no cursor to pad")
    return run_id, ref, ref if field == "ref" else first["next_cursor"]


def _send(world: World, field: str, run_id: str, ref: str, token: str) -> httpx.Response:
    response: httpx.Response = world.read(token, run_id) if field == "ref" else world.read(ref, run_id, cursor=token)
    return response


@R(server.READ_008)
@pytest.mark.parametrize("padding", ["ascii", "multibyte"])
@pytest.mark.parametrize("field", ["ref", "cursor"])
def test_oversized_reference_or_cursor_is_refused(world: World, field: str, padding: str) -> None:
    """4097 bytes, one past the bound: ASCII, and two-byte characters (fewer than 4096 of them,
    so a Core that counts characters instead of bytes lets it through)."""
    run_id, ref, token = _token_probe(world, field)
    oversized = _padded(token, C.REFERENCE_MAX_BYTES + 1, "é" if padding == "multibyte" else "A")
    response = _send(world, field, run_id, ref, oversized)
    expect(
        response.status_code != 200,
        server.READ_008,
        f"a {field} of {C.utf8_size(oversized)} bytes ({len(oversized)} characters), "
        f"over {C.REFERENCE_MAX_BYTES}, was accepted",
    )
    body = checks.body_of(response, server.READ_008)
    if (
        response.status_code == 400
        and isinstance(body, dict)
        and body.get("error") in ("invalid_request", world.cfg.code("invalid_request"))
    ):
        checks.error_envelope(
            response, server.READ_008, strict=world.cfg.strict_codes
        )  # refused by request validation: acceptable
    else:
        checks.reference_error(
            response, world.cfg, "reference_invalid", requirement=server.READ_008, text=world.document_text()
        )


def _answer(response: httpx.Response) -> tuple[int, object]:
    try:
        body = response.json()
    except ValueError:
        body = None
    return response.status_code, body.get("error") if isinstance(body, dict) else None


@R(server.READ_019)
@pytest.mark.parametrize("field", ["ref", "cursor"])
def test_a_reference_or_cursor_of_4096_bytes_is_not_refused_for_its_size(world: World, field: str) -> None:
    """Padded to 4095 and to exactly 4096 bytes, a token is the same token but for its size,
    both within the bound: a Core may refuse both as invalid, or read both, but must answer
    both alike (status and error code). Answering the 4096-byte one otherwise judged its size."""
    run_id, ref, token = _token_probe(world, field)
    if C.utf8_size(token) >= C.REFERENCE_MAX_BYTES - 1:
        pytest.skip(f"not verified: the Core's own {field} is already {C.utf8_size(token)} bytes, nothing to pad")
    below = _answer(_send(world, field, run_id, ref, _padded(token, C.REFERENCE_MAX_BYTES - 1)))
    at = _answer(_send(world, field, run_id, ref, _padded(token, C.REFERENCE_MAX_BYTES)))
    expect(
        at == below,
        server.READ_019,
        f"a {field} padded to {C.REFERENCE_MAX_BYTES} bytes answered HTTP {at[0]} {at[1]!r}, the same "
        f"{field} padded to {C.REFERENCE_MAX_BYTES - 1} bytes HTTP {below[0]} {below[1]!r}: a token within the bound was refused for its size",
    )
