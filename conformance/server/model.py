"""The contract as a model of its own: events in, predicted outcomes out.

Pure Python and no HTTP. It knows the world the suite provisions (two routes, the
identities of ``conformance.server.world.provision``, each document's text) and follows
what happens to it: time, revisions, scopes, modes, runs, the references search
issued and the cursors read pages offered. For every request it predicts the
outcome the seeds allow, and for every page it knows the exact bytes that must come.

Two drivers feed it the same events: the Hypothesis state machine of
``conformance/suite/server/test_stateful.py`` (live responses) and the transcript checker
of ``conformance/server/transcript.py`` (recorded ones), so both judge alike.

Where the seeds allow several behaviours the prediction allows all of them: a
refusal may carry the kind of any cause that holds (they are not ranked), a
cause whose effect the seeds leave open (a scope change that keeps the document,
the expiry edge, a cursor presented again, a read while unavailable) makes the
outcome "either", and a chain may stop early ("at most 131072 content bytes")
as long as its flags say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from conformance.common import contract as C
from conformance.common.rules import Rule
from conformance.server import rules as server

REFERENCE_KINDS = frozenset(
    {"reference_expired", "reference_mismatch", "scope_changed", "revision_changed", "reference_invalid"}
)
"""Error kinds of the seed's families (``knowledge_reference_*`` / ``knowledge_*changed``)."""
OTHER_KINDS = frozenset({"run_not_found", "disabled", "unavailable"})
"""Refusals outside those families: the run is not the caller's, knowledge is disabled or unavailable."""
MODES = ("normal", "disabled", "unavailable", "partial", "legacy")
HOME, AWAY = "home", "away"
"""The primary identity's route, and the second route of ``other_route``."""
IDENTITIES: Mapping[str, frozenset[str]] = {
    "primary": frozenset(),
    "same_session": frozenset(),  # another token of the same Agent Session: the same binding
    "other_session": frozenset({"session"}),
    "other_account": frozenset({"account"}),
    "other_route": frozenset({"route"}),
    "other_hub": frozenset({"hub"}),
}
"""The binding dimensions in which each identity of the world differs from primary."""
DIMENSION_RULES = (
    ("hub", server.REF_003),
    ("session", server.REF_004),
    ("route", server.REF_005),
    ("account", server.REF_009),
)
MAX_CHAIN_PAGES = 256
"""A chain still offering a cursor after this many pages, on a page without content, makes no progress
and never stops (READ-010). Pages that carry content are bounded by the byte budget, not counted:
a Core may page far smaller than asked."""
Verdict = Literal["page", "refused", "either"]


def route_of(who: str) -> str:
    return AWAY if "route" in IDENTITIES[who] else HOME


def account_of(who: str) -> str:
    return "bob" if "account" in IDENTITIES[who] else "alice"


class ModelError(ValueError):
    """An event the model cannot follow (a driver or transcript bug, never the target's)."""


@dataclass(frozen=True)
class Violation:
    rule: Rule
    message: str


@dataclass
class Doc:
    key: str
    token: str  # a word only this document contains; every revision's text starts with it
    base: str
    title: str  # the title as seeded
    text: str  # the current revision
    revision: int = 0


@dataclass
class Scope:
    bases: frozenset[str] | None = None  # None: every base
    epoch: int = 0

    def shows(self, doc: Doc) -> bool:
        return self.bases is None or doc.base in self.bases


@dataclass(frozen=True)
class Run:
    run_id: str
    who: str

    @property
    def binding(self) -> frozenset[str]:
        return IDENTITIES[self.who]


@dataclass(frozen=True)
class Issued:
    """A reference a search issued: to whom, in which run, when, under which scope."""

    token: str
    who: str
    run_id: str
    route: str
    issued_at: float
    scope_epoch: int
    doc: str | None = None  # known once a read showed which document it is
    issued_real: float = 0.0  # the suite's real clock when the issuing request was sent
    revision: int = 0
    text: str = ""

    @property
    def binding(self) -> frozenset[str]:
        return IDENTITIES[self.who]

    @property
    def account(self) -> str:
        return account_of(self.who)


@dataclass(frozen=True)
class Cursor:
    token: str
    ref: str
    start: int  # characters of the revision before the next page
    consumed: int  # content bytes the chain delivered so far
    chain: int
    depth: int  # pages of the chain so far


