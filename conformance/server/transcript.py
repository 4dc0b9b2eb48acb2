"""Judging exchanges against the model (``conformance.server.model``), live or recorded.

A transcript is what a driver did to a target, in order: the world it started
from, each control step (time, revisions, scopes, modes) and each exchange with
the target's response, byte for byte. The Hypothesis state machine of
``conformance/suite/server/test_stateful.py`` judges every exchange through a ``Checker``
as it happens and keeps its transcript; ``replay`` feeds a recorded transcript
through a fresh ``Checker`` and names the first step at which the target left
what the model allows. One judge for both, so they cannot disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.common.outcomes import ContractViolation
from conformance.common.rules import expect
from conformance.common.secrets import clip
from conformance.common.transport import judged
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.leaks import DocumentText
from conformance.server.model import (
    HOME,
    OTHER_KINDS,
    REFERENCE_KINDS,
    Model,
    ModelError,
    PageOutcome,
    Prediction,
    build_docs,
)

FORMAT = "knowledge-conformance.server.transcript.v1"


@dataclass(frozen=True)
class Deviation:
    """The first step of a transcript whose response the model does not allow."""

    step: int
    requirement: str
    message: str


class Checker:
    """The model, the judge of each response against its prediction, and the transcript so far.

    ``world`` is ``{"routes": {route label: {doc key: {token, base, title, text}}}}``.
    ``exercised`` collects the requirement IDs whose checks ran on a definite prediction."""

    def __init__(
        self,
        world: dict[str, Any],
        cfg: TargetConfig,
        *,
        text: DocumentText | None = None,
        exercised: set[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world = world
        self.cfg = cfg
        self.model = Model(build_docs(world["routes"]), strict=cfg.strict_codes, skew=cfg.clock_skew_seconds)
        self.text = text if text is not None else DocumentText()
        self.text.add(d["text"] for docs in world["routes"].values() for d in docs.values())
        self.exercised: set[str] = exercised if exercised is not None else set()
        self.steps: list[dict[str, Any]] = []
        self.clock = clock

    def _times(self, response: httpx.Response) -> tuple[float, float]:
        answered = self.clock()
        try:
            took = response.elapsed.total_seconds()
        except RuntimeError:  # a response built by hand (a recording) has no elapsed time
            took = 0.0
        return answered - took, answered

    def transcript(self) -> dict[str, Any]:
        return {"format": FORMAT, "world": self.world, "steps": self.steps}

    # ------------------------------------------------------------ control
    def control(self, event: dict[str, Any]) -> None:
        """A step the driver took through the test-control extension: the model follows it."""
        self.steps.append({"event": event})
        op = event["op"]
        if op == "advance":
            self.model.advance(float(event["seconds"]))
        elif op == "publish":
            self.model.publish(event["route"], event["doc"], event["text"])
            self.text.add([event["text"]])
        elif op == "set_scope":
            self.model.set_scope(event["route"], event["account"], event["bases"])
        elif op == "set_mode":
            self.model.set_mode(event["route"], event["mode"])
        else:
            raise ModelError(f"unknown control step {op!r}")

    def invariants(self) -> None:
        found = self.model.invariant_violation()
        if found is not None:
            raise ContractViolation(found.rule, found.message)

    # ---------------------------------------------------------- exchanges
    def exchange(self, event: dict[str, Any], response: httpx.Response, at: tuple[float, float] | None = None) -> Any:
        """Record one exchange and judge the response; raises ContractViolation naming the broken rule.

        ``at`` is when the request was sent and answered on the suite's real clock (by default
        read from the clock and the response's elapsed time): the model widens every timed
        prediction by the real time a Core's running clock could have added."""
        sent, answered = at if at is not None else self._times(response)
        self.model.exchanged(sent, answered)
        self.steps.append(
            {"event": event, "status": response.status_code, "body": response.text, "at": [sent, answered]}
        )
        handlers = {
            "start_run": self._start_run,
            "replay_turn": self._replay_turn,
            "capabilities": self._capabilities,
            "search": self._search,
            "read": self._read,
        }
        if event["op"] not in handlers:
            raise ModelError(f"unknown exchange {event['op']!r}")
        return handlers[event["op"]](event, response)

    def _legacy(self, response: httpx.Response, what: str) -> None:
        """A workspace the control extension made legacy: how an emulated old Core answers is the
        extension's business, not a rule of the Core under test (NEG-005 is retired)."""

    def _start_run(self, event: dict[str, Any], response: httpx.Response) -> str:
        body = checks.ok(response, server.TURN_003, "turn")
        run_id = body.get("run_id") if isinstance(body, dict) else None
        expect(isinstance(run_id, str), server.TURN_003, f"the turn response has no run_id: {checks.describe(body)}")
        self.model.turn_started(event["who"], event["key"], str(run_id))
        return str(run_id)

    def _replay_turn(self, event: dict[str, Any], response: httpx.Response) -> None:
        body = checks.ok(response, server.TURN_004, "replayed turn")
        found = self.model.replay_violation(event["key"], body.get("run_id") if isinstance(body, dict) else None)
        if found is not None:
            raise ContractViolation(found.rule, found.message)
        self.exercised.add(server.TURN_004)

    def _capabilities(self, event: dict[str, Any], response: httpx.Response) -> None:
        enabled = self.model.predict_enabled(event["who"])
        if enabled is None:
            self._legacy(response, "capabilities")
            return
        body = checks.ok(response, server.CAP_001, "capabilities")
        name = self.cfg.names.capabilities["enabled"]
        expect(
            isinstance(body, dict) and body.get(name) is enabled,
            server.CAP_006,
            f"a workspace in mode {self.model.modes[HOME]!r} reports {name} {body.get(name) if isinstance(body, dict) else body!r}",
        )
        self.exercised.add(server.CAP_006)

    def _search(self, event: dict[str, Any], response: httpx.Response) -> list[dict[str, Any]]:
        who = event["who"]
        predicted = self.model.predict_search(who, event["run"])
        if predicted.legacy:
            self._legacy(response, "search")
            return []
        body = checks.search_response(response)
        if predicted.status is not None:
            expect(
                body["status"] == predicted.status,
                predicted.rule,
                f"a search in mode {predicted.status if predicted.status != 'ok' else 'normal'} reported status {body['status']!r}",
            )
            self.exercised.add(predicted.rule)
        if predicted.no_hints:
            expect(body["hints"] == [], predicted.rule, f"a disabled workspace returned {len(body['hints'])} hints")
        for hint in body["hints"]:
            leaked = [t for t in predicted.hidden_titles if t in str(hint.get("title", ""))]
            expect(
                not leaked,
                server.REF_007,
                f"a hint shows {leaked[0]!r}, a document outside the account's scope" if leaked else "",
            )
        self.model.hints_issued(who, event["run"], [h["ref"] for h in body["hints"]])
        return list(body["hints"])

    def _read(self, event: dict[str, Any], response: httpx.Response) -> PageOutcome | None:
        tampered = event.get("tampered")
        predicted = self.model.predict_read(
            event["who"],
            event["run"],
            event["ref"],
            event.get("cursor"),
            tampered=tampered,
            original=event.get("original"),
        )
        try:
            return self._judge_read(event, predicted, response)
        finally:
            if tampered != "cursor":
                self.model.presented_cursor(event.get("cursor"))

    def _judge_read(self, event: dict[str, Any], predicted: Prediction, response: httpx.Response) -> PageOutcome | None:
        if predicted.legacy:
            self._legacy(response, "read")
            return None
        judged(response)  # a failure below is this answer's: the report shows this exchange
        if response.status_code != 200:
            aged = f"{predicted.age:g}" + (f"-{predicted.age + predicted.slack:.3f}" if predicted.slack else "")
            expect(
                predicted.verdict != "page",
                server.READ_001 if event.get("identify") else server.REF_002,
                lambda: (
                    f"a valid reference ({aged} s old by the Core's clock) was refused: HTTP {response.status_code} {clip(response.text, 200)}"
                ),
            )
            self._refusal(predicted, response)
            if predicted.single is not None:
                self.exercised.add(predicted.single)
            return None
        expect(predicted.verdict != "refused", predicted.rule, f"the target served a page although {predicted.why()}")
        max_bytes = event.get("max_bytes")
        bound = server.READ_004 if max_bytes is None else server.READ_005
        body = checks.page(response, ref=event["ref"], max_bytes=max_bytes, requirement_bound=bound)
        self.exercised |= {bound, server.READ_002, server.READ_003}
        if predicted.page is None:
            raise ModelError("a page where the model expected none")
        found, outcome = self.model.judge_page(event["who"], predicted.page, body)
        if found is not None:
            raise ContractViolation(found.rule, found.message)
        self.exercised |= outcome.exercised
        if predicted.verdict == "page" and predicted.age >= self.model.ttl - 1 - self.model.skew:
            self.exercised.add(server.REF_002)  # valid up to the last second before the edge
        return outcome

    def _refusal(self, predicted: Prediction, response: httpx.Response) -> None:
        """A refusal must carry the kind of a cause that holds; no document text, whatever the kind."""
        kinds = predicted.kinds
        others = kinds & OTHER_KINDS
        try:
            body = response.json()
        except ValueError:
            body = None
        code = body.get("error") if isinstance(body, dict) else None
        if others and not C.is_reference_error_code(code):
            allowed = range(400, 600) if "unavailable" in others else range(400, 500)
            envelope = checks.error_envelope(response, predicted.rule, statuses=allowed, strict=self.cfg.strict_codes)
            expect(
                response.status_code < 500 or response.status_code == 503,
                predicted.rule,
                f"a refusal because {predicted.why()} answered HTTP {response.status_code}",
            )
            if self.cfg.strict_codes and others == {"run_not_found"}:
                expect(
                    code == self.cfg.code("run_not_found") and response.status_code == self.cfg.status("run_not_found"),
                    server.REF_011,
                    f"refused with {response.status_code} {code!r}; strict expects a reference code or "
                    f"{self.cfg.status('run_not_found')} {self.cfg.code('run_not_found')!r}",
                )
            leaked = self.text.leaked(envelope)
            expect(leaked is None, server.REF_014, f"the refusal carries document text: {leaked!r}")
            return
        references = kinds & REFERENCE_KINDS
        expect(
            references,
            server.REF_011,
            f"refused with the reference code {code!r}, but no reference cause holds ({predicted.why()})",
        )
        checks.reference_error(response, self.cfg, references, requirement=predicted.rule, text=self.text)
        self.exercised |= {server.REF_011, server.REF_012, server.REF_014}


def response_of(step: dict[str, Any]) -> httpx.Response:
    """A recorded response, byte for byte as the target sent it."""
    return httpx.Response(
        int(step["status"]), content=str(step["body"]).encode("utf-8"), headers={"content-type": "application/json"}
    )


def replay(transcript: dict[str, Any], cfg: TargetConfig) -> Deviation | None:
    """Feed a recorded transcript to the model: the first step whose response it does not allow, or None."""
    if transcript.get("format") != FORMAT:
        raise ValueError(f"not a transcript of format {FORMAT}: {transcript.get('format')!r}")
    checker = Checker(transcript["world"], cfg)
    for index, step in enumerate(transcript["steps"]):
        try:
            if "status" in step:
                at = step.get("at")
                checker.exchange(step["event"], response_of(step), (float(at[0]), float(at[1])) if at else (0.0, 0.0))
            else:
                checker.control(step["event"])
            checker.invariants()
        except ContractViolation as exc:
            return Deviation(index, exc.requirement, str(exc))
    return None
