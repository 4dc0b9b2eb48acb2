"""The Fixed Client Token stdio path: exactly the three governed-job tools, over a small
real job model (submitted jobs are pending for ``job_seconds`` of the injected clock, then
done; a wait returns when the job is done or when its ``max_wait_seconds`` run out)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types

from knowledge_schemas import load_registry
from knowledge_schemas.mcp import JOB_RESULT, JOB_TOOLS, job_input_schema, tool_schema

DESCRIPTIONS = {
    "submit_governed_job": "Submit a governed job for this client; the same request_id returns the same job.",
    "get_governed_job": "The job's current status.",
    "wait_for_governed_job": "Wait up to max_wait_seconds (1..60, default 20) for the job to be done.",
}


@dataclass
class Job:
    job_id: str
    request_id: str
    input: str
    submitted: float


class JobTools:
    """The clean job path. ``now`` is the injected clock, ``sleep`` waits on it."""

    def __init__(
        self,
        now: Callable[[], float],
        job_seconds: float = 1.5,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.now, self.job_seconds, self.sleep = now, job_seconds, sleep
        self.jobs: dict[str, Job] = {}
        self.by_request: dict[str, str] = {}

    def tools(self) -> list[types.Tool]:
        return [
            types.Tool(
                name=name,
                description=DESCRIPTIONS[name],
                input_schema=job_input_schema(name),
                output_schema=tool_schema(JOB_RESULT),
            )
            for name in JOB_TOOLS
        ]

    def view(self, job: Job, **extra: Any) -> dict[str, Any]:
        done = self.now() - job.submitted >= self.job_seconds
        out: dict[str, Any] = {
            "job_id": job.job_id,
            "request_id": job.request_id,
            "status": "done" if done else "pending",
        }
        if done:
            out["output"] = f"processed {len(job.input)} characters"
        return {**out, **extra}

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name not in JOB_TOOLS:
            return self._error(f"no tool named {name!r}")
        errors = sorted(
            e.message
            for e in load_registry()
            .validator("mcp-job-input")
            .evolve(schema=job_input_schema(name))
            .iter_errors(arguments)
        )
        if errors:
            return self._error(f"{name}: {'; '.join(errors)[:500]}")
        if name == "submit_governed_job":
            known = self.by_request.get(arguments["request_id"])
            if known is None:
                known = f"job-{len(self.jobs) + 1}"
                self.jobs[known] = Job(known, arguments["request_id"], arguments["input"], self.now())
                self.by_request[arguments["request_id"]] = known
            return self._ok(self.view(self.jobs[known]))
        job = self.jobs.get(arguments["job_id"])
        if job is None:
            return self._error(f"no job {arguments['job_id']!r}")
        if name == "get_governed_job":
            return self._ok(self.view(job))
        deadline = self.now() + int(arguments.get("max_wait_seconds", 20))
        while self.view(job)["status"] != "done" and self.now() < deadline:
            await self.sleep(min(0.05, max(0.0, deadline - self.now())))
        view = self.view(job)
        return self._ok({**view, "timed_out": view["status"] != "done"})

    def _ok(self, body: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body)

    def _error(self, message: str) -> types.CallToolResult:
        body = {"error": "invalid_request", "message": message}
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], is_error=True)
