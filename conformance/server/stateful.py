"""The driver of the stateful test: a Hypothesis state machine over the target.

The model (``conformance/server/model.py``) follows everything the walk does: the clock,
revisions, scope changes, modes, several identities with several runs each, the
references search issued and the cursors pages offered. It predicts every
response exactly: a page (its bytes, cursor, truncated, budget_exhausted), a
refusal of a given kind, or either where the seeds leave it open. Each rule here
is a step on the target and the same step for the model, judged by
``conformance.server.transcript.Checker``; the walk's transcript can be replayed through
the model without the target. The test itself is ``conformance/suite/server/test_stateful.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.common.walk import Reach, Steps, seeded
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.corpus import MAIN_BASE, SECOND_BASE
from conformance.server.leaks import DocumentText
from conformance.server.model import AWAY, HOME, IDENTITIES, MODES, PageOutcome, Run, account_of, route_of
from conformance.server.transcript import Checker
from conformance.server.world import World

# REF-016 is not claimed: only a strict walk predicts the exact edge definitely, and a claim must be
# reachable by every walk; a strict failure at the edge still names it (conformance.server.model).
CLAIMS = (
    server.REF_001,
    server.REF_002,
    server.REF_003,
    server.REF_004,
    server.REF_005,
    server.REF_006,
    server.REF_007,
    server.REF_008,
    server.REF_009,
    server.REF_011,
    server.REF_012,
    server.REF_014,
    server.REF_015,
    server.READ_002,
    server.READ_003,
    *checks.CHAIN_RULES,
    server.READ_015,
    server.SRCH_005,
    server.SRCH_009,
    server.SRCH_010,
    server.TURN_004,
    server.CAP_006,
)
MODEL = "model"  # what the walk verified is kept under one key: the Checker judges every step, whatever rule made it
WHO = st.sampled_from(tuple(IDENTITIES))
LONG, MEDIUM = "filler0", "filler1"  # given a chain-budget-sized and a many-page revision at setup
SUBJECTS = ("alpha", "second", LONG, MEDIUM)
MAX_BYTES = st.sampled_from([None, C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES])
CHAIN_MAX_BYTES = st.sampled_from(
    [None, C.READ_MAX_MAX_BYTES]
)  # whole chains in few pages; small pages one step at a time
WAIT = st.sampled_from([0.0, 1.0, 60.0, 150.0])  # seconds that pass before a read; the expiry edge has its own rule
PICK = st.integers(min_value=0, max_value=255)  # which of the references the model holds
# The walk's default seed. derandomize alone seeds from the machine's source text, so any edit
# of a rule body would reshuffle the walk; a fixed seed replays it (--stateful-seed picks another).
# Reaching every claimed rule does not depend on it: ``tour`` reaches them all first.
WALK_SEED = 7


@cache
def revision_text(token: str, number: int, size: str) -> str:
    """A revision that starts with the document's token (so a read shows which document it is),
    with multi-byte and escaped characters on every line. ``long`` is longer than the chain budget
    plus a largest page, so even a chain of largest pages stops before its end."""
    head = f"{token} binding revision {number}. "
    if size == "short":
        return head + 'A short note with é, 😀 and "quotes".'
    lines = {"medium": 1000, "long": 3700}[size]
    return head + "".join(f'line {i:05d}/{number}: é😀中ß€ 数据 "q" \\ ü{i % 7}\n' for i in range(lines))


def _tamper(token: str) -> str:
    middle = len(token) // 2
    return token[:middle] + ("B" if token[middle] != "B" else "C") + token[middle + 1 :]


@dataclass(frozen=True)
class Held:
    """A reference the walk holds: whose, in which run, of which document."""

    token: str
    who: str
    run_id: str
    doc: str


@dataclass(frozen=True)
class HeldCursor:
    token: str
    ref: Held


def world_of(world: World) -> dict[str, Any]:
    """The model's view of a provisioned world: both routes hold the same corpus."""
    docs = {
        d.key: {"token": d.token, "base": d.base, "title": d.stored_title, "text": d.content}
        for d in world.docs.values()
    }
    return {"routes": {HOME: docs, AWAY: {k: dict(v) for k, v in docs.items()}}}


