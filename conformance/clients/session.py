"""What a client check holds: the running harness, the world, the wire, and small readers
of answers (an error's next_action wherever the client put it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from conformance.clients import rules as clients
from conformance.clients.core import Wire
from conformance.clients.protocol import Answer, Harness
from conformance.clients.world import World
from conformance.common.control import Control
from conformance.common.outcomes import NotVerified
from conformance.common.rules import expect
from conformance.server.checks import describe


@dataclass
class Session:
    harness: Harness
    world: World
    control: Control
    surfaces: list[str]
    strict: bool = False  # --strict: this project's choices too, where the seed is open (CHOICES.md)

    @property
    def wire(self) -> Wire:
        return Wire(self.control)

    def needs(self, surface: str) -> None:
        if surface not in self.surfaces:
            raise NotVerified(f"not verified: the harness declares no {surface} surface (its start answer)")

    def call(self, cmd: str, **fields: Any) -> Answer:
        return self.harness.call(cmd, **fields)

    def turn(
        self,
        connection: str,
        delivery: str = "inline",
        *,
        ids: dict[str, str] | None = None,
        text: str = "homepage binding",
        model_input: dict[str, Any] | None = None,
    ) -> Answer:
        extra = {"model_input": model_input} if model_input is not None else {}
        return self.call(
            "turn",
            connection=connection,
            input=text,
            ids=ids or self.world.turn_ids(connection),
            delivery=delivery,
            **extra,
        )

    def fresh_ref(self, doc: str, connection: str = "main") -> tuple[str, str, str, int]:
        """``(route, run, ref, mark)`` on ``connection``: a run started and a reference to ``doc``
        found directly on the Core (not through the client), then a mark in the wire transcript.
        Checks that arm canned answers use the canned connection: one left armed harms no other check."""
        route = self.world.route(connection)
        direct = self.world.direct(connection)
        run = direct.turn()["run_id"]
        ref = direct.ref(run, doc)
        return route, run, ref, self.wire.mark(route)

    def host(
        self,
        call: str,
        input: dict[str, Any],
        connection: str,
        *,
        signal: str | None = None,
        binding: dict[str, Any] | None = None,
        workspace: str | None = None,
    ) -> Answer:
        conn = self.world.connections[connection]
        options: dict[str, Any] = {
            "workspace": workspace or conn["route"],
            "connectionKey": connection,
            "expectedBinding": binding or conn["binding"],
        }
        if signal is not None:
            options["signal"] = signal
        return self.call("host_call", call=call, input=input, options=options)


def next_action(answer: Answer) -> str | None:
    """The next_action of an error answer: its own, or its feedback object's."""
    if answer.error is None:
        return None
    action = answer.error.get("next_action")
    feedback = answer.error.get("feedback")
    if action is None and isinstance(feedback, dict):
        action = feedback.get("next_action")
    return None if action is None else str(action)


def requests(entries: list[dict[str, Any]], method: str, endpoint: str) -> list[dict[str, Any]]:
    """The transcript entries of one Core endpoint (``capabilities``, ``search``, ``read``, ``turns``)."""
    suffix = "/turns" if endpoint == "turns" else f"/knowledge/{endpoint}"
    return [e for e in entries if e["method"] == method and str(e["path"]).endswith(suffix)]


def exchange(entries: list[dict[str, Any]]) -> str:
    """The wire exchanges a check judged, as a failure names them: method, endpoint, status, body."""
    if not entries:
        return "no request reached the Core"
    return "; ".join(
        f"{e['method']} .../{str(e['path']).rsplit('/', 1)[-1]} -> {e.get('status')} {describe(e.get('body'))}"
        for e in entries[:3]
    ) + (f"; and {len(entries) - 3} more" if len(entries) > 3 else "")


def mapped(entries: list[dict[str, Any]]) -> None:
    """A check that needs searches and reads to reach the Core as the contract spells them
    names READ-018 when they do not (and its own rule stays unjudged)."""
    for e in entries:
        body = e.get("body") or {}
        expect(
            "run_id" in body and not ({"runId", "maxBytes"} & set(body)),
            clients.READ_018,
            f"{str(e['path']).rsplit('/', 1)[-1]} went out without the wire names run_id/max_bytes: {describe(body)}",
        )


def client_failed(what: str) -> NoReturn:
    """The client under test failed a call a check builds on: its own failure, never a harness error
    (that means the suite or its Core broke). Unless a rule names it, what the check needed it for
    stays not verified, so such a client is never conformant by it."""
    raise NotVerified(f"not verified: {what} (the client's own failure, before what this check judges)")


def hints(session: Session, answer: Answer, mark: int, route: str) -> list[dict[str, Any]]:
    """The hints of a search a check builds on; when there are none, the wire says whose fault that is."""
    mapped(requests(session.wire.since(mark, route), "POST", "search"))
    if not (answer.ok and answer.value["hints"]):
        client_failed(f"the client's search found nothing to build on: {answer.describe()}")
    return list(answer.value["hints"])
