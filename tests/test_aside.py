"""Work set aside (the --realtime expiry wait, run beside the other tests) is no running test's
evidence and no running test's record: its requests are counted, its checks kept apart."""

from __future__ import annotations

import threading

import httpx

from conformance.common.aside import aside
from conformance.common.rules import expect, recording
from conformance.common.transport import Recorder
from conformance.server.rules import READ_002


def _response(path: str) -> httpx.Response:
    return httpx.Response(200, json={}, request=httpx.Request("POST", f"http://core{path}"))


def test_a_request_set_aside_is_counted_but_is_no_test_s_exchange() -> None:
    recorder = Recorder()
    recorder.record(_response("/mine"))
    thread = threading.Thread(target=lambda: _in_aside(lambda: recorder.record(_response("/aside"))))
    thread.start()
    thread.join()
    assert recorder.count == 2
    assert [e.path for e in recorder.current] == ["/mine"]


def test_a_check_set_aside_records_into_no_test_s_ledger() -> None:
    with recording() as ledger:
        thread = threading.Thread(target=lambda: _in_aside(lambda: expect(True, READ_002, "aside")))
        thread.start()
        thread.join()
        assert READ_002 not in ledger.passed
        expect(True, READ_002, "mine")
        assert READ_002 in ledger.passed


def _in_aside(work: object) -> None:
    assert callable(work)
    with aside():
        work()
