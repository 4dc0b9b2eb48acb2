"""The judge in a process of its own, for the proxy: judging takes CPU (schemas, scrubbing) and a
thread of the proxy's process would take it from forwarding, one interpreter lock between them.

The proxy hands each exchange over with :meth:`JudgeProcess.submit`, which never blocks: a full
queue (the judge is behind) or a judge that is gone drops the exchange, counted here and reported.
New credentials go over first, so the judge's scrubber knows them before any evidence is kept.
When the proxy stops, :meth:`JudgeProcess.close` lets the judge finish, then reads its tally."""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections import Counter
from dataclasses import dataclass
from typing import Any

from conformance.common.config import TargetConfig
from conformance.common.secrets import SECRETS
from conformance.observe.credentials import Credentials, Identity
from conformance.observe.seen import Seen
from conformance.observe.tally import Tally

QUEUE_SIZE = 1024
"""Exchanges waiting for the judge at most: with bodies kept up to their caps, some 160 MB at worst."""
TOKEN = "token"


@dataclass(frozen=True)
class JudgeSetup:
    """What the judge's process builds its judge from (picklable)."""

    cfg: TargetConfig
    known: dict[str, Identity]
    base_url: str
    negotiating: bool = False
    record_har: str | None = None


def _work(setup: JudgeSetup, inbox: Any, outbox: Any) -> None:
    from conformance.observe.har import HarRecorder
    from conformance.observe.judge import Judge

    try:
        os.nice(10)  # on a busy machine forwarding comes first; the queue absorbs (or drops, counted) the rest
    except OSError:
        pass

    auth = setup.cfg.wire["auth"]
    credentials = Credentials(setup.known, str(auth["scheme"]))
    judge = Judge(setup.cfg, credentials, base_url=setup.base_url, negotiating=setup.negotiating)
    recorder = (
        HarRecorder(setup.record_har, setup.base_url, str(auth["header"]), str(auth["scheme"]))
        if setup.record_har
        else None
    )
    try:
        while True:
            item = inbox.get()
            if item is None:
                break
            if isinstance(item, tuple) and item[0] == TOKEN:
                SECRETS.add(item[1])
                continue
            judge.judge(item)
            if recorder is not None:
                try:
                    recorder.add(item.decoded())
                except Exception as exc:
                    judge.tally.broke(f"recording exchange #{item.number} failed: {type(exc).__name__}")
    finally:
        if recorder is not None:
            recorder.close()
        outbox.put((judge.tally.snapshot(), credentials.count))


class JudgeProcess:
    def __init__(self, setup: JudgeSetup, credentials: Credentials, size: int = QUEUE_SIZE) -> None:
        context = multiprocessing.get_context("spawn")
        self._inbox: Any = context.Queue(maxsize=size)
        self._outbox: Any = context.Queue()
        self._process = context.Process(target=_work, args=(setup, self._inbox, self._outbox), daemon=True)
        self.credentials = credentials
        self.dropped: Counter[str] = Counter()
        self._tokens: list[str] = []  # new tokens not yet handed to the judge
        self.sent_tokens: list[str] = []  # and those handed over: this process's scrubber learns them at the end

    def start(self) -> JudgeProcess:
        self._process.start()
        return self

    def submit(self, seen: Seen) -> None:
        """Hand ``seen`` over, or drop it (counted): never blocks, never raises. New tokens go
        first; while one cannot, no exchange goes (the judge must be able to scrub it)."""
        try:
            if not self._process.is_alive():
                self.dropped["the judge had stopped"] += 1
                return
            self._tokens += self.credentials.take_pending()
            while self._tokens:
                self._inbox.put_nowait((TOKEN, self._tokens[0]))
                self.sent_tokens.append(self._tokens.pop(0))
            self._inbox.put_nowait(seen)
        except queue.Full:
            self.dropped["the judge's queue was full"] += 1
        except Exception:  # fail open: whatever goes wrong here, forwarding goes on
            self.dropped["the hand-over to the judge failed"] += 1

    def close(self, timeout: float = 120.0) -> tuple[Tally, int]:
        """Let the judge finish what is queued, then its tally (with what was dropped on the way)."""
        tally, sessions = Tally(), self.credentials.count
        try:
            self._inbox.put(None, timeout=timeout)
            tally, sessions = self._outbox.get(timeout=timeout)
        except (queue.Full, queue.Empty):
            tally.broke("the judge did not finish in time: its tally is lost")
        self._process.join(5)
        if self._process.is_alive():
            self._process.terminate()
        tally.merge_unjudged(self.dropped)
        for token in self.sent_tokens + self._tokens:  # the reports are written here: scrubbed here too
            SECRETS.add(token)
        return tally, sessions
