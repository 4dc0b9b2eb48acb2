"""A stateful model of the contract, driven by Hypothesis.

The model keeps its own clock, runs, issued references, revisions and scope
changes, and predicts each read's outcome; the target must agree after every
step. A failure shrinks to a minimal sequence of steps, printed as a program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from conformance import checks
from conformance import contract as C
from conformance.checks import expect
from conformance.world import provision

R = pytest.mark.requirement
DOCS = ("alpha", "filler0", "second")
# The walk's seed. derandomize alone seeds from the machine's source text, so any edit of a
# rule body reshuffled the whole walk, and with it which rules the default depth reaches
# (few walks of 20 examples reach every claimed rule). A fixed seed replays the same walk
# across such edits; this one reaches every claimed rule at the default depth.
WALK_SEED = 14


@dataclass(frozen=True)
class IssuedRef:
    ref: str
    run_id: str
    doc: str
    issued_at: float
    revision: int
    scope_epoch: int
    visible_when_issued: bool


def _machine(make_world: Any, skew: float, exercised: set[str]) -> type[RuleBasedStateMachine]:
    """``exercised`` collects the requirement IDs whose checks actually ran."""

    class KnowledgeContract(RuleBasedStateMachine):
        runs = Bundle("runs")
        refs = Bundle("refs")

        @initialize(target=runs)
        def setup(self) -> str:
            self.world = make_world()
            self.now = 0.0
            self.revision = {d: 0 for d in DOCS}
            self.scope_epoch = 0
            self.second_visible = True
            return str(self.world.start_run())

        # ------------------------------------------------------------ turns
        @rule(target=runs, delivery=st.sampled_from(["on_demand", "inline"]))
        def start_turn(self, delivery: str) -> str:
            from conformance.wire import CoreWire

            body = CoreWire.turn_body("binding", delivery)
            first = checks.ok(self.world.core.turn(self.world.primary.token, self.world.route, body), "TURN-003", "turn")
            again = checks.ok(self.world.core.turn(self.world.primary.token, self.world.route, body), "TURN-004", "replayed turn")
            expect(first["run_id"] == again["run_id"], "TURN-004", "a replayed turn started another run")
            exercised.add("TURN-004")
            return str(first["run_id"])

        # ----------------------------------------------------------- search
        @rule(target=refs, run=runs, doc=st.sampled_from(DOCS))
        def search(self, run: str, doc: str) -> Any:
            """Documents are recognised by their content (world.hint_for), never by rank or title wording."""
            item = self.world.docs[doc]
            body = checks.search_response(self.world.search(item.token, run))
            expect(body["status"] == "ok", "SRCH-005", f"a normal workspace searched with status {body['status']!r}")
            visible = doc != "second" or self.second_visible
            if not visible:
                leaked = [h.get("title") for h in body["hints"] if self.world.shows(h, item, run)]
                expect(not leaked, "REF-007", f"{doc} is out of scope but was found: {leaked}")
                return _nothing()
            hint = self.world.hint_for(body["hints"], item, run)
            if hint is None:  # search need not find it; the walk goes on without a reference
                expect(not self.world.cfg.strict_codes, "SRCH-001", f"strict: {doc} is in scope but no hint reads as it")
                return _nothing()
            return IssuedRef(hint["ref"], run, doc, self.now, self.revision[doc], self.scope_epoch, visible)

        @rule()
        def unavailable_search(self) -> None:
            run_id = self.world.start_run()  # before arming: a turn's own hint search would take the fault
            self.world.control.fault("fail_next_search_unavailable", self.world.route)
            body = checks.search_response(self.world.search("binding", run_id))
            expect(body["status"] == "unavailable", "SRCH-010", f"an unavailable search reported {body['status']!r}")
            exercised.add("SRCH-010")

        # ------------------------------------------------------------- read
        def _causes(self, issued: IssuedRef) -> dict[str, bool]:
            """Each reason a read of ``issued`` may be refused, by error kind, and whether it holds."""
            age = self.now - issued.issued_at
            return {
                "reference_expired": age >= C.REFERENCE_TTL_SECONDS - skew,
                "revision_changed": issued.revision != self.revision[issued.doc],
                "scope_changed": issued.scope_epoch != self.scope_epoch or (issued.doc == "second" and not self.second_visible),
            }

        def _predict(self, issued: IssuedRef) -> tuple[str, str, set[str]]:
            """The expected outcome, the requirement that predicts it, and the error kinds a refusal may carry.

            When several causes hold at once the seeds do not say which one wins,
            so a refusal may name any of them."""
            age = self.now - issued.issued_at
            kinds = {kind for kind, holds in self._causes(issued).items() if holds}
            if age >= C.REFERENCE_TTL_SECONDS + skew:
                return "error", "REF-001", kinds
            if issued.revision != self.revision[issued.doc]:
                return "error", "REF-008", kinds
            if issued.doc == "second" and not self.second_visible:
                return "error", "REF-007", kinds
            if issued.scope_epoch != self.scope_epoch:
                return "either", "REF-007", kinds
            if age >= C.REFERENCE_TTL_SECONDS - skew:
                return "either", "REF-001", kinds
            return "ok", "REF-002", kinds

        @rule(issued=refs, max_bytes=st.sampled_from([None, C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES]))
        def read(self, issued: Any, max_bytes: int | None) -> None:
            if not isinstance(issued, IssuedRef):
                return
            expected, rule_id, kinds = self._predict(issued)
            extra = {} if max_bytes is None else {"max_bytes": max_bytes}
            response = self.world.read(issued.ref, issued.run_id, **extra)
            if expected == "error":
                checks.reference_error(response, self.world.cfg, kinds, requirement=rule_id, text=self.world.document_text())
                exercised.add(rule_id)
            elif expected == "ok":
                expect(response.status_code == 200, rule_id, f"a valid reference was refused: HTTP {response.status_code} {response.text[:200]}")
                exercised.add(rule_id)
            if response.status_code == 200:
                bound = "READ-005" if max_bytes else "READ-004"
                checks.page(response, ref=issued.ref, max_bytes=max_bytes, requirement_bound=bound)
                exercised.add(bound)
            elif expected == "either":
                checks.reference_error(response, self.world.cfg, kinds, requirement=rule_id, text=self.world.document_text())
                exercised.add(rule_id)

        @rule(issued=refs, run=runs)
        def read_under_another_run(self, issued: Any, run: str) -> None:
            if not isinstance(issued, IssuedRef) or run == issued.run_id:
                return
            kinds = {"reference_mismatch", *(kind for kind, holds in self._causes(issued).items() if holds)}
            checks.reference_error(self.world.read(issued.ref, run), self.world.cfg, kinds, requirement="REF-006", text=self.world.document_text())
            exercised.add("REF-006")

        # ------------------------------------------------- state and time
        @rule(seconds=st.sampled_from([1.0, 60.0, 150.0, 298.0, 299.0, 301.0, 302.0]))
        def advance_clock(self, seconds: float) -> None:
            self.world.control.advance(seconds)
            self.now += seconds

        @rule(doc=st.sampled_from(DOCS))
        def publish_revision(self, doc: str) -> None:
            self.revision[doc] += 1
            item = self.world.docs[doc]
            self.world.control.publish(self.world.route, item.item_id, f"{item.token} binding revision {self.revision[doc]}")

        @rule()
        def toggle_scope(self) -> None:
            self.second_visible = not self.second_visible
            bases = ["kb-main", "kb-second"] if self.second_visible else ["kb-main"]
            self.world.control.set_scope(self.world.route, self.world.primary.account, bases)
            self.scope_epoch += 1

        @rule(mode=st.sampled_from(["disabled", "unavailable"]))
        def switch_mode_and_back(self, mode: str) -> None:
            """A mode is a round trip, so the rest of the walk stays where the seeds predict outcomes."""
            run_id = self.world.start_run()
            self.world.control.set_mode(self.world.route, mode)
            try:
                body = checks.search_response(self.world.search("binding", run_id))
            finally:
                self.world.control.set_mode(self.world.route, "normal")
            rule_id = "SRCH-010" if mode == "unavailable" else "SRCH-009"
            expect(body["status"] == mode, rule_id, f"in mode {mode} search reported {body['status']!r} with {len(body['hints'])} hints")
            exercised.add(rule_id)

    return seed(WALK_SEED)(KnowledgeContract)


def _nothing() -> Any:
    """What the search rule adds to the refs bundle when the document is out of scope or not found."""
    return None


@R("REF-001", "REF-002", "REF-006", "REF-007", "REF-008", "TURN-004", "SRCH-009", "SRCH-010", "READ-004", "READ-005")
def test_stateful_model_agrees_with_the_target(kc_config: Any, core: Any, control: Any, pytestconfig: pytest.Config,
                                               record_exercised: Any) -> None:
    """Only the IDs whose checks the random walk reached count as verified by this test."""
    if control is None:
        pytest.skip("not verified: the stateful model drives time and state through the test-control extension")
    deep = pytestconfig.getoption("--deep")
    examples = pytestconfig.getoption("--stateful-examples") or (200 if deep else 20)
    steps = pytestconfig.getoption("--stateful-steps") or (60 if deep else 25)
    exercised: set[str] = set()
    machine = _machine(lambda: provision(kc_config, core, control, large=False), kc_config.clock_skew_seconds, exercised)
    record_exercised(exercised)
    phases = [p for p in Phase if not (p is Phase.shrink and pytestconfig.getoption("--no-shrink"))]
    run_state_machine_as_test(machine, settings=settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                                                         derandomize=True, database=None, phases=phases,
                                                         suppress_health_check=list(HealthCheck)))