def canonical_text(world: World, key: str) -> str:
    """The text each example starts from: the seeded one, or a chain-sized or many-page revision."""
    if key in (LONG, MEDIUM):
        return revision_text(world.docs[key].token, 0, "long" if key == LONG else "medium")
    return world.docs[key].content


class KnowledgeContract(RuleBasedStateMachine):
    """The rules; ``machine`` makes the class a walk runs, bound to its world, configuration and reach.

    Provisioning a world (two workspaces, their corpora, six identities) costs more than a
    whole example's steps, so the walk provisions one and resets it at the start of each
    example: mode normal, full scopes, the same starting texts on both routes; runs,
    references and cursors of earlier examples are never used again. Every example, and
    every replay of one while shrinking, starts from the same state."""

    make_world: Callable[[], World]
    cfg: TargetConfig
    reach: Reach
    document_text: DocumentText  # one for the walk: every example writes the same revision texts
    shared: list[World]  # the one world, made by the first example
    latest: list[Checker]  # the latest example's checker (its model and transcript)

    runs = Bundle("runs")
    refs = Bundle("refs")
    cursors = Bundle("cursors")

    # ----------------------------------------------------------- world
    def _reset(self) -> None:
        if hasattr(self, "checker"):
            return
        if not self.shared:
            self.shared.append(type(self).make_world())
        self.world: World = self.shared[0]
        control = self._control()
        last = self.latest[0].model if self.latest else None
        if last is not None and last.modes[HOME] != "normal":
            control.set_mode(self.world.route, "normal")
        state = world_of(self.world)
        for label, name in ((HOME, "primary"), (HOME, "other_account"), (AWAY, "other_route")):
            person = self._who(name)
            if last is not None and last.scope(label, account_of(name)).epoch:
                control.set_scope(person.route, person.account, [MAIN_BASE, SECOND_BASE])
            if name == "other_account":
                continue
            for key in SUBJECTS:
                start = canonical_text(self.world, key) if label == HOME else self.world.docs[key].content
                if (last.docs[label][key].text if last is not None else self.world.docs[key].content) != start:
                    control.publish(person.route, self.world.docs[key].item_id, start)
                state["routes"][label][key]["text"] = start
        self.checker = Checker(state, self.cfg, text=self.document_text, exercised=self.reach.of(MODEL))
        self.exhausted = False
        self.latest[:] = [self.checker]

    @initialize(target=runs)
    def setup(self) -> Run:
        self._reset()
        return self._start("primary", "on_demand", replay=False)

    @initialize(target=refs)
    def first_reference(self) -> Held | MultipleResults[Held]:
        """A reference to the many-page revision from the first step on."""
        self._reset()
        return self._search_for(self._start("primary", "on_demand", replay=False), MEDIUM, swap=False)

    def _who(self, name: str) -> Any:
        return self.world.primary if name == "primary" else self.world.others[name]

    def _control(self) -> Any:
        assert self.world.control is not None
        return self.world.control

    def _publish(self, doc: str, size: str, route: str, label: str) -> None:
        text = revision_text(self.world.docs[doc].token, self.checker.model.docs[label][doc].revision + 1, size)
        self._control().publish(route, self.world.docs[doc].item_id, text)
        self.checker.control({"op": "publish", "route": label, "doc": doc, "text": text})

    def _start(self, who: str, delivery: str, *, replay: bool = True) -> Run:
        person = self._who(who)
        body = self.world.core.turn_body("binding", delivery)
        key = body["client_turn_id"]
        core = self.world.core
        run_id = self.checker.exchange(
            {"op": "start_run", "who": who, "key": key, "delivery": delivery},
            core.turn(person.token, person.route, body),
        )
        if replay:
            self.checker.exchange(
                {"op": "replay_turn", "who": who, "key": key}, core.turn(person.token, person.route, body)
            )
        return Run(run_id, who)

    # ----------------------------------------------------------- turns
    @precondition(lambda self: self.checker.model.modes[HOME] in ("normal", "partial", "unavailable"))
    @rule(target=runs, who=WHO, delivery=st.sampled_from(["on_demand", "inline"]))
    def start_turn(self, who: str, delivery: str) -> Run:
        """A new run of any identity, its turn replayed (the same run again). Not while knowledge is
        disabled or the Core is legacy: the seeds say nothing of turns then."""
        return self._start(who, delivery)

    # ---------------------------------------------------------- search
    @rule(target=refs, run=runs, doc=st.sampled_from(SUBJECTS), swap=st.booleans())
    def search(self, run: Run, doc: str, swap: bool) -> Held | MultipleResults[Held]:
        return self._search_for(run, doc, swap=swap)

    def _search_for(self, run: Run, doc: str, *, swap: bool) -> Held | MultipleResults[Held]:
        """Documents are recognised by reading their hints (the model identifies the content),
        never by rank or title wording; a document out of scope must not read from any hint."""
        who = run.who
        if swap and who in ("primary", "same_session"):  # another token of the same Agent Session
            who = "same_session" if who == "primary" else "primary"
        token = self.world.docs[doc].token
        hints = self.checker.exchange(
            {"op": "search", "who": who, "run": run.run_id, "query": token},
            self.world.search(token, run.run_id, self._who(who)),
        )
        for hint in sorted(hints, key=lambda h: token not in str(h.get("title", ""))):
            outcome = self._read(hint["ref"], who, run.run_id, None, None, identify=True)
            if outcome is not None and outcome.doc == doc:
                return Held(hint["ref"], who, run.run_id, doc)
        return multiple()

    # ------------------------------------------------------------ read
    def _read(
        self, ref: str, who: str, run_id: str, cursor: str | None, max_bytes: int | None, **extra: Any
    ) -> PageOutcome | None:
        body: dict[str, Any] = {} if max_bytes is None else {"max_bytes": max_bytes}
        if cursor is not None:
            body["cursor"] = cursor
        event = {
            "op": "read",
            "who": who,
            "run": run_id,
            "ref": ref,
            "cursor": cursor,
            "max_bytes": max_bytes,
            **extra,
        }
        outcome: PageOutcome | None = self.checker.exchange(event, self.world.read(ref, run_id, self._who(who), **body))
        return outcome

    @staticmethod
    def _continued(
        held: Held, who: str, run_id: str, outcome: PageOutcome | None
    ) -> HeldCursor | MultipleResults[HeldCursor]:
        if outcome is None or outcome.cursor is None:
            return multiple()
        return HeldCursor(outcome.cursor, Held(held.token, who, run_id, held.doc))

    @rule(target=cursors, held=refs, max_bytes=MAX_BYTES, wait=WAIT)
    def read(self, held: Held, max_bytes: int | None, wait: float) -> HeldCursor | MultipleResults[HeldCursor]:
        self._advance(wait)
        return self._continued(
            held, held.who, held.run_id, self._read(held.token, held.who, held.run_id, None, max_bytes)
        )

    @rule(target=cursors, held=refs, who=WHO, run=runs, max_bytes=MAX_BYTES)
    def read_elsewhere(
        self, held: Held, who: str, run: Run, max_bytes: int | None
    ) -> HeldCursor | MultipleResults[HeldCursor]:
        """Another identity, another run, or both: refused unless the binding and run are the reference's own."""
        return self._continued(held, who, run.run_id, self._read(held.token, who, run.run_id, None, max_bytes))

    @rule(target=cursors, cursor=cursors, max_bytes=MAX_BYTES, wait=WAIT)
    def continue_chain(
        self, cursor: HeldCursor, max_bytes: int | None, wait: float
    ) -> HeldCursor | MultipleResults[HeldCursor]:
        self._advance(wait)
        held = cursor.ref
        return self._continued(
            held, held.who, held.run_id, self._read(held.token, held.who, held.run_id, cursor.token, max_bytes)
        )

    @rule(target=cursors, cursor=cursors, who=WHO, run=runs)
    def cursor_elsewhere(self, cursor: HeldCursor, who: str, run: Run) -> HeldCursor | MultipleResults[HeldCursor]:
        held = cursor.ref
        return self._continued(held, who, run.run_id, self._read(held.token, who, run.run_id, cursor.token, None))

    @rule(held=refs, max_bytes=CHAIN_MAX_BYTES)
    def follow_chain(self, held: Held, max_bytes: int | None) -> None:
        """Page by page to the end of the revision or of the chain budget, the invariants after each page."""
        outcome = self._read(held.token, held.who, held.run_id, None, max_bytes)
        while outcome is not None and outcome.cursor is not None:
            self.checker.invariants()
            outcome = self._read(held.token, held.who, held.run_id, outcome.cursor, max_bytes)

    def _clean(self, age: float) -> list[Any]:
        """References younger than ``age`` that nothing but time can refuse, oldest first."""
        model = self.checker.model
        return [i for i in model.refs() if model.age(i.token) < age and model.unchanged(i)]

    def _pick(self, pick: int) -> Any:
        clean = self._clean(self.checker.model.ttl - self.checker.model.skew)
        return clean[pick % len(clean)]

    @precondition(lambda self: bool(self._clean(self.checker.model.ttl - self.checker.model.skew)))
    @rule(pick=PICK, with_cursor=st.booleans())
    def read_under_every_binding(self, pick: int, with_cursor: bool) -> None:
        """A valid reference (or the latest cursor of its chains) under each identity that differs from
        its own in one binding, in the reference's own run; under another run of its own binding; and
        altered by one character. It is picked among those nothing but the binding can refuse, so each
        refusal shows one binding at work."""
        model = self.checker.model
        held = self._pick(pick)
        cursor = model.latest_cursor(held.token) if with_cursor else None
        token = cursor.token if cursor is not None else None
        for who in ("other_hub", "other_session", "other_route", "other_account"):
            if IDENTITIES[who] != IDENTITIES[held.who]:
                self._read(held.token, who, held.run_id, token, None)
        mine = [r for r in model.runs.values() if r.binding == IDENTITIES[held.who] and r.run_id != held.run_id]
        if mine:
            self._read(held.token, held.who, mine[-1].run_id, token, None)
        if cursor is None:
            self._read(_tamper(held.token), held.who, held.run_id, None, None, tampered="ref", original=held.token)
        else:
            self._read(
                held.token,
                held.who,
                held.run_id,
                _tamper(cursor.token),
                None,
                tampered="cursor",
                original=cursor.token,
            )

    @precondition(lambda self: not self.exhausted)
    @rule(target=cursors)
    def read_to_the_budget(self) -> HeldCursor | MultipleResults[HeldCursor]:
        """Once an example: find the chain-sized document and follow it to the end of the chain budget
        (a few dozen pages); its cursors join the walk."""
        self.exhausted = True
        run = next(r for r in reversed(self.checker.model.runs.values()) if not IDENTITIES[r.who])
        held = self._search_for(run, LONG, swap=False)
        if not isinstance(held, Held):
            return multiple()
        first = self._read(held.token, held.who, held.run_id, None, C.READ_MAX_MAX_BYTES)
        outcome = first
        while outcome is not None and outcome.cursor is not None:
            self.checker.invariants()
            outcome = self._read(held.token, held.who, held.run_id, outcome.cursor, C.READ_MAX_MAX_BYTES)
        return self._continued(held, held.who, held.run_id, first)

    # ------------------------------------------------------------ time
    def _advance(self, seconds: float) -> None:
        if not seconds:
            return
        self._control().advance(seconds)
        self.checker.control({"op": "advance", "seconds": seconds})

    @rule()
    def tick(self) -> None:
        """Ten seconds pass. (Hypothesis draws the first rule of its order, no-target rules with the
        fewest arguments, more often than the others: this cheap one, not a costly chain.)"""
        self._advance(10.0)

    def _younger_than(self, age: float) -> list[Any]:
        model = self.checker.model
        return [i for i in model.refs() if model.age(i.token) < age]

    @precondition(lambda self: bool(self._younger_than(self.checker.model.ttl + 1 + self.cfg.clock_skew_seconds)))
    @rule(pick=PICK, edge=st.sampled_from(["before", "at", "after"]))
    def read_at_the_expiry_edge(self, pick: int, edge: str) -> None:
        """Move the clock to exactly 300 s after a reference was issued (or one second, plus the
        configured skew, either side) and read it: valid before, either at the edge, expired after.
        When no reference is young enough for the edge drawn, the latest edge still ahead is used;
        references nothing but time can refuse go first, so the read shows the expiry at work."""
        ttl = self.checker.model.ttl
        skew = self.cfg.clock_skew_seconds
        offsets = {"before": -1.0 - skew, "at": 0.0, "after": 1.0 + skew}
        if not self._younger_than(ttl + offsets[edge]):
            edge = "after"
        candidates = self._clean(ttl + offsets[edge]) or self._younger_than(ttl + offsets[edge])
        issued = candidates[pick % len(candidates)]
        self._advance(ttl + offsets[edge] - self.checker.model.age(issued.token))
        self._read(issued.token, issued.who, issued.run_id, None, None)

    # ------------------------------------------------- revisions, scope, modes
    @precondition(lambda self: bool(self._clean(self.checker.model.ttl - self.checker.model.skew)))
    @rule(pick=PICK, size=st.sampled_from(["short", "medium", "long"]))
    def publish_revision(self, pick: int, size: str) -> None:
        """A new revision of a document the walk holds a valid reference to; that reference is read at
        once, and from the latest cursor of its chains."""
        held = self._pick(pick)
        self._publish(held.doc, size, self._who(held.who).route, route_of(held.who))
        self._read_again(held)

    @precondition(lambda self: bool(self._clean(self.checker.model.ttl - self.checker.model.skew)))
    @rule(pick=PICK, keep=st.booleans())
    def scope_change(self, pick: int, keep: bool) -> None:
        """The scope of the account a valid reference was issued to: keep only the document's base (the
        seeds leave the reference's fate open) or only the other base (refused); it is read at once,
        and from the latest cursor of its chains."""
        held = self._pick(pick)
        base = self.world.docs[held.doc].base
        bases = [base] if keep else [b for b in (MAIN_BASE, SECOND_BASE) if b != base]
        person = self._who(held.who)
        self._control().set_scope(person.route, person.account, bases)
        self.checker.control(
            {"op": "set_scope", "route": route_of(held.who), "account": account_of(held.who), "bases": bases}
        )
        self._read_again(held)

    def _read_again(self, held: Any) -> None:
        self._read(held.token, held.who, held.run_id, None, None)
        cursor = self.checker.model.latest_cursor(held.token)
        if cursor is not None:
            self._read(held.token, held.who, held.run_id, cursor.token, None)

    @rule(mode=st.sampled_from(MODES), stay=st.booleans())
    def switch_mode(self, mode: str, stay: bool) -> None:
        """Capabilities, a search and a read show the mode at once; it stays until the next switch, or
        is switched back to normal at once. Legacy: the Core picks one of the configured unsupported
        statuses, the suite never chooses it."""
        self._switch(mode)
        self._probe(mode)
        if not stay and mode != "normal":
            self._switch("normal")

    def _switch(self, mode: str) -> None:
        self._control().set_mode(self.world.route, mode)
        self.checker.control({"op": "set_mode", "route": HOME, "mode": mode})

    def _probe(self, mode: str) -> None:
        model = self.checker.model
        person = self.world.primary
        self.checker.exchange(
            {"op": "capabilities", "who": "primary"}, self.world.core.capabilities(person.token, person.route)
        )
        run = next(r for r in reversed(model.runs.values()) if route_of(r.who) == HOME and not IDENTITIES[r.who])
        self.checker.exchange(
            {"op": "search", "who": run.who, "run": run.run_id, "query": "binding"},
            self.world.search("binding", run.run_id, self._who(run.who)),
        )
        issued = [i for i in self._clean(model.ttl - self.cfg.clock_skew_seconds) if i.route == HOME] or [
            i for i in model.refs() if i.route == HOME
        ]
        if issued:
            self._read(issued[-1].token, issued[-1].who, issued[-1].run_id, None, None)

    # ------------------------------------------------------ invariants
    @precondition(lambda self: hasattr(self, "checker"))
    @invariant()
    def chains_within_the_budget_and_one_revision_each(self) -> None:
        self.checker.invariants()


