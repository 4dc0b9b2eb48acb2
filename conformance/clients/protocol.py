"""Spawn a harness, speak JSON lines with it, validate every answer.

A harness that does not answer in time, answers out of order, or answers with a
shape the protocol does not allow is a harness error (the run's verdict is
``error``), never a judgement of the client: the runner could not see what the
client did.

A harness is not trusted either: each line read from it is capped (a line without end would
otherwise fill the memory), every command is written under the timeout, whatever it printed is
shown only through ``untrusted.shown`` (its stderr can hold CI commands), and it runs in a process
group of its own, ended as a whole (SIGTERM, then SIGKILL), so no child it forked outlives the run.
"""

from __future__ import annotations

import json
import math
import os
import queue
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

from jsonschema import Draft202012Validator

from conformance.clients import PROTOCOL
from conformance.common.groups import signal_group
from conformance.common.outcomes import HarnessError
from conformance.common.secrets import clip
from conformance.common.untrusted import shown
from knowledge_schemas import load_registry
from knowledge_schemas._files import BASE_URI

SCHEMA = "harness-protocol.schema.json"
VALUE_OF = {
    "start": "start_value",
    "capabilities": "capabilities_value",
    "turn": "turn_value",
    "search": "search_value",
    "read": "read_value",
    "read_all": "read_all_value",
    "cancel": "empty_value",
    "rebind": "empty_value",
    "stop": "empty_value",
}
HOST_VALUE_OF = {
    "getKnowledgeCapabilities": "capabilities_value",
    "searchKnowledge": "search_value",
    "readKnowledge": "read_value",
}


LINE_CAP = 4 * 1024 * 1024
"""The longest line read from a harness (stdout or stderr); a protocol answer is kilobytes."""
STDERR_KEEP, STDERR_LINES = 2000, 40  # what is kept of each stderr line, and how many lines
GRACE = 5.0  # how long a harness gets to exit after stop, then after SIGTERM


class HarnessProtocolError(HarnessError):
    """The harness broke the protocol: no answer, a malformed one, or one for another command.
    Its message may quote the harness, so it is made safe to show when it is made."""

    def __init__(self, message: str) -> None:
        super().__init__(shown(message))


@cache
def _validator(definition: str) -> Draft202012Validator:
    registry = load_registry()
    return Draft202012Validator({"$ref": f"{BASE_URI}{SCHEMA}#/$defs/{definition}"}, registry=registry.registry)


def problems(definition: str, instance: Any) -> list[str]:
    """Why ``instance`` is not a valid ``$defs/definition`` of the protocol (empty when it is)."""
    found = sorted(_validator(definition).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in found]


def usage_problem(command: str | None, timeout: float, timeout_flag: str = "--timeout") -> str | None:
    """Why a harness command or answer timeout cannot run at all (a usage error, exit 4, before any
    test), or None. The command is split as a POSIX shell line, as the runner starts it."""
    if command is not None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return f"--harness {command!r}: {exc} (the command is split as a POSIX shell line)"
        if not argv:
            return "--harness: the command is empty; give the command that starts the client's harness"
    if not (math.isfinite(timeout) and timeout > 0):
        return f"{timeout_flag} must be a positive number of seconds, not {timeout:g}"
    return None


@dataclass(frozen=True)
class Answer:
    """One answer: what the client returned (``ok``, ``value``) or raised (``error``)."""

    ok: bool
    value: Any = None
    error: dict[str, Any] | None = None
    command: str = ""  # which harness command this answers: its id and cmd, named in every failure
    command_id: int | None = None
    sent: str = ""  # the command's other members as sent (JSON, clipped, scrubbed): a failure shows what was asked

    @property
    def kind(self) -> str | None:
        return None if self.error is None else str(self.error["kind"])

    def describe(self) -> str:
        said = shown(clip(json.dumps(self.value if self.ok else self.error, ensure_ascii=False), 300))
        if self.command_id is None:
            return said
        asked = f" {self.sent}" if self.sent else ""
        return f"(harness command #{self.command_id} {self.command}{asked}) answered {said}"


