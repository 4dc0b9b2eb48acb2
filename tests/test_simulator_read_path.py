"""The read path's shortcuts answer exactly as the work they stand for (simulator.http, simulator.signing)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.http import _has_long_number
from simulator.signing import Signer, TokenError

_CLAIMS = st.dictionaries(
    st.text(max_size=4),
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    max_size=9,
)


@given(st.binary(max_size=80) | st.text(alphabet='0123456789a."é', max_size=80).map(str.encode))
def test_a_long_number_is_found_as_the_regular_expression_finds_it(raw: bytes) -> None:
    assert _has_long_number(raw) == (re.search(rb"\d{19}", raw) is not None)


@given(st.sampled_from(["ref", "cursor"]), _CLAIMS)
def test_a_signed_length_is_the_length_of_the_token_signed(kind: str, claims: dict[str, Any]) -> None:
    signer = Signer(b"k" * 32)
    assert signer.signed_length(kind, claims) == len(signer.sign(kind, claims))


def test_a_remembered_token_is_still_only_the_one_signed() -> None:
    """Verified tokens are remembered, never a forgery of one, another kind's or another key's; and a
    caller changing the claims it got changes nothing remembered."""
    signer = Signer(b"k" * 32)
    token = signer.sign("ref", {"i": "doc", "t": 1.5})
    first = signer.verify("ref", token)
    first["i"] = "changed"
    assert signer.verify("ref", token) == {"i": "doc", "t": 1.5}
    head, _, mac = token.rpartition(".")
    forged = f"{head}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
    with pytest.raises(TokenError):
        signer.verify("ref", forged)
    with pytest.raises(TokenError):
        signer.verify("cursor", token)
    with pytest.raises(TokenError):
        Signer(b"j" * 32).verify("ref", token)


async def _exchange(app: Any, scope: dict[str, Any], chunks: list[bytes]) -> list[dict[str, Any]]:
    """One request to the ASGI app, its body in ``chunks``; the messages it sent back."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_a_core_endpoint_answers_alike_straight_and_through_the_router() -> None:
    """A Core request goes from the no-store layer straight to its endpoint (simulator.app.NoStore);
    under a root path it takes the router's way. Both answer byte for byte alike: statuses, headers
    and bodies, refusals included (token, media type, size, JSON, schema, method, canned faults)."""
    import asyncio
    import json

    from simulator import create_app
    from simulator.core import Canned

    app = create_app(seed=7, demo=True)
    core = app.state.core
    token = core.store.identities("demo")[0].token
    api = "/agent-api/v1/workspaces/demo"

    def request(method: str, tail: str, body: Any = None, **headers: str) -> tuple[str, str, list[bytes], list[Any]]:
        raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        listed = {"authorization": f"Bearer {token}", **({"content-type": "application/json"} if body else {})}
        listed.update(headers)
        chunks = [raw[: len(raw) // 2], raw[len(raw) // 2 :]] if raw else [b""]
        return method, tail, chunks, [(k.encode(), v.encode()) for k, v in listed.items() if v]

    async def both(
        method: str, tail: str, chunks: list[bytes], headers: list[Any], roots: tuple[str, ...] = ("", "/base")
    ) -> list[list[dict[str, Any]]]:
        answers = []
        for root in roots:
            scope = {
                "type": "http",
                "method": method,
                "path": f"{root}{api}/{tail}",
                "root_path": root,
                "raw_path": f"{root}{api}/{tail}".encode(),
                "query_string": b"",
                "headers": headers,
                "scheme": "http",
                "server": ("sim", 80),
                "client": ("127.0.0.1", 1),
            }
            answers.append(await _exchange(app, scope, chunks))
        return answers

    turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "expense"}
    turn_answer = asyncio.run(both(*request("POST", "turns", {**turn, "knowledge_delivery": "on_demand"})))[0]
    run = json.loads(turn_answer[1]["body"])["run_id"]
    hints = json.loads(
        asyncio.run(both(*request("POST", "knowledge/search", {"run_id": run, "query": "expense"})))[0][1]["body"]
    )["hints"]
    cases = [
        request("GET", "knowledge/capabilities"),
        request("HEAD", "knowledge/capabilities"),
        request("POST", "knowledge/capabilities"),
        request("GET", "knowledge/read"),
        request("POST", "turns", turn),
        request("POST", "knowledge/search", {"run_id": run, "query": "expense policy", "limit": 2}),
        request("POST", "knowledge/read", {"run_id": run, "ref": hints[0]["ref"], "max_bytes": 4096}),
        request("POST", "knowledge/read", {"run_id": run, "ref": hints[0]["ref"]}, authorization=""),
        request("POST", "knowledge/read", {"run_id": run, "ref": "kr1.x.y"}),
        request("POST", "knowledge/read", {"run_id": run}),
        request("POST", "knowledge/read", b"{not json"),
        request("POST", "knowledge/read", b"[]", **{"content-type": "application/json"}),
        request("POST", "knowledge/read", {"run_id": run, "ref": "r"}, **{"content-type": "text/plain"}),
        request("POST", "knowledge/read", {"run_id": run, "ref": "r"}, **{"content-length": "99999999"}),
        request("POST", "knowledge/search", b'{"run_id": "' + b"x" * 2_000_000 + b'"}'),
    ]
    for case in cases:
        direct, routed = asyncio.run(both(*case))
        assert direct == routed, case[:2]
        assert [k for k, _ in direct[0]["headers"]].count(b"cache-control") == 1
    for canned in (Canned(418, text="short and stout"), Canned(204), Canned(503, {"error": {"code": "x"}})):
        answers = []
        for root in ("", "/base"):
            core.canned.append(["read", None, 0, canned])
            case = request("POST", "knowledge/read", {"run_id": run, "ref": "r"})
            answers.append(asyncio.run(both(*case, roots=(root,)))[0])
        assert answers[0] == answers[1] and answers[0][0]["status"] == canned.status
