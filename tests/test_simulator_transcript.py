"""The control transcript is JSON any reader parses: a request body holding ``NaN`` or
``Infinity`` (which Python's parser takes and RFC 8259 does not) or a number past a float's range
(``1e999``, read as infinity; a suite's hostile requests send them) is recorded without its body, never echoed as a non-JSON constant that breaks every later
reader of the transcript (found as harness errors in concurrent runs)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from simulator import create_app

API = "/agent-api/v1/workspaces/demo"


def _strict(constant: str) -> None:
    raise AssertionError(f"{constant} in the transcript")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_a_body_with_a_non_json_constant_leaves_the_transcript_json(constant: str) -> None:
    async def scenario() -> str:
        app = create_app(control_token="ctl")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as http:
            body = f'{{"run_id": "r", "ref": "x", "max_bytes": {constant}}}'
            token = app.state.core.store.identities("demo")[0].token
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            await http.post(f"{API}/knowledge/read", content=body, headers=headers)
            answer = await http.get("/_control/v1/transcript", headers={"Authorization": "Bearer ctl"})
            assert answer.status_code == 200
            return answer.text

    text = asyncio.run(scenario())
    entries = json.loads(text, parse_constant=_strict)["requests"]
    read = [e for e in entries if e["path"].endswith("/knowledge/read")]
    assert read and read[-1]["body"] is None, read
