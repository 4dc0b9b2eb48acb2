"""A Core that has served several runs keeps a long transcript: reading it is bounded by its own
cap (64 MiB), not one answer's 4 MiB, which turned every transcript read into a harness error
after some four runs against one staging simulator."""

from __future__ import annotations

from typing import Any

import pytest
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


# ------------------------------------------------------------ transcript.since
CAPS = "/agent-api/v1/workspaces/demo/knowledge/capabilities"


def test_the_simulator_numbers_its_transcript_from_the_last_reset() -> None:
    """``?since=N`` answers the requests numbered N and later, with ``next`` and the ``epoch``
    of the last reset; a reset starts the count again under a new epoch."""
    import httpx

    from conformance.common.transport import InProcessTransport
    from simulator.app import create_app

    app = create_app(seed=0, control_token="ctl-" + "t" * 28)
    http = httpx.Client(transport=InProcessTransport(app), base_url="http://sim")
    control = {"Authorization": "Bearer ctl-" + "t" * 28}
    assert "transcript.since" in http.get("/_control/v1/", headers=control).json()["features"]
    for _ in range(3):
        http.get(CAPS)  # 401 without a token: recorded all the same
    whole = http.get("/_control/v1/transcript", headers=control).json()
    assert whole["next"] == 3 and len(whole["requests"]) == 3
    later = http.get("/_control/v1/transcript", params={"since": "2"}, headers=control).json()
    assert later == {"requests": whole["requests"][2:], "next": 3, "epoch": whole["epoch"]}
    assert http.get("/_control/v1/transcript", params={"since": "9"}, headers=control).json()["requests"] == []
    for bad in ("-1", "x", "1.5", "٣"):
        assert http.get("/_control/v1/transcript", params={"since": bad}, headers=control).status_code == 400, bad
    assert http.post("/_control/v1/reset", headers=control).status_code == 204
    http.get(CAPS)
    after = http.get("/_control/v1/transcript", params={"since": "0"}, headers=control).json()
    assert after["next"] == 1 and len(after["requests"]) == 1 and after["epoch"] != whole["epoch"]


def _since_core(answer: Any) -> tuple[Starlette, list[str | None]]:
    """A control extension offering transcript.since whose answers ``answer(since)`` makes; the
    ``since`` of every transcript read is kept (None: the whole transcript was asked for)."""
    asked: list[str | None] = []

    async def offer(_request: Request) -> Response:
        return JSONResponse({"version": "1.2.0", "features": ["transcript", "transcript.since"]})

    async def transcript(request: Request) -> Response:
        since = request.query_params.get("since")
        asked.append(since)
        return JSONResponse(answer(since))

    return Starlette(routes=[Route("/_control/v1/", offer), Route("/_control/v1/transcript", transcript)]), asked


def _entry(n: int) -> dict[str, Any]:
    return {**ENTRY, "body": str(n)}


def test_the_suite_reads_only_what_came_since_its_last_read() -> None:
    """Each read asks for what follows the last one and adds it; a new epoch (a reset) or an
    answer that does not follow what was read (requests the Core no longer keeps) is read again
    from the start; the reads give what whole reads would have, but for requests the Core let go
    after they were read (kept: a check's marks count them)."""
    log = [_entry(n) for n in range(5)]
    state: dict[str, Any] = {"epoch": "a", "first": 0}  # first: the number of the oldest request the Core keeps

    def answer(since: str | None) -> dict[str, Any]:
        start = max(int(since or 0), state["first"])
        return {"requests": log[start:], "next": len(log), "epoch": state["epoch"]}

    app, asked = _since_core(answer)
    url, stop = serve_over_loopback(app)
    control = Control.of_core(url, "t")
    try:
        assert control.transcript() == log
        log.extend(_entry(n) for n in range(5, 8))
        assert control.transcript() == log and asked == ["0", "5"]
        state["epoch"], log[:] = "b", [_entry(100)]  # reset, then one request
        assert control.transcript() == log and asked[-2:] == ["8", "0"]
        log.extend(_entry(n) for n in range(101, 104))
        state["first"] = 3  # the Core keeps only the newest: 3 is its oldest
        assert control.transcript() == log[3:] and asked[-2:] == ["1", "0"]
    finally:
        control.close()
        stop()


def test_without_transcript_since_every_read_is_the_whole_transcript() -> None:
    """An extension that does not offer it, or answers without ``next`` and ``epoch``."""
    url, stop = serve_over_loopback(_app(3))
    control = Control.of_core(url, "t")
    try:
        assert len(control.transcript()) == len(control.transcript()) == 3
    finally:
        control.close()
        stop()
    app, asked = _since_core(lambda since: {"requests": [ENTRY] * 2})
    url, stop = serve_over_loopback(app)
    control = Control.of_core(url, "t")
    try:
        assert len(control.transcript()) == len(control.transcript()) == len(control.transcript()) == 2
        assert asked == ["0", None, None, None]  # tried once, then whole reads
    finally:
        control.close()
        stop()


def test_what_the_suite_keeps_of_a_transcript_is_bounded_as_one_read_is() -> None:
    """Past what incremental reads keep (their JSON and an entry's cost in memory), a ControlError,
    as a whole read past its own cap is: never a silently shortened transcript."""
    big = {**ENTRY, "body": "x" * (TRANSCRIPT_MAX_BYTES // 4)}
    log: list[dict[str, Any]] = []

    def answer(since: str | None) -> dict[str, Any]:
        return {"requests": log[int(since or 0) :], "next": len(log), "epoch": "a"}

    app, _ = _since_core(answer)
    url, stop = serve_over_loopback(app)
    control = Control.of_core(url, "t")
    try:
        for _ in range(7):
            log.append(big)
            assert control.transcript() == log
        log.append(big)
        with pytest.raises(ControlError, match="since the last reset are over"):
            control.transcript()
    finally:
        control.close()
        stop()


def test_a_first_release_extension_is_never_asked_for_part_of_its_transcript() -> None:
    """A 1.0.0 extension lists no features (no ``GET /``): ``since`` is never sent to it, since
    one that refuses unknown query parameters would turn every read into an error."""
    asked: list[str] = []

    async def transcript(request: Request) -> Response:
        asked.append(str(request.url.query))
        if request.url.query:
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        return JSONResponse({"requests": [ENTRY] * 3})

    url, stop = serve_over_loopback(Starlette(routes=[Route("/_control/v1/transcript", transcript)]))
    control = Control.of_core(url, "t")
    try:
        assert len(control.transcript()) == len(control.transcript()) == 3 and asked == ["", ""]
    finally:
        control.close()
        stop()