@dataclass(frozen=True)
class Cause:
    """One reason a read may be refused, the kinds a refusal for it may carry, and whether it must be refused."""

    rule: Rule
    kinds: frozenset[str]
    definite: bool
    why: str


@dataclass(frozen=True)
class PageExpectation:
    ref: str
    text: str | None  # None: which document the reference names is not known yet
    start: int
    consumed: int
    chain: int
    depth: int
    route: str


@dataclass(frozen=True)
class Prediction:
    """What the target may answer: a page, a refusal carrying one of ``kinds``, or either."""

    causes: tuple[Cause, ...] = ()
    page: PageExpectation | None = None
    legacy: bool = False
    age: float = 0.0
    slack: float = (
        0.0  # real seconds between the issuing request's send and this answer: a running Core clock adds up to this
    )

    @property
    def verdict(self) -> Verdict:
        if not self.causes:
            return "page"
        return "refused" if any(c.definite for c in self.causes) else "either"

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(k for c in self.causes for k in c.kinds)

    @property
    def rule(self) -> Rule:
        """The rule a target breaks by answering against the prediction."""
        definite = [c for c in self.causes if c.definite]
        return (definite or list(self.causes) or [Cause(server.REF_002, frozenset(), False, "")])[0].rule

    @property
    def single(self) -> Rule | None:
        """The rule of the one cause that holds, when exactly one holds and it must be refused."""
        return self.causes[0].rule if len(self.causes) == 1 and self.causes[0].definite else None

    def why(self) -> str:
        return "; ".join(c.why for c in self.causes) or "no cause to refuse it"


@dataclass(frozen=True)
class SearchPrediction:
    legacy: bool = False
    status: str | None = None  # the status the mode demands, None when the seeds leave it open
    rule: Rule = server.SRCH_005
    no_hints: bool = False
    hidden_titles: tuple[str, ...] = ()  # seeded titles of documents outside the caller's scope


@dataclass(frozen=True)
class PageOutcome:
    """What a judged page showed: the document, the cursor it offers (registered), and what it exercised."""

    doc: str | None
    cursor: str | None
    exercised: frozenset[str]