class Harness:
    """One running harness process. ``call`` sends a command and returns its checked answer."""

    def __init__(self, command: str, *, timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.timeout = timeout
        self._next = 0
        try:
            self.process = subprocess.Popen(
                shlex.split(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own process group: ended as a whole by close()
            )
        except OSError as exc:
            raise HarnessProtocolError(f"cannot start the harness {command!r}: {exc}") from None
        assert self.process.stdin is not None
        os.set_blocking(self.process.stdin.fileno(), False)  # a command is written under the timeout
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._broken: str | None = None  # a line over the cap: every later call says so
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in _capped_lines(self.process.stdout):
            if line is None:
                self._overflow("stdout")
                return
            self._lines.put(line)
        self._lines.put(None)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in _capped_lines(self.process.stderr):
            if line is None:
                self._overflow("stderr")
                return
            self._stderr = [*self._stderr[-STDERR_LINES:], clip(line.rstrip("\n"), STDERR_KEEP)]

    def _overflow(self, stream: str) -> None:
        """A line over the cap: the harness is broken for good, and a call waiting for an answer learns it now."""
        if self._broken is None:
            self._broken = (
                f"the harness printed a line over the {LINE_CAP // (1024 * 1024)} MiB cap on {stream} "
                f"(more than {LINE_CAP} bytes without a newline)"
            )
        self._lines.put(None)

    def stderr_tail(self) -> str:
        """The last lines of the harness's stderr, safe to show anywhere."""
        return shown("\n".join(self._stderr[-10:]))

    def _exited(self, what: str) -> str:
        """Why the harness is gone, on one line: its exit status and the end of its stderr."""
        tail = " | ".join(line for line in self._stderr[-3:] if line.strip())
        return f"{what} (exit {self.process.poll()})" + (f": {shown(clip(tail, -300))}" if tail else "")

    def _gone(self, cmd: str) -> str:
        """One wording whichever the runner saw first, the closed pipe or the end of stdout: it is a race."""
        if self._broken is not None:
            return self._broken
        self._settle()
        if self.process.poll() is None:
            return self._exited(f"the harness closed stdout instead of answering {cmd}")
        return self._exited(f"the harness exited before answering {cmd}")

    def call(self, cmd: str, **fields: Any) -> Answer:
        command = {"id": self._next, "cmd": cmd, **fields}
        self._next += 1
        bad = problems(cmd, command)
        if bad:  # the runner's own bug: never blame the harness for it
            raise RuntimeError(f"the runner built an invalid {cmd} command: {bad[:2]}")
        if self._broken is not None:
            raise HarnessProtocolError(self._broken)
        self._send(cmd, (json.dumps(command) + "\n").encode())
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise HarnessProtocolError(f"no answer to {cmd} within {self.timeout:g} s") from None
        if line is None:
            raise HarnessProtocolError(self._gone(cmd))
        return self._check(cmd, command, line)

    def _send(self, cmd: str, data: bytes) -> None:
        """Write a command whole within the timeout (a harness that stops reading cannot block the run)."""
        assert self.process.stdin is not None
        fd, view = self.process.stdin.fileno(), memoryview(data)
        deadline = time.monotonic() + self.timeout
        while view:
            left = deadline - time.monotonic()
            try:
                writable = left > 0 and select.select([], [fd], [], left)[1]
                if writable:
                    view = view[os.write(fd, view) :]
            except OSError:  # a closed pipe: the harness is gone
                raise HarnessProtocolError(self._gone(cmd)) from None
            if not writable:
                raise HarnessProtocolError(f"the harness did not read the {cmd} command within {self.timeout:g} s")

    def _check(self, cmd: str, command: dict[str, Any], line: str) -> Answer:
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError):
            raise HarnessProtocolError(
                f"the harness printed something that is not one JSON line (answering {cmd}): "
                f"{clip(line.rstrip(), 200)!r}"
            ) from None
        bad = problems("answer", raw)
        if bad:
            raise HarnessProtocolError(f"the answer to {cmd} is not a protocol answer: {'; '.join(bad[:3])}")
        if raw["id"] != command["id"]:
            raise HarnessProtocolError(f"the answer to {cmd} (id {command['id']}) carries id {raw['id']}")
        asked = {k: v for k, v in command.items() if k not in ("id", "cmd")}
        sent = clip(json.dumps(asked, ensure_ascii=False), 200) if asked else ""
        answer = Answer(raw["ok"], raw.get("value"), raw.get("error"), cmd, int(command["id"]), sent)
        if answer.ok and cmd == "start" and isinstance(answer.value, dict) and answer.value.get("protocol") != PROTOCOL:
            raise HarnessProtocolError(
                f"/protocol: expected {PROTOCOL}, the harness answered start with "
                f"{clip(json.dumps(answer.value.get('protocol')), 100)}"
            )
        if answer.ok:
            definition = HOST_VALUE_OF[command["call"]] if cmd == "host_call" else VALUE_OF[cmd]
            bad = problems(definition, answer.value)
            if bad:
                raise HarnessProtocolError(f"the value answered to {cmd} is not a {definition}: {'; '.join(bad[:3])}")
        return answer

    def start(self, core_url: str, connections: list[dict[str, Any]]) -> dict[str, Any]:
        answer = self.call(
            "start", protocol=PROTOCOL, core_url=core_url, connections=connections, timeout_seconds=self.timeout
        )
        if not answer.ok:
            raise HarnessProtocolError(f"the harness refused start: {answer.describe()}")
        return dict(answer.value)

    def _settle(self) -> None:
        """A harness that closed stdout is exiting: give it a moment, so its status and stderr are known."""
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return
        self._drainer.join(timeout=1)

    def close(self, *, stop: bool = True) -> None:
        """Stop the harness: with ``stop`` first (a harness that broke the protocol at start is not asked:
        it may never answer), then end its whole process group, so that a child it forked (and left
        running) ends too: SIGTERM, and SIGKILL to what is left after a grace period."""
        if stop and self.process.poll() is None and self._broken is None:
            try:
                self.call("stop")
            except (HarnessError, RuntimeError):
                pass
            _wait(lambda: self.process.poll() is not None, GRACE)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not signal_group(self.process.pid, sig):
                break
            if _wait(lambda: self.process.poll() is not None and not signal_group(self.process.pid, 0), GRACE):
                break
        self.process.poll()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def _capped_lines(stream: IO[bytes]) -> Iterator[str | None]:
    """Each line of ``stream`` as text, at most ``LINE_CAP`` bytes read for one (None: a longer one, then stop)."""
    while True:
        raw = stream.readline(LINE_CAP + 1)
        if not raw:
            return
        if len(raw) > LINE_CAP:
            yield None
            return
        yield raw.decode("utf-8", "replace")


def _wait(done: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
