"""The harness of the project's reference client (``conformance.clients.reference_client.ReferenceClient``),
with a small reference host transport over it: ``python -m conformance.clients.reference``.

It is also the model a harness author copies: read one JSON command a line, call the client,
write one answer a line (schemas/harness-protocol.schema.json). Broken clients for the
project's own tests subclass it and drop one obligation each (``conformance.clients.miniatures``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx

from conformance import __version__
from conformance.clients import PROTOCOL
from conformance.clients.reference_client import Capabilities, KnowledgeError, ReferenceClient

HOST_INPUTS = {
    "searchKnowledge": {"query": "query", "limit": "limit"},
    "readKnowledge": {"ref": "ref", "cursor": "cursor", "maxBytes": "maxBytes", "max_bytes": "maxBytes"},
}
"""What a host call takes from a model's input (snake-case aliases included); anything else a model
passes (an identity, route, connection or run) is ignored: the options and the current turn decide those."""


class Refusal(Exception):
    """A harness-level error answer with a stable kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Connection:
    key: str
    route: str
    binding: dict[str, Any]
    client: ReferenceClient
    run_id: str | None = None  # the current run: the latest turn's
    pending: dict[str, Any] | None = None  # a binding that takes effect when the next response arrives
    responses: int = 0


@dataclass
class ReferenceHarness:
    name: str = "reference-client"
    out: TextIO = field(default_factory=lambda: sys.stdout)
    connections: dict[str, Connection] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    arming: set[str] = field(default_factory=set)  # aborted as soon as the next request has gone out

    # ------------------------------------------------------------- plumbing
    def serve(self, lines: TextIO) -> None:
        for line in lines:
            if not line.strip():
                continue
            command = json.loads(line)
            self.out.write(json.dumps(self.answer(command)) + "\n")
            self.out.flush()
            if command.get("cmd") == "stop":
                return

    def answer(self, command: Mapping[str, Any]) -> dict[str, Any]:
        handler: Callable[[Mapping[str, Any]], Any] | None = getattr(self, f"do_{command.get('cmd')}", None)
        try:
            if handler is None:
                raise Refusal("unsupported_command", f"no command {command.get('cmd')!r}")
            return {"id": command["id"], "ok": True, "value": handler(command)}
        except Refusal as exc:
            return {"id": command["id"], "ok": False, "error": {"kind": exc.kind, "message": str(exc)}}
        except KnowledgeError as exc:
            return {"id": command["id"], "ok": False, "error": self.error_of(exc)}
        except httpx.TransportError as exc:
            return {"id": command["id"], "ok": False, "error": {"kind": "network_error", "message": str(exc)}}
        except (ValueError, KeyError, TypeError) as exc:
            return {"id": command["id"], "ok": False, "error": {"kind": "invalid_input", "message": repr(exc)}}

    @staticmethod
    def error_of(exc: KnowledgeError) -> dict[str, Any]:
        fb = exc.feedback
        kind = (
            "invalid_response"
            if fb["code"] in ("unknown_schema", "invalid_response")
            else "network_error"
            if fb["code"] == "network_error"
            else "core_error"
        )
        return {
            "kind": kind,
            "message": str(fb["message"]),
            "code": fb["code"],
            "next_action": fb["next_action"],
            "retryable": bool(fb["retryable"]),
            "feedback": fb,
        }

    def connection(self, key: str) -> Connection:
        if key not in self.connections:
            raise Refusal("invalid_input", f"no connection {key!r}")
        return self.connections[key]

    def make_client(self, http: httpx.Client, route: str, token: str) -> ReferenceClient:
        return ReferenceClient(http, route, token)

    # ------------------------------------------------------------- commands
    def do_start(self, command: Mapping[str, Any]) -> dict[str, Any]:
        for spec in command["connections"]:
            holder: dict[str, Connection] = {}

            def arrived(response: httpx.Response, holder: dict[str, Connection] = holder) -> None:
                conn = holder["conn"]
                conn.responses += 1
                if conn.pending is not None:  # the session changed while the request was in flight
                    conn.binding, conn.pending = conn.pending, None

            http = httpx.Client(
                base_url=command["core_url"],
                timeout=float(command.get("timeout_seconds", 30)),
                event_hooks={"request": [self.sent], "response": [arrived]},
            )
            conn = Connection(
                spec["key"], spec["route"], dict(spec["binding"]), self.make_client(http, spec["route"], spec["token"])
            )
            holder["conn"] = conn
            self.connections[conn.key] = conn
        return {
            "protocol": PROTOCOL,
            "client": {"name": "knowledge-conformance reference client", "version": __version__},
            "harness": {"name": self.name, "version": __version__},
            "language": f"Python {sys.version.split()[0]}",
            "surfaces": ["client", "host"],
        }

    def do_capabilities(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return self.capabilities_value(self.connection(command["connection"]).client.get_knowledge_capabilities())

    @staticmethod
    def capabilities_value(caps: Capabilities) -> dict[str, Any]:
        return {"supported": caps.supported, "enabled": caps.enabled, "limits": dict(caps.limits)}

    def delivery(self, conn: Connection, command: Mapping[str, Any]) -> str | None:
        """The host option decides; a model's input never does. negotiate: the seed's flow."""
        choice = command["delivery"]
        if choice == "negotiate":
            return "on_demand" if conn.client.get_knowledge_capabilities().supported else None
        return "on_demand" if choice == "on_demand" else None

    def do_turn(self, command: Mapping[str, Any]) -> dict[str, Any]:
        conn = self.connection(command["connection"])
        turn = conn.client.start_turn(command["input"], command["ids"], knowledge_delivery=self.delivery(conn, command))
        conn.run_id = str(turn["run_id"])
        return turn

    def do_search(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return self.connection(command["connection"]).client.search_knowledge(command["input"])

    def do_read(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return self.connection(command["connection"]).client.read_knowledge(command["input"])

    def do_read_all(self, command: Mapping[str, Any]) -> dict[str, Any]:
        data = command["input"]
        run = data.get("runId", data.get("run_id"))
        chain = self.connection(command["connection"]).client.read_chain(
            data["ref"], run, max_bytes=data.get("maxBytes", data.get("max_bytes"))
        )
        return {
            "complete": chain.complete,
            "truncated": chain.truncated,
            "budget_exhausted": chain.budget_exhausted,
            "pages": chain.pages,
            "content": chain.content,
            "description": chain.describe(),
        }

    def do_cancel(self, command: Mapping[str, Any]) -> dict[str, Any]:
        (self.arming if command.get("when") == "during_next_request" else self.aborted).add(command["signal"])
        return {}

    def sent(self, _request: httpx.Request) -> None:
        """A request is on its way: a signal armed to abort during it is aborted now."""
        self.aborted |= self.arming
        self.arming.clear()

    def do_rebind(self, command: Mapping[str, Any]) -> dict[str, Any]:
        conn = self.connection(command["connection"])
        if command["when"] == "now":
            conn.binding, conn.pending = dict(command["binding"]), None
        else:
            conn.pending = dict(command["binding"])
        return {}

    def do_stop(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    # -------------------------------------------------------- host transport
    def do_host_call(self, command: Mapping[str, Any]) -> dict[str, Any]:
        options = command["options"]
        conn = self.connection(options["connectionKey"])
        if options["workspace"] != conn.route:
            raise Refusal("invalid_input", f"workspace {options['workspace']!r} is not the connection's")
        self.check_binding(conn, options, "before")
        self.check_signal(options)
        try:
            value = self.host_work(command["call"], conn, self.host_input(command["call"], conn, command["input"]))
        except Exception:
            self.after_failed_work(conn, options)
            raise
        self.after_work(conn, options)
        return value

    def after_work(self, conn: Connection, options: Mapping[str, Any]) -> None:
        self.check_signal(options)
        self.check_binding(conn, options, "after")

    def after_failed_work(self, conn: Connection, options: Mapping[str, Any]) -> None:
        """The checks after the asynchronous work, when it raised: a Core's error belongs to the
        old binding as much as a result does."""
        self.after_work(conn, options)

    def check_binding(self, conn: Connection, options: Mapping[str, Any], when: str) -> None:
        if conn.binding != options["expectedBinding"]:
            raise Refusal(
                "binding_changed",
                f"agent_binding_changed: the connection's binding is not the expected one ({when} the request)",
            )

    def check_signal(self, options: Mapping[str, Any]) -> None:
        if options.get("signal") in self.aborted:
            raise Refusal("cancelled", f"signal {options['signal']!r} was aborted")

    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        """The model's input reduced to what it may choose; the run is the connection's current run."""
        if call == "getKnowledgeCapabilities":
            return {}
        if conn.run_id is None:
            raise Refusal("invalid_input", "start the authorized user turn first: reads bind the current run")
        allowed = HOST_INPUTS[call]
        data = {allowed[k]: v for k, v in given.items() if k in allowed}
        return {**data, "runId": conn.run_id}

    def host_work(self, call: str, conn: Connection, data: dict[str, Any]) -> dict[str, Any]:
        if call == "getKnowledgeCapabilities":
            return self.capabilities_value(conn.client.get_knowledge_capabilities())
        if call == "searchKnowledge":
            return conn.client.search_knowledge(data)
        return conn.client.read_knowledge(data)


def main(harness: ReferenceHarness | None = None) -> int:
    (harness or ReferenceHarness()).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
