"""A Core with a rate limit: the seeds name none, so a Core may answer 429 (Too Many Requests)
whenever it likes. The suite waits the pause the Core asks for, within bounds a hostile Core
cannot stretch, sends the request again, and says in the run's warnings that it did; only a 429
still answered after that is judged as the Core's answer."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common.open import factory, serve_over_loopback
from conformance.common.transport import (
    RATE_LIMITED_TRIES,
    RETRY_AFTER_LONGEST,
    Backoff,
    RateLimiter,
    retry_after,
)
from tests.suite_command import SUITE


class FakeTime:
    """A clock that moves only when slept on: pauses are counted, never waited."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


@pytest.mark.parametrize(
    ("header", "attempt", "pause"),
    [
        ("3", 0, 3.0),
        (" 0 ", 2, 0.0),
        (None, 0, 0.5),
        (None, 2, 2.0),
        ("Wed, 21 Oct 2026 07:28:00 GMT", 1, 1.0),  # a date: the Core's clock is not ours, back off instead
        ("-5", 0, 0.5),
        ("1.5", 0, 0.5),
        ("٣", 0, 0.5),  # a digit, but not an ASCII one
        ("86400", 0, RETRY_AFTER_LONGEST),
        ("9" * 400, 0, 0.5),
        (None, 30, RETRY_AFTER_LONGEST),
    ],
)
def test_the_pause_a_429_asks_for_is_bounded(header: str | None, attempt: int, pause: float) -> None:
    assert retry_after(header, attempt) == pause


def _backoff(answers: list[httpx.Response], limiter: RateLimiter) -> tuple[Backoff, list[int]]:
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(len(sent))
        return answers[min(len(sent) - 1, len(answers) - 1)]

    return Backoff(httpx.MockTransport(handler), limiter), sent


def test_a_429_is_waited_out_and_sent_again() -> None:
    time = FakeTime()
    limiter = RateLimiter(clock=time.clock, sleep=time.sleep)
    limited = httpx.Response(429, headers={"Retry-After": "2"})
    transport, sent = _backoff([limited, httpx.Response(429), httpx.Response(200, json={})], limiter)
    with httpx.Client(transport=transport, base_url="http://core.test") as client:
        assert client.get("/x").status_code == 200
    assert len(sent) == 3 and time.slept == [2.0, 1.0]  # Retry-After, then half a second doubled
    assert (limiter.refusals, limiter.paused) == (2, 3.0)


def test_a_core_that_keeps_refusing_is_judged_on_its_429() -> None:
    time = FakeTime()
    limiter = RateLimiter(clock=time.clock, sleep=time.sleep)
    transport, sent = _backoff([httpx.Response(429, headers={"Retry-After": "1"})], limiter)
    with httpx.Client(transport=transport, base_url="http://core.test") as client:
        assert client.get("/x").status_code == 429
    assert len(sent) == RATE_LIMITED_TRIES and len(time.slept) == RATE_LIMITED_TRIES - 1


def test_a_run_pauses_for_429s_only_within_its_budget() -> None:
    """A hostile Core asking for ten seconds at every request costs a run its budget once, not a day."""
    time = FakeTime()
    limiter = RateLimiter(clock=time.clock, sleep=time.sleep, budget=25.0)
    transport, sent = _backoff([httpx.Response(429, headers={"Retry-After": "100000"})], limiter)
    with httpx.Client(transport=transport, base_url="http://core.test") as client:
        assert [client.get("/x").status_code for _ in range(3)] == [429, 429, 429]
    assert time.slept == [RETRY_AFTER_LONGEST, RETRY_AFTER_LONGEST]  # a third pause would pass 25 s
    assert len(sent) == 5 and limiter.paused == 2 * RETRY_AFTER_LONGEST


def test_a_pause_holds_every_request_of_the_process() -> None:
    time = FakeTime()
    limiter = RateLimiter(clock=time.clock, sleep=time.sleep)
    assert limiter.refused("4", 0)
    limiter.wait()  # another thread's next request, not the refused one
    assert time.slept == [4.0]


class RefusingEvery:
    """ASGI middleware: every ``nth`` request is answered 429 before the Core sees it."""

    def __init__(self, app: Any, nth: int) -> None:
        self.app, self.nth = app, nth
        self.seen = self.refused = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            with self._lock:
                self.seen += 1
                refuse = self.seen % self.nth == 0
                self.refused += refuse
            if refuse:
                await send({"type": "http.response.start", "status": 429, "headers": [(b"retry-after", b"0")]})
                await send({"type": "http.response.body", "body": b'{"error": "rate_limited"}'})
                return
        await self.app(scope, receive, send)


def test_a_rate_limited_core_is_judged_as_the_same_core_without_the_limit(tmp_path: Path) -> None:
    token = "rate-limited-control-token"
    core = RefusingEvery(factory()(quirks=[], seed=0, control_token=token, demo=False, clock_tick=0.0), nth=4)
    url, stop = serve_over_loopback(core)
    try:
        config = tmp_path / "target.toml"
        config.write_text(f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n', "utf-8")
        reports = tmp_path / "reports"
        picked = [a for rid in ("READ-001", "SRCH-001", "AUTH-001") for a in ("--requirement", rid)]
        command = [*SUITE, "--target", url, "--target-config", str(config), "--reports", str(reports), *picked]
        done = subprocess.run(
            [*command, "--mcp-target", "none"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "KC_CONTROL": token},
            check=False,
        )
    finally:
        stop()
    results = json.loads((reports / "results.json").read_text("utf-8"))
    broken = [t["nodeid"] for t in results["tests"] if t["outcome"] in ("failed", "error")]
    assert not broken and done.returncode in (0, 6), (broken, done.stdout[-2000:])
    assert core.refused >= 5, core.refused  # every fourth request of the run, control's too
    said = [w for w in results["warnings"] if "429" in w]
    assert said and f"answered {core.refused} request(s) with 429" in said[0], results["warnings"]
