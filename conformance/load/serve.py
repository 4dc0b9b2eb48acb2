"""The default target of a load run: the bundled simulator served in its own process
(``knowledge-sim serve`` on a free loopback port), as SDK and host teams run it.

Started as a command, never imported (the suite does not import the simulator); its control
credential is drawn here, for this run only."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from conformance.target.outcomes import HarnessError
from conformance.target.secrets import SECRETS

COMMAND = "knowledge-sim"
CONTROL_BASE = "/_control/v1"
CONTROL_TOKEN_ENV = "KNOWLEDGE_SIM_CONTROL_TOKEN"
"""How the run's control credential reaches ``knowledge-sim serve``: its environment, never its
command line (which any local user reads in ``ps``)."""
START_SECONDS = 60.0


@dataclass
class Served:
    url: str
    control_token: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.unlink(missing_ok=True)


def _command() -> str:
    """The simulator's console script: beside this interpreter (a virtual environment), else on PATH."""
    beside = Path(sys.executable).parent / COMMAND
    found = str(beside) if beside.is_file() else shutil.which(COMMAND)
    if not found:
        raise HarnessError(
            f"{COMMAND} is not installed: give --target URL of a running Core, or install the bundled simulator"
        )
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(quirks: tuple[str, ...] = ()) -> Served:
    """Serve the simulator and wait until its control extension answers."""
    token = secrets.token_hex(16)
    SECRETS.add(token)
    port = free_port()
    cmd = [_command(), "serve", "--host", "127.0.0.1", "--port", str(port)]
    for quirk in quirks:
        cmd += ["--quirk", quirk]
    handle, name = tempfile.mkstemp(prefix="knowledge-sim-", suffix=".log")
    log = Path(name)
    with os.fdopen(handle, "wb") as out:  # a file, never a pipe nobody reads
        process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, CONTROL_TOKEN_ENV: token},
        )
    url = f"http://127.0.0.1:{port}"
    served = Served(url, token, process, log)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = log.read_text("utf-8", "replace")[-600:]
            served.stop()
            raise HarnessError(f"{COMMAND} serve exited with {process.returncode}: {output}")
        try:
            if (
                httpx.get(
                    url + CONTROL_BASE + "/clock", headers={"Authorization": f"Bearer {token}"}, timeout=2
                ).status_code
                == 200
            ):
                return served
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    served.stop()
    raise HarnessError(f"{COMMAND} serve did not answer on {url} within {START_SECONDS:g} s")