@dataclass
class Model:
    docs: dict[str, dict[str, Doc]]
    strict: bool = False
    skew: float = 0.0
    ttl: float = C.REFERENCE_TTL_SECONDS
    budget: int = C.READ_CHAIN_MAX_BYTES
    now: float = 0.0
    sent: float = 0.0  # the suite's real clock when the request being judged was sent
    answered: float = 0.0  # ... and when its answer arrived
    modes: dict[str, str] = field(default_factory=lambda: {HOME: "normal", AWAY: "normal"})
    scopes: dict[tuple[str, str], Scope] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    turns: dict[str, str] = field(default_factory=dict)
    issued: dict[str, Issued] = field(default_factory=dict)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    presented: set[str] = field(default_factory=set)  # cursors presented at least once
    chain_bytes: dict[int, int] = field(default_factory=dict)  # most content bytes any path of a chain delivered
    chain_revisions: dict[int, set[str]] = field(default_factory=dict)  # the revision values a chain's pages reported
    chains: int = 0

    # ------------------------------------------------------------ state
    def scope(self, route: str, account: str) -> Scope:
        return self.scopes.setdefault((route, account), Scope())

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def exchanged(self, sent: float, answered: float) -> None:
        """When the exchange being judged happened on the suite's real clock. The model's clock
        moves only by control steps, but a Core's clock may also run in real time: a reference is
        then older at the Core by up to the real time from its issue's send to the read's answer,
        and no prediction that this time could tip is definite."""
        self.sent, self.answered = sent, answered

    def publish(self, route: str, key: str, text: str) -> None:
        doc = self.docs[route][key]
        doc.text, doc.revision = text, doc.revision + 1

    def set_scope(self, route: str, account: str, bases: Iterable[str]) -> None:
        scope = self.scope(route, account)
        scope.bases, scope.epoch = frozenset(bases), scope.epoch + 1

    def set_mode(self, route: str, mode: str) -> None:
        if mode not in MODES:
            raise ModelError(f"unknown mode {mode!r}")
        self.modes[route] = mode

    def age(self, token: str) -> float:
        return self.now - self.issued[token].issued_at

    def refs(self) -> list[Issued]:
        """The references whose document is known, oldest first."""
        return [i for i in self.issued.values() if i.doc is not None]

    def unchanged(self, issued: Issued) -> bool:
        """Nothing but time can refuse it: its revision and scope are as when it was issued."""
        return issued.doc is not None and not [c for c in self._state_causes(issued, 0.0)]

    def latest_cursor(self, ref: str) -> Cursor | None:
        found = [c for c in self.cursors.values() if c.ref == ref]
        return found[-1] if found else None

    # ------------------------------------------------------------ turns
    def turn_started(self, who: str, key: str, run_id: str) -> None:
        self.turns[key] = run_id
        self.runs[run_id] = Run(run_id, who)

    def replay_violation(self, key: str, run_id: object) -> Violation | None:
        first = self.turns.get(key)
        if first is None:
            raise ModelError(f"turn {key!r} was never started")
        return (
            None
            if run_id == first
            else Violation(server.TURN_004, f"a replayed turn started run {run_id!r}, the original was {first!r}")
        )

    # ----------------------------------------------------- capabilities
    def predict_enabled(self, who: str) -> bool | None:
        """Capabilities' ``enabled``; None when the route is legacy (an old endpoint status instead)."""
        mode = self.modes[route_of(who)]
        return None if mode == "legacy" else mode != "disabled"

    # ----------------------------------------------------------- search
    def predict_search(self, who: str, run_id: str) -> SearchPrediction:
        route = route_of(who)
        mode = self.modes[route]
        run = self.runs.get(run_id)
        if run is None or run.binding != IDENTITIES[who]:
            raise ModelError("the model predicts searches in the caller's own runs only")
        scope = self.scope(route, account_of(who))
        hidden = tuple(d.title for d in self.docs[route].values() if not scope.shows(d))
        if mode == "legacy":
            return SearchPrediction(legacy=True)
        if mode == "disabled":
            return SearchPrediction(status="disabled", rule=server.SRCH_009, no_hints=True, hidden_titles=hidden)
        if mode == "unavailable":
            return SearchPrediction(status="unavailable", rule=server.SRCH_010, hidden_titles=hidden)
        return SearchPrediction(status="ok" if mode == "normal" else None, hidden_titles=hidden)

    def hints_issued(self, who: str, run_id: str, tokens: Iterable[str]) -> None:
        route = route_of(who)
        epoch = self.scope(route, account_of(who)).epoch
        for token in tokens:
            if token not in self.issued:
                self.issued[token] = Issued(token, who, run_id, route, self.now, epoch, issued_real=self.sent)

    # ------------------------------------------------------------- read
    def predict_read(
        self,
        who: str,
        run_id: str,
        ref: str,
        cursor: str | None = None,
        *,
        tampered: str | None = None,
        original: str | None = None,
    ) -> Prediction:
        """The outcome of ``who`` reading ``ref`` (from ``cursor``) under ``run_id``.

        ``tampered`` ("ref" or "cursor") says the presented token is ``original`` altered."""
        route = route_of(who)
        mode = self.modes[route]
        source = original if tampered == "ref" else ref
        if source is None or source not in self.issued:
            raise ModelError("a read of a reference no search issued")
        issued = self.issued[source]
        age = self.now - issued.issued_at
        slack = max(0.0, self.answered - issued.issued_real)
        if mode == "legacy":
            return Prediction(legacy=True, age=age, slack=slack)
        causes: list[Cause] = []
        if tampered is not None:
            causes.append(Cause(server.REF_015, frozenset({"reference_invalid"}), True, f"the {tampered} was altered"))
        causes += self._binding_causes(who, run_id, issued)
        causes += self._state_causes(issued, age, slack)
        page = None
        if cursor is not None and tampered != "cursor":
            held = self.cursors.get(cursor)
            if held is None or held.ref != source:
                raise ModelError("a read from a cursor that is not this reference's")
            if cursor in self.presented:
                causes.append(
                    Cause(
                        server.REF_011,
                        REFERENCE_KINDS,
                        False,
                        "the cursor was presented before (the seeds do not say a cursor may be used twice)",
                    )
                )
            page = PageExpectation(
                source,
                issued.text if issued.doc else None,
                held.start,
                held.consumed,
                held.chain,
                held.depth,
                issued.route,
            )
        elif cursor is None:
            page = PageExpectation(source, issued.text if issued.doc else None, 0, 0, -1, 0, issued.route)
        if mode == "disabled":
            causes.append(Cause(server.CAP_006, frozenset({"disabled"}), True, "knowledge is disabled"))
        elif mode in ("unavailable", "partial"):
            causes.append(Cause(server.WIRE_001, frozenset({"unavailable"}), False, f"knowledge is {mode}"))
        return Prediction(tuple(causes), page, age=age, slack=slack)

    def _binding_causes(self, who: str, run_id: str, issued: Issued) -> list[Cause]:
        mine = IDENTITIES[who]
        run = self.runs.get(run_id)
        foreign_run = run is None or run.binding != mine
        kinds = frozenset({"reference_mismatch", "run_not_found"} if foreign_run else {"reference_mismatch"})
        differ = mine ^ issued.binding
        for dimension, rule in DIMENSION_RULES:
            if dimension in differ:
                return [Cause(rule, kinds, True, f"the reference belongs to another {dimension}")]
        if run_id != issued.run_id:
            return [Cause(server.REF_006, kinds, True, "the reference belongs to another run")]
        return []

    def _state_causes(self, issued: Issued, age: float, slack: float = 0.0) -> list[Cause]:
        """``age`` is the reference's age on the model's clock, the least the Core can have seen;
        ``slack`` what a Core clock running in real time adds at most."""
        causes = []
        low, high = self.ttl - self.skew, self.ttl + self.skew
        if age > high:
            causes.append(
                Cause(server.REF_001, frozenset({"reference_expired"}), True, f"the reference is {age:g} s old")
            )
        elif age >= self.ttl and self.skew == 0 and self.strict:  # exactly 300 s: strict's reading of the edge
            causes.append(
                Cause(
                    server.REF_016,
                    frozenset({"reference_expired"}),
                    True,
                    f"the reference is {age:g} s old (strict: expired)",
                )
            )
        elif age + slack >= low:
            causes.append(
                Cause(
                    server.REF_001,
                    frozenset({"reference_expired"}),
                    False,
                    f"the reference is {age:g}{f'-{age + slack:.3f}' if slack else ''} s old, at the expiry edge",
                )
            )
        if issued.doc is None:
            return causes
        doc = self.docs[issued.route][issued.doc]
        if doc.revision != issued.revision:
            causes.append(
                Cause(server.REF_008, frozenset({"revision_changed"}), True, f"{issued.doc} has a newer revision")
            )
        scope = self.scope(issued.route, issued.account)
        if not scope.shows(doc):
            causes.append(
                Cause(server.REF_007, frozenset({"scope_changed"}), True, f"{issued.doc} left the account's scope")
            )
        elif scope.epoch != issued.scope_epoch:
            causes.append(
                Cause(
                    server.REF_007,
                    frozenset({"scope_changed"}),
                    False,
                    f"the scope changed and still holds {issued.doc}",
                )
            )
        return causes

    def presented_cursor(self, cursor: str | None) -> None:
        if cursor is not None:
            self.presented.add(cursor)

    # ------------------------------------------------------------ pages
    def identify(self, route: str, content: str) -> Doc | None:
        """The document a first page belongs to: every revision's text starts with its token."""
        found = [d for d in self.docs[route].values() if content.startswith(d.token)]
        return found[0] if len(found) == 1 else None

    def judge_page(
        self, who: str, expect: PageExpectation, body: Mapping[str, Any]
    ) -> tuple[Violation | None, PageOutcome]:
        """Judge a page already checked for shape and byte bound, and register what it shows.

        Exact: the content continues the revision where the chain stands; truncated is
        false exactly when it reaches the end; a chain stops before the end only with
        budget_exhausted; a cursor is offered only within the budget."""
        content = body["content"]
        issued = self.issued[expect.ref]
        text, doc_key = expect.text, issued.doc
        if text is None:  # a first read of a search hint: which document is it?
            doc = self.identify(expect.route, content)
            if doc is None:
                return None, PageOutcome(None, None, frozenset())
            if not self.scope(expect.route, account_of(who)).shows(doc):
                return Violation(
                    server.REF_007, f"a hint of the search reads as {doc.key}, which is outside the account's scope"
                ), PageOutcome(doc.key, None, frozenset())
            self.issued[expect.ref] = replace(issued, doc=doc.key, revision=doc.revision, text=doc.text)
            text, doc_key = doc.text, doc.key
        found = self._page_violation(expect, text, body)
        if found is not None:
            return found, PageOutcome(doc_key, None, frozenset())
        return None, self._register(expect, text, body, doc_key)

    def _page_violation(self, expect: PageExpectation, text: str, body: Mapping[str, Any]) -> Violation | None:
        content = body["content"]
        rest = text[expect.start :]
        if not rest.startswith(content):
            rule = server.READ_016 if "\ufffd" in content and "\ufffd" not in rest else server.READ_015
            return Violation(
                rule,
                f"the page does not continue the revision at character {expect.start} of {len(text)}: "
                f"it starts {content[:40]!r}, the revision continues {rest[:40]!r}",
            )
        end = expect.start + len(content)
        after = expect.consumed + C.utf8_size(content)
        cursor, truncated, exhausted = (
            body.get("next_cursor"),
            body.get("truncated"),
            body.get("budget_exhausted") is True,
        )
        if end == len(text):
            if truncated is True:  # no truncated member is a complete page too (the seed lists none)
                return Violation(server.READ_009, f"the page that completes the revision says truncated {truncated!r}")
        elif cursor is None:
            if not (exhausted and truncated is not False):
                return Violation(
                    server.READ_011,
                    f"the chain stopped {len(text) - end} characters before the end of the revision after {after} "
                    f"content bytes with truncated {truncated!r} and budget_exhausted {body.get('budget_exhausted')!r}; "
                    "stopping early needs budget_exhausted true and truncated true",
                )
        elif after > self.budget:
            return Violation(
                server.READ_011,
                f"the chain delivered {after} content bytes, past {self.budget}, and still offers a next_cursor "
                "instead of stopping with budget_exhausted",
            )
        elif not content and expect.depth + 1 >= MAX_CHAIN_PAGES:
            return Violation(
                server.READ_010,
                f"the chain still offers a next_cursor after {expect.depth + 1} pages, this one empty: it makes no progress",
            )
        total = body.get("total_content_bytes")
        if total is not None and total != C.utf8_size(text):
            return Violation(
                server.READ_014, f"total_content_bytes is {total!r}, the revision has {C.utf8_size(text)} bytes"
            )
        return None

    def _register(self, expect: PageExpectation, text: str, body: Mapping[str, Any], doc: str | None) -> PageOutcome:
        content = body["content"]
        chain = expect.chain
        if chain < 0:
            chain = self.chains = self.chains + 1
        end = expect.start + len(content)
        after = expect.consumed + C.utf8_size(content)
        self.chain_bytes[chain] = max(self.chain_bytes.get(chain, 0), after)
        self.chain_revisions.setdefault(chain, set()).add(repr(body.get("revision")))
        exercised = {server.READ_009}
        if expect.start > 0:
            exercised.add(server.READ_015)
        if end < len(text) and any(ord(ch) > 0x7F for ch in text[max(end - 1, 0) : end + 1]):
            exercised.add(server.READ_016)
        if "total_content_bytes" in body:
            exercised.add(server.READ_014)
        if body.get("budget_exhausted") is True and after <= self.budget:
            exercised |= {server.READ_010, server.READ_011}
        cursor = body.get("next_cursor")
        if isinstance(cursor, str):
            self.cursors[cursor] = Cursor(cursor, expect.ref, end, after, chain, expect.depth + 1)
        return PageOutcome(doc, cursor if isinstance(cursor, str) else None, frozenset(exercised))

    # ------------------------------------------------------- invariants
    def invariant_violation(self) -> Violation | None:
        """What must hold of everything read so far: no chain past the budget, one revision per chain."""
        for chain, total in self.chain_bytes.items():
            if total > self.budget:
                return Violation(
                    server.READ_010, f"read chain {chain} delivered {total} content bytes, more than {self.budget}"
                )
        for chain, revisions in self.chain_revisions.items():
            if len(revisions) > 1:
                return Violation(
                    server.READ_002, f"the pages of read chain {chain} report different revisions: {sorted(revisions)}"
                )
        return None


def build_docs(routes: Mapping[str, Mapping[str, Mapping[str, str]]]) -> dict[str, dict[str, Doc]]:
    """Documents per route label from ``{route: {key: {token, base, title, text}}}`` (a transcript's world)."""
    return {
        route: {key: Doc(key, d["token"], d["base"], d["title"], d["text"]) for key, d in docs.items()}
        for route, docs in routes.items()
    }
