"""The Fixed Client Token stdio path: exactly three governed-job tools.

Job model (README, Choice 55): jobs live in the stdio process.  A job is
``pending`` for a fixed time after its submission (0.5 s by default), then ``done``
with an output that describes its input.  The same ``request_id`` with the same
input is the same job; with another input it is refused.
"""
from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from . import feedback as fb
from .mcp_protocol import UnknownTool, text_result
from .tool_schemas import JOB_TOOLS

REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
INPUT_MAX_CHARS = 64000
JOB_ID_MAX_CHARS = 128
WAIT_MIN, WAIT_MAX, WAIT_DEFAULT = 1, 60, 20
DEFAULT_JOB_SECONDS = 0.5
POLL_SECONDS = 0.05

Result = dict[str, Any]


@dataclass
class Job:
    job_id: str
    request_id: str
    input: str
    submitted_at: float
    ready_at: float

    def output(self) -> str:
        words = len(self.input.split())
        return f"governed job {self.request_id} done: {words} words, {len(self.input)} characters"


def refuse(operation: str, code: str, message: str, category: str = "invalid_request") -> Result:
    return text_result({"feedback": fb.feedback(operation, code, message, category=category)}, is_error=True)


class JobTools:
    def __init__(self, job_seconds: float = DEFAULT_JOB_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.job_seconds = max(0.0, job_seconds)
        self.clock = clock
        self.sleep = sleep
        self.lock = threading.Lock()
        self.jobs: dict[str, Job] = {}
        self.by_request: dict[str, str] = {}

    def list_tools(self, include_hidden: bool) -> list[dict[str, Any]]:
        return [dict(t) for t in JOB_TOOLS]

    def call(self, name: str, arguments: Any, context: Any) -> Result:
        handler = {"submit_governed_job": self.submit, "get_governed_job": self.get,
                   "wait_for_governed_job": self.wait}.get(name)
        if handler is None:
            raise UnknownTool(name)
        if not isinstance(arguments, dict):
            return refuse(name, "invalid_arguments", "The arguments must be a JSON object.")
        return handler(arguments)

    def view(self, job: Job, wait: bool = False) -> dict[str, Any]:
        done = self.clock() >= job.ready_at
        out: dict[str, Any] = {"job_id": job.job_id, "request_id": job.request_id,
                               "status": "done" if done else "pending"}
        if done:
            out["output"] = job.output()
        if wait:
            out["timed_out"] = not done
        return out

    def submit(self, args: dict[str, Any]) -> Result:
        op = "submit_governed_job"
        request_id, text = args.get("request_id"), args.get("input")
        if not isinstance(request_id, str) or not REQUEST_ID_RE.fullmatch(request_id):
            return refuse(op, "invalid_arguments", "request_id must match ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$.")
        if not isinstance(text, str) or len(text) > INPUT_MAX_CHARS:
            return refuse(op, "invalid_arguments", "input must be a string of at most 64000 characters.")
        with self.lock:
            known = self.by_request.get(request_id)
            if known is not None:
                job = self.jobs[known]
                if job.input != text:
                    return refuse(op, "job_conflict", "This request_id was submitted with another input.",
                                  "conflict")
                return text_result(self.view(job))
            now = self.clock()
            job = Job(job_id="job-" + uuid.uuid4().hex, request_id=request_id, input=text,
                      submitted_at=now, ready_at=now + self.job_seconds)
            self.jobs[job.job_id] = job
            self.by_request[request_id] = job.job_id
        return text_result(self.view(job))

    def _job(self, op: str, args: dict[str, Any]) -> Job | Result:
        job_id = args.get("job_id")
        if not isinstance(job_id, str) or not 1 <= len(job_id) <= JOB_ID_MAX_CHARS:
            return refuse(op, "invalid_arguments", "job_id must be a string of 1 to 128 characters.")
        with self.lock:
            job = self.jobs.get(job_id)
        if job is None:
            return refuse(op, "job_not_found", "No job of this client has this job_id.", "not_found")
        return job

    def get(self, args: dict[str, Any]) -> Result:
        job = self._job("get_governed_job", args)
        return job if not isinstance(job, Job) else text_result(self.view(job))

    def wait(self, args: dict[str, Any]) -> Result:
        op = "wait_for_governed_job"
        max_wait = args.get("max_wait_seconds", WAIT_DEFAULT)
        if isinstance(max_wait, float) and max_wait.is_integer():
            max_wait = int(max_wait)
        if isinstance(max_wait, bool) or not isinstance(max_wait, int) or not WAIT_MIN <= max_wait <= WAIT_MAX:
            return refuse(op, "invalid_arguments", "max_wait_seconds must be an integer from 1 to 60.")
        job = self._job(op, args)
        if not isinstance(job, Job):
            return job
        deadline = self.clock() + max_wait
        while self.clock() < job.ready_at:
            remaining = deadline - self.clock()
            if remaining <= 0:
                break
            self.sleep(max(0.001, min(POLL_SECONDS, remaining, job.ready_at - self.clock())))
        return text_result(self.view(job, wait=True))
