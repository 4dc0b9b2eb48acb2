"""The suite's own recording, a stateful run's transcript (``conformance.server.transcript``,
format ``knowledge-conformance.server.transcript.v1``), as exchanges observe can judge.

Its steps name operations and identities, not requests: each becomes the request the suite sent
(paths from the wire defaults, the route label as route, each identity of the model's world with
the binding dimensions it differs in), and its control steps move time. What else control did
(revisions, scopes, modes) no exchange shows, as in any observed traffic. Its client is the suite's
own driver, which presents foreign references and runs on purpose: only the Core's rules are judged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conformance.common.config import TargetConfig
from conformance.observe.credentials import Identity
from conformance.observe.seen import Body, Seen, digest
from conformance.server.model import IDENTITIES, route_of
from conformance.server.transcript import FORMAT

MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024


class TranscriptError(ValueError):
    """A file that is not a transcript of the suite's format."""


def identities() -> dict[str, Identity]:
    """The model's identities, by the pseudo-token that stands for each: what each differs in."""
    out = {}
    for who, differs in IDENTITIES.items():
        out[f"transcript-{who}"] = Identity(
            who,
            "bob" if "account" in differs else "alice",
            "session-b" if "session" in differs else "session-a",
            "hub-b" if "hub" in differs else "hub-a",
        )
    return out


def _body(data: Any) -> Body:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else json.dumps(data).encode()
    return Body(raw, len(raw), True)


def _request(event: dict[str, Any], turns: dict[str, dict[str, Any]]) -> tuple[str, str, dict[str, Any] | None]:
    op = event["op"]
    if op == "capabilities":
        return "GET", "capabilities", None
    if op in ("start_run", "replay_turn"):
        key = str(event["key"])
        if op == "start_run" or key not in turns:
            body = {"client_conversation_id": key, "client_turn_id": "t", "user_message_id": "m", "user_input": key}
            if event.get("delivery"):
                body["knowledge_delivery"] = event["delivery"]
            turns[key] = body
        return "POST", "turns", turns[key]
    if op == "search":
        return "POST", "search", {"query": event.get("query", ""), "run_id": event.get("run")}
    if op == "read":
        read: dict[str, Any] = {"ref": event.get("ref"), "run_id": event.get("run")}
        read |= {k: event[k] for k in ("cursor", "max_bytes") if event.get(k) is not None}
        return "POST", "read", read
    raise TranscriptError(f"an exchange of unknown operation {op!r}")


def read_transcript(path: str | Path, cfg: TargetConfig) -> Iterator[Seen]:
    file = Path(path)
    try:
        if file.stat().st_size > MAX_TRANSCRIPT_BYTES:
            raise TranscriptError(f"{file}: over the {MAX_TRANSCRIPT_BYTES} bytes a transcript may have")
        data = json.loads(file.read_text("utf-8"))
    except OSError as exc:
        raise TranscriptError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"{file}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("steps"), list):
        raise TranscriptError(f"{file}: not a transcript of format {FORMAT}")
    clock, number = 0.0, 0
    turns: dict[str, dict[str, Any]] = {}
    for step in data["steps"]:
        event = step.get("event") if isinstance(step, dict) else None
        if not isinstance(event, dict):
            raise TranscriptError(f"{file}: a step without an event")
        if "status" not in step:
            if event.get("op") == "advance":
                clock += float(event.get("seconds", 0.0))
            continue
        method, operation, request = _request(event, turns)
        number += 1
        at = step.get("at") or [0.0, 0.0]
        sent, answered = clock + float(at[0]), clock + float(at[1])
        who = str(event.get("who", "primary"))
        path = cfg.path(operation, route_of(who) if who in IDENTITIES else "home")
        yield Seen(
            number,
            sent,
            max(sent, answered),
            method,
            path,
            "",
            digest(f"transcript-{who}"),
            _body(request) if request is not None else Body(b"", 0, True),
            int(step["status"]),
            _body(step.get("body", "")),
            (("content-type", "application/json"),),
            headers_known=False,
        )
