"""A Core that has served several runs keeps a long transcript: reading it is bounded by its own
cap (64 MiB), not one answer's 4 MiB, which turned every transcript read into a harness error
after some four runs against one staging simulator."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conformance.common.control import TRANSCRIPT_MAX_BYTES, Control, ControlError
from conformance.common.open import serve_over_loopback

ENTRY = {"method": "POST", "path": "/agent-api/v1/workspaces/w/knowledge/search", "status": 200, "body": "x" * 500}


def _app(entries: int) -> Starlette:
    async def offer(_request: Request) -> Response:
        return JSONResponse({"version": "1.1.0", "features": ["transcript"]})

    async def transcript(_request: Request) -> Response:
        return JSONResponse({"requests": [ENTRY] * entries})

    return Starlette(routes=[Route("/_control/v1/", offer), Route("/_control/v1/transcript", transcript)])


def test_a_transcript_over_one_answer_s_cap_is_read() -> None:
    url, stop = serve_over_loopback(_app(12_000))  # some 7 MB
    control = Control.of_core(url, "t")
    try:
        assert len(control.transcript()) == 12_000
    finally:
        control.close()
        stop()


def test_a_transcript_past_its_own_cap_is_a_control_error() -> None:
    url, stop = serve_over_loopback(_app(TRANSCRIPT_MAX_BYTES // 500 + 1))
    control = Control.of_core(url, "t")
    try:
        control.transcript()
    except ControlError as exc:
        assert "over" in str(exc), exc
    else:
        raise AssertionError("a transcript past its cap was read whole")
    finally:
        control.close()
        stop()
