"""The bundled simulator served in its own process (``knowledge-sim serve`` on a free loopback
port), as client runs and load runs use it, and as SDK and host teams run it.

Started as a command, never imported (the suite does not import the simulator). Its control
token is drawn for this run and scrubbed from every output: with the simulator's fixed
default, any local user could drive the control extension of a run's Core. It is handed over
in the environment, never on the command line, which every local user reads in ``ps``."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from conformance.common.control import CONTROL_BASE
from conformance.common.outcomes import HarnessError
from conformance.common.secrets import SECRETS

COMMAND = "knowledge-sim"
TOKEN_ENV = "KNOWLEDGE_SIM_CONTROL_TOKEN"
"""How the run's control credential reaches ``knowledge-sim serve``: its environment, never its command line."""
START_SECONDS = 60.0


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def simulator_command(instead: str) -> str:
    """The simulator's console script: beside this interpreter (a virtual environment), else on PATH."""
    beside = Path(sys.executable).parent / COMMAND
    found = str(beside) if beside.is_file() else shutil.which(COMMAND)
    if not found:
        raise HarnessError(f"no {COMMAND} command to serve the bundled simulator; {instead}")
    return found


class ServedSimulator:
    """``knowledge-sim serve`` on a free loopback port, ready when its control extension answers
    the run's token; stopped by ``close`` (or leaving its ``with`` block).

    ``seed`` makes its IDs and signing key reproducible, ``frozen_clock`` moves its clock only
    through control, ``quirks`` are deliberate deviations, ``corpus`` a folder or .jsonl file for
    its demo workspace; ``instead`` says what to give when there is no simulator to serve."""

    def __init__(
        self,
        *,
        seed: int | None = None,
        frozen_clock: bool = False,
        quirks: tuple[str, ...] = (),
        corpus: str | None = None,
        instead: str = "give the URL of a running Core",
        start_seconds: float = START_SECONDS,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.control_token = secrets.token_hex(16)
        SECRETS.add(self.control_token)
        cmd = [simulator_command(instead), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--seed", str(seed)] if seed is not None else []
        cmd += ["--frozen-clock"] if frozen_clock else []
        cmd += ["--corpus", corpus] if corpus else []
        for quirk in quirks:
            cmd += ["--quirk", quirk]
        handle, name = tempfile.mkstemp(prefix="knowledge-sim-", suffix=".log")
        self.log = Path(name)
        with os.fdopen(handle, "wb") as out:  # a file, never a pipe nobody reads
            self.process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, TOKEN_ENV: self.control_token},
            )
        try:
            self._wait(start_seconds)
        except BaseException:
            self.close()
            raise

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HarnessError(f"{COMMAND} serve exited with {self.process.returncode}: {self.output_tail()}")
            try:
                answer = httpx.get(
                    self.url + CONTROL_BASE + "/clock",
                    headers={"Authorization": f"Bearer {self.control_token}"},
                    timeout=2,
                )
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if answer.status_code == 200:
                return
            if answer.status_code in (401, 403):
                raise HarnessError(
                    f"the bundled simulator refused the run's control token ({answer.status_code}): "
                    f"this {COMMAND} does not read {TOKEN_ENV}"
                )
            time.sleep(0.1)
        raise HarnessError(f"{COMMAND} serve did not answer on {self.url} within {seconds:g} s")

    def output_tail(self, chars: int = 600) -> str:
        """The end of what the simulator wrote (stdout and stderr)."""
        try:
            return self.log.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> ServedSimulator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
