"""Spawn a harness, speak JSON lines with it, validate every answer.

A harness that does not answer in time, answers out of order, or answers with a
shape the protocol does not allow is a harness error (the run's verdict is
``error``), never a judgement of the client: the runner could not see what the
client did.
"""

from __future__ import annotations

import json
import math
import os
import queue
import shlex
import subprocess
import threading
from dataclasses import dataclass
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from conformance.clients import PROTOCOL
from conformance.target.outcomes import HarnessError
from conformance.target.secrets import clip
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


class HarnessProtocolError(HarnessError):
    """The harness broke the protocol: no answer, a malformed one, or one for another command."""


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
        said = clip(json.dumps(self.value if self.ok else self.error, ensure_ascii=False), 300)
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
                text=True,
                encoding="utf-8",
                bufsize=1,
                env={**os.environ, **(env or {})},
            )
        except OSError as exc:
            raise HarnessProtocolError(f"cannot start the harness {command!r}: {exc}") from None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr = [*self._stderr[-40:], line.rstrip("\n")]

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr[-10:])

    def _exited(self, what: str) -> str:
        """Why the harness is gone, on one line: its exit status and the end of its stderr."""
        tail = " | ".join(line for line in self._stderr[-3:] if line.strip())
        return f"{what} (exit {self.process.poll()})" + (f": {clip(tail, -300)}" if tail else "")

    def _gone(self, cmd: str) -> str:
        """One wording whichever the runner saw first, the closed pipe or the end of stdout: it is a race."""
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
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise HarnessProtocolError(self._gone(cmd)) from None
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise HarnessProtocolError(f"no answer to {cmd} within {self.timeout:g} s") from None
        if line is None:
            raise HarnessProtocolError(self._gone(cmd))
        return self._check(cmd, command, line)

    def _check(self, cmd: str, command: dict[str, Any], line: str) -> Answer:
        try:
            raw = json.loads(line)
        except ValueError:
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
        it may never answer), then terminate it if it is still running."""
        if self.process.poll() is None:
            if stop:
                try:
                    self.call("stop")
                except (HarnessError, RuntimeError):
                    pass
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