def machine(
    make_world: Callable[[], World],
    cfg: TargetConfig,
    checkers: list[Checker] | None = None,
    walk_seed: int | str = WALK_SEED,
) -> type[KnowledgeContract]:
    """The state machine over one world (made once, reset at the start of each example); its
    ``reach`` collects the IDs whose checks ran on a definite prediction (``reach.of(MODEL)``: the
    model judges every step, so no rule is tagged), ``checkers`` keeps the latest example's checker."""
    walk = type(
        "KnowledgeContract",
        (KnowledgeContract,),
        {
            "make_world": staticmethod(make_world),
            "cfg": cfg,
            "reach": Reach(),
            "document_text": DocumentText(),
            "shared": [],
            "latest": checkers if checkers is not None else [],
        },
    )
    return seeded(walk, walk_seed)


def tour(walk: type[RuleBasedStateMachine]) -> None:
    """One scripted example through the same rules, model and checker: every claimed rule is
    reached whatever the random walk's seed drew, and the walk is left to explore around it.
    The order matters only so that each step finds what it needs (a young reference, a cursor)."""
    machine_state = walk()
    state: Any = Steps(machine_state)
    try:
        state.setup()
        medium = state.first_reference()
        for who in IDENTITIES:
            state.start_turn(who, "inline")
        run = state.start_turn("primary", "on_demand")
        held = {doc: state.search(run, doc, False) for doc in SUBJECTS}
        for max_bytes in (None, C.READ_MIN_MAX_BYTES, C.READ_MAX_MAX_BYTES):
            state.read(held["alpha"], max_bytes, 1.0)
        if isinstance(medium, Held):
            cursor = state.read(medium, C.READ_MIN_MAX_BYTES, 0.0)
            if isinstance(cursor, HeldCursor):
                state.continue_chain(cursor, None, 1.0)
            state.follow_chain(medium, None)
        for with_cursor in (False, True):
            state.read_under_every_binding(0, with_cursor)
        state.read_to_the_budget()
        state.read(held["alpha"], None, 150.0)  # read at 150 s: the expiry still counts from the search
        state.read_at_the_expiry_edge(0, "before")
        state.read_at_the_expiry_edge(0, "after")
        run = state.start_turn("primary", "on_demand")
        for doc in ("alpha", "second"):
            state.search(run, doc, False)
        for mode in MODES:  # before any change: each mode is probed with a reference nothing else refuses
            state.switch_mode(mode, False)
        state.publish_revision(0, "short")
        state.scope_change(1, False)
        state.chains_within_the_budget_and_one_revision_each()
    except Exception as exc:
        exc.add_note("\n".join(["The scripted tour, up to the failing step:", *state.lines]))
        raise
    finally:
        machine_state.teardown()
