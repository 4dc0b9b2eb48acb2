"""The stateful model of the ``search_knowledge`` tool (seed 003), driven by Hypothesis.

A world of its own (through control): three bases (the caller alice sees two of them, carol
every one, bob holds no ``knowledge:read``), four items whose every revision carries its own
tokens and multi-byte text. The walk publishes revisions, archives, reactivates, unpublishes
and republishes items and bases, narrows alice's scope, switches the Knowledge runtime off and
on, and in between searches and reads. ``Truth`` follows every state change and predicts each
answer the seed fixes, and nothing more:

- which items a query may return: only the published current revision of an active item in
  an active base the caller may see (and in the narrowed base); never a historical revision;
  at most ``max_results``; a lexical query for a token only one current revision holds finds
  it. Never an order or a score;
- an addressed read: the current or the addressed immutable revision, and its window
  (``content``, ``content_offset``, ``content_limit``, ``content_total_chars``,
  ``content_truncated``) in characters (code points; UTF-16 units pass unless strict);
- the error family: ``knowledge_resource_unavailable``, one indistinguishable answer for
  absent, unauthorized, inactive and unpublished resources (within each example);
  ``knowledge_runtime_disabled`` in a ``knowledge_unavailable`` envelope; a refusal without
  ``knowledge:read``; no audit event written by any call.

Like the HTTP model (``conformance/server/stateful.py``): ``tour`` reaches every rule first, then the
random walk (fixed seed, ``--stateful-seed`` picks another). Each rule is tagged with its SK
requirement IDs (``conformance.common.walk.tagged``); an ID counts as verified only when a check of
it ran and every rule tagged with it was reached (``Reach.verified``). The test is ``conformance/suite/search_knowledge/test_stateful.py``.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from conformance.common.config import TargetConfig
from conformance.common.control import Control, KnowledgeControl
from conformance.common.open import Target
from conformance.common.rules import Rule, expect
from conformance.common.walk import Reach, Steps, claims, seeded, tagged, tags
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.answers import (
    WINDOW_PIECES,
    Answer,
    call,
    envelope_types,
    message_of,
    open_sessions,
    utf16_len,
    utf16_slice,
)
from knowledge_schemas import load_registry

if TYPE_CHECKING:
    from conformance.mcp.session import McpSession

A, B, P = "kb-sm-a", "kb-sm-b", "kb-sm-p"  # alice sees A and B; P is private to carol
BASES = (A, B, P)
ITEMS = {"sm-a1": A, "sm-a2": A, "sm-b1": B, "sm-p1": P}
LONG_ITEM = "sm-a2"  # starts longer than the default window
ABSENT_ITEM, ABSENT_BASE, ABSENT_REVISION = "sm-no-such-item", "kb-sm-no-such-base", "rev-sm-no-such-revision"
ALICE = (A, B)
UNAVAILABLE, INVALID = "knowledge_resource_unavailable", "knowledge_invalid_request"
RECOGNISED = ("lexical", "semantic", "hybrid", "rrf")
MODES = (*RECOGNISED, "Hybrid ", "keyword-ish")  # the last two are not modes: hybrid, never a refusal
DEFAULT_LIMIT = 4000
WALK_SEED = 11  # the random walk's default seed; reaching every rule does not hang on it (``tour``)
CODE_POINT, UTF16 = "code point", "utf-16"
_worlds = itertools.count(1)


# ----------------------------------------------------------------- what the model knows
def word(tag: str, name: str) -> str:
    return f"kcsm{tag}{name}"


def revision_text(tag: str, item: str, number: int, size: str) -> str:
    """A revision starting with its item's token, its own token and the world's token, then
    text whose code points, UTF-16 units and UTF-8 bytes all differ."""
    key = item.removeprefix("sm-")
    head = f"{word(tag, key)} {word(tag, f'{key}r{number}')} {word(tag, 'all')} revision {number} of {item}. "
    return head + "".join(WINDOW_PIECES * (2 if size == "short" else 300))


def canonical(tag: str, item: str) -> str:
    return revision_text(tag, item, 0, "long" if item == LONG_ITEM else "short")


@dataclass(frozen=True)
class Rev:
    revision_id: str
    text: str
    token: str  # the word only this revision's text holds (a republished canonical text shares revision 0's)


@dataclass
class ItemTruth:
    base: str
    revisions: list[Rev]  # oldest first; every one stays addressable
    current: int = 0
    active: bool = True
    published: bool = True

    @property
    def now(self) -> Rev:
        return self.revisions[self.current]


@dataclass
class Truth:
    """The target's search_knowledge world as the model knows it. It outlives examples: revisions
    of earlier examples stay readable by ID, and the character unit, once seen, stays. (What one
    example alone judges, such as the refusals it saw, is the machine's, so a shrunk example is
    judged on its own steps.)"""

    tag: str
    items: dict[str, ItemTruth]
    active_bases: set[str] = field(default_factory=lambda: set(BASES))
    alice: set[str] = field(default_factory=lambda: set(ALICE))
    runtime: bool = True
    unit: str | None = None
    audit: list[dict[str, Any]] | None = None

    def visible(self, who: str, base: str) -> bool:
        return who != "bob" and base in self.active_bases and (who == "carol" or base in self.alice)

    def readable(self, who: str, item: str) -> bool:
        it = self.items.get(item)
        return it is not None and it.active and it.published and self.visible(who, it.base)

    def searchable(self, who: str, narrow: str) -> set[str]:
        return {i for i, it in self.items.items() if self.readable(who, i) and (not narrow or it.base == narrow)}

    def why_hidden(self, who: str, item: str) -> str:
        it = self.items.get(item)
        if it is None:
            return "not an item of this workspace"
        return (
            ", ".join(
                w
                for w, hidden in (
                    ("archived", not it.active),
                    ("unpublished", not it.published),
                    ("in an archived base", it.base not in self.active_bases),
                    (f"in a base {who} may not see", who != "carol" and it.base not in self.alice),
                )
                if hidden
            )
            or "readable"
        )


@dataclass
class SkModelWorld:
    route: str
    control: KnowledgeControl
    set_alice: Callable[[list[str]], None]  # alice's bases (the Core control's scope)
    sessions: dict[str, McpSession]
    truth: Truth
    strict: bool


@contextmanager
def model_world(
    cfg: TargetConfig, target: Target, control: Control, chosen: str | None
) -> Iterator[SkModelWorld | None]:
    """Provision the model's workspace and open a session per caller; None when the MCP target
    is fixed to an identity the suite did not mint (the model needs its own callers)."""
    route = f"kc-{target.settings.namespace}-skm-{next(_worlds)}"
    tag = uuid.uuid4().hex[:8]
    control.create_workspace(route)
    bases = [
        {
            "id": b,
            "name": b,
            "items": [
                {"id": i, "title": f"Model item {i}", "content": canonical(tag, i)}
                for i, base in ITEMS.items()
                if base == b
            ],
        }
        for b in BASES
    ]
    first = control.replace_corpus(route, bases)
    knowledge = control.knowledge(route)
    control.set_scope(route, "alice", list(ALICE))
    knowledge.scopes("bob", [])
    who = {name: (m["token"], m["route"]) for name in ("alice", "carol", "bob") for m in [control.mint(name, route)]}
    items = {
        i: ItemTruth(base, [Rev(first[i], canonical(tag, i), word(tag, f"{i.removeprefix('sm-')}r0"))])
        for i, base in ITEMS.items()
    }
    with ExitStack() as stack:
        sessions, fixed = open_sessions(stack, cfg, target, chosen, who)
        if fixed or not {"alice", "carol"} <= sessions.keys():
            yield None
            return
        yield SkModelWorld(
            route,
            knowledge,
            lambda b: control.set_scope(route, "alice", b),
            sessions,
            Truth(tag, items, audit=knowledge.audit()),
            cfg.strict_codes,
        )


def _total(unit: str, text: str) -> int:
    return len(text) if unit == CODE_POINT else utf16_len(text)


def _slice(unit: str, text: str, start: int, count: int) -> str:
    return text[start : start + count] if unit == CODE_POINT else utf16_slice(text, start, count)


# ----------------------------------------------------------------- the machine
WHO = st.sampled_from(("alice", "alice", "carol", "bob"))
ITEM = st.sampled_from(tuple(ITEMS))
CHANGES = (
    *((i, c) for i in ITEMS for c in ("archive", "reactivate", "unpublish", "republish")),
    *((b, c) for b in BASES for c in ("archive", "reactivate")),
    *(("alice", ",".join(bases)) for bases in ((A, B), (A,), (B, P), (A, B, P), ())),
)


class SearchKnowledgeModel(RuleBasedStateMachine):
    """The rules; ``machine`` makes the class a walk runs, bound to its world and reach."""

    make_world: Callable[[], SkModelWorld]
    shared: list[SkModelWorld]
    reach: Reach

    def __init__(self) -> None:
        super().__init__()
        if not self.shared:
            self.shared.append(type(self).make_world())
        self.world = self.shared[0]
        self.truth = self.world.truth
        self.rule = "setup"
        self.calls: list[str] = []
        self.unavailable: dict[tuple[Any, ...], str] = {}  # this example's refusal signatures -> first case
        self._restore()

    # ----------------------------------------------------------- plumbing
    def _expect(self, condition: object, requirement: Rule, message: str) -> None:
        self.reach.of(self.rule).add(requirement)
        expect(condition, requirement, message)

    def _ask(self, who: str, arguments: dict[str, Any]) -> Answer:
        self.calls.append(f"{who} {arguments}")
        return call(self.world.sessions[who], arguments)

    def _audited(self) -> None:
        """After a control operation: the audit log as it now stands (control writes events)."""
        if self.truth.audit is not None:
            self.truth.audit = self.world.control.audit()
        self.calls = []

    def _no_audit_event(self) -> None:
        """The tool calls since the last control operation wrote no audit event. Checked before each
        control operation and at the end of an example, not after each call: one request, not dozens."""
        calls, self.calls = self.calls, []
        if self.truth.audit is not None and calls:
            after = self.world.control.audit()
            self._expect(
                after == self.truth.audit,
                sk.SK_007,
                f"search_knowledge wrote audit events "
                f"{(after or [])[len(self.truth.audit) :][:3]} during {'; '.join(calls[:4])}",
            )

    @tagged(sk.SK_007)
    def teardown(self) -> None:
        self._no_audit_event()

    def _restore(self) -> None:
        t, control = self.truth, self.world.control
        if not t.runtime:
            control.runtime(True)
            t.runtime = True
        for item, it in t.items.items():
            if not (it.active and it.published):
                control.item_state(item, active=None if it.active else True, published=None if it.published else True)
                it.active = it.published = True
            if it.now.text != canonical(t.tag, item):
                self._published(item, canonical(t.tag, item), it.revisions[0].token)
        for base in sorted(set(BASES) - t.active_bases):
            control.base_state(base, True)
        t.active_bases = set(BASES)
        if t.alice != set(ALICE):
            self.world.set_alice(list(ALICE))
            t.alice = set(ALICE)
        self._audited()

    def _published(self, item: str, text: str, token: str) -> None:
        it = self.truth.items[item]
        it.revisions.append(Rev(self.world.control.publish(item, text), text, token))
        it.current, it.published = len(it.revisions) - 1, True  # publishing makes it current and published

    def _state_refusal(self, who: str, answer: Answer, undeclared: bool = False) -> bool:
        """Refusals the caller's or the workspace's state predicts, whatever was asked. A request that
        also carries an argument the tool does not declare (``undeclared``) may be refused for that
        instead: the seed ranks no error over another, so only "nothing shown" is asked then."""
        shows = bool(answer.hits()) or "content" in (answer.body or {})
        if who == "bob":
            self._expect(not answer.ok and not shows, sk.SK_008, f"a caller without knowledge:read got {answer.raw}")
            return True
        if not self.truth.runtime and undeclared and not answer.has("knowledge_runtime_disabled"):
            self._expect(not answer.ok and not shows, sk.SK_020, f"runtime off, an undeclared argument: {answer.raw}")
            return True
        if not self.truth.runtime:
            self._expect(answer.has("knowledge_runtime_disabled"), sk.SK_020, f"runtime off answered {answer.raw}")
            self._expect(
                "knowledge_unavailable" in envelope_types(answer),
                sk.SK_020,
                f"runtime off without a knowledge_unavailable envelope: {answer.raw}",
            )
            self._expect(not shows, sk.SK_020, f"runtime off still returned knowledge: {answer.raw}")
            return True
        return False

    def _no_audit_envelope(self, answer: Answer) -> None:
        found = {"audit", "audit_event", "audit_events"} & set(answer.body or {})
        self._expect(not found, sk.SK_019, f"a result carries an audit envelope: {sorted(found)}")

    # ----------------------------------------------------------- control
    @rule(item=ITEM, size=st.sampled_from(("short", "long")))
    @tagged(sk.SK_003, sk.SK_004, sk.SK_007, sk.SK_014, sk.SK_017, sk.SK_019, sk.SK_020)
    def publish(self, item: str, size: str) -> None:
        """A new immutable revision: it becomes current, and the item published. A lexical query for
        the revision's own word shows it at once (as the current revision, where carol may see it)."""
        self._no_audit_event()
        number = len(self.truth.items[item].revisions)
        key = item.removeprefix("sm-")
        self._published(
            item, revision_text(self.truth.tag, item, number, size), word(self.truth.tag, f"{key}r{number}")
        )
        self._audited()
        self._query("carol", item, "current", "lexical", "none", 10, False)

    @rule(change=st.sampled_from(CHANGES))
    @tagged(sk.SK_003, sk.SK_007, sk.SK_023)
    def visibility(self, change: tuple[str, str]) -> None:
        """What may be seen changes: an item archived, reactivated, unpublished or republished; a base
        archived or reactivated; the bases alice's credential may see. (One rule, so that the walk
        spends most of its steps on the tool.)"""
        subject, what = change
        self._no_audit_event()
        t, control = self.truth, self.world.control
        if subject in t.items:
            it = t.items[subject]
            if what in ("archive", "reactivate"):
                it.active = what == "reactivate"
                control.item_state(subject, active=it.active)
            else:
                it.published = what == "republish"
                control.item_state(subject, published=it.published)
        elif subject in BASES:
            control.base_state(subject, what == "reactivate")
            (t.active_bases.add if what == "reactivate" else t.active_bases.discard)(subject)
        else:
            bases = [b for b in what.split(",") if b]
            self.world.set_alice(bases)
            t.alice = set(bases)
        self._audited()

    @rule(stay=st.booleans())
    @tagged(sk.SK_007, sk.SK_020)
    def runtime_off(self, stay: bool) -> None:
        """Switched off: a query and a read show it at once; it stays off, or is switched on again."""
        self._no_audit_event()
        self.world.control.runtime(False)
        self.truth.runtime = False
        self._audited()
        self._query("alice", "sm-a1", "item", "lexical", "none", 10, False)
        self._read("carol", "sm-a1", "none", "none", "zero", None)
        if not stay:
            self._runtime_on()

    @precondition(lambda self: not self.truth.runtime)
    @rule()
    @tagged(sk.SK_007, sk.SK_020)
    def runtime_on(self) -> None:
        self._runtime_on()

    def _runtime_on(self) -> None:
        self._no_audit_event()
        self.world.control.runtime(True)
        self.truth.runtime = True
        self._audited()

    # ----------------------------------------------------------- query search
    @rule(
        who=WHO,
        item=ITEM,
        token=st.sampled_from(("item", "current", "historical", "all")),
        mode=st.sampled_from(MODES),
        narrow=st.sampled_from(("none", "own", "other", "absent")),
        max_results=st.sampled_from((1, 3, 10, 50)),
        owner=st.booleans(),
    )
    @tagged(
        sk.SK_003, sk.SK_008, sk.SK_010, sk.SK_011, sk.SK_014, sk.SK_015, sk.SK_017, sk.SK_019, sk.SK_020, sk.SK_023
    )
    def query(self, who: str, item: str, token: str, mode: str, narrow: str, max_results: int, owner: bool) -> None:
        """A query for one item's token (any revision), or the world's token; ``owner`` adds an owner
        argument naming carol, which must not change whose knowledge is searched."""
        self._query(who, item, token, mode, narrow, max_results, owner)

    def _query(self, who: str, item: str, token: str, mode: str, narrow: str, max_results: int, owner: bool) -> None:
        t = self.truth
        it = t.items[item]
        older = it.revisions[max(0, it.current - 1)] if it.current else it.revisions[-1]
        text = {
            "item": word(t.tag, item.removeprefix("sm-")),
            "current": it.now.token,
            "historical": older.token,
            "all": word(t.tag, "all"),
        }[token]
        base = {
            "none": "",
            "own": it.base,
            "other": BASES[(BASES.index(it.base) + 1) % len(BASES)],
            "absent": ABSENT_BASE,
        }[narrow]
        arguments: dict[str, Any] = {"query": text, "mode": mode, "max_results": max_results}
        if base:
            arguments["knowledge_base_id"] = base
        if owner:
            arguments["owner"] = "carol"
        answer = self._ask(who, arguments)
        what = (
            f"{who}'s {mode!r} query for {token} of {item}"
            + (f" in {base}" if base else "")
            + (" with owner=carol" if owner else "")
        )
        if not self._state_refusal(who, answer, undeclared=owner):
            self._judge_query(who, item, token, mode, base, max_results, owner, answer, what)

    def _judge_query(
        self,
        who: str,
        item: str,
        token: str,
        mode: str,
        base: str,
        max_results: int,
        owner: bool,
        answer: Answer,
        what: str,
    ) -> None:
        t = self.truth
        if owner and not answer.ok:  # an argument the tool does not declare may be refused, never honoured
            self._expect(
                answer.is_error or answer.codes, sk.SK_010, f"{what}: neither a result nor a refusal: {answer.raw}"
            )
            return
        if base and not t.visible(who, base):
            self._expect(answer.ok or UNAVAILABLE in answer.codes, sk.SK_023, f"{what}: {answer.raw}")
            self._expect(not answer.hits(), sk.SK_023, f"{what} returned {answer.items()}")
            return
        if mode not in RECOGNISED:
            self._expect(answer.ok, sk.SK_015, f"{what}: refused instead of hybrid: {answer.raw}")
        self._expect(answer.ok, sk.SK_017, f"{what} failed: {answer.raw}")
        errors = load_registry().errors("search-knowledge-search-result", answer.body)
        self._expect(not errors, sk.SK_017, f"{what}: the result is not knowledge_search: {errors[:3]}")
        self._no_audit_envelope(answer)
        hits = answer.hits()
        self._expect(len(hits) <= max_results, sk.SK_014, f"{what}: {len(hits)} results for max_results {max_results}")
        allowed = t.searchable(who, base)
        for hit in hits:
            found = str(hit.get("knowledge_item_id"))
            if base and found in t.items:
                self._expect(
                    t.items[found].base == base, sk.SK_011, f"{what} returned {found} of {t.items[found].base}"
                )
            if owner and found in t.items and not t.readable(who, found) and t.readable("carol", found):
                self._expect(
                    False,
                    sk.SK_010,
                    f"{what} returned {found}, which only carol may see: the owner argument was honoured",
                )
            self._expect(found in allowed, sk.SK_003, f"{what} returned {found}: {t.why_hidden(who, found)}")
            current = t.items[found].now.revision_id
            self._expect(
                hit.get("knowledge_revision_id") == current,
                sk.SK_003,
                f"{what} returned revision {hit.get('knowledge_revision_id')} of {found}; its current one is {current}",
            )
        # Where every searchable item fits in max_results: no ranking (fuzzy lexical matching of the
        # other items' similar words included) can crowd the one holding the word out.
        if mode == "lexical" and token in ("item", "current") and item in allowed and max_results >= len(allowed):
            self._expect(
                item in answer.items(),
                sk.SK_003,
                f"{what} did not find {item}, the only current revision holding the word ({answer.items()})",
            )
        if (
            mode == "lexical" and token == "all" and self.world.strict
        ):  # the seed says maximum; strict: every match up to it
            want = min(len(allowed), max_results)
            self._expect(
                len(hits) == want,
                sk.SK_003,
                f"{what}: {len(hits)} results, {want} searchable items hold the word (strict)",
            )

    # ----------------------------------------------------------- addressed reads
    @rule(
        who=WHO,
        item=st.sampled_from((*ITEMS, ABSENT_ITEM)),
        revision=st.sampled_from(("none", "current", "first", "previous", "absent", "foreign")),
        base=st.sampled_from(("none", "own", "other")),
        offset=st.sampled_from(("zero", "one", "seven", "tail", "end", "past")),
        limit=st.sampled_from((None, 1, 5, 4000, 10000)),
    )
    @tagged(
        sk.SK_004, sk.SK_008, sk.SK_011, sk.SK_012, sk.SK_013, sk.SK_018, sk.SK_019, sk.SK_020, sk.SK_023, sk.SK_026
    )
    def read(self, who: str, item: str, revision: str, base: str, offset: str, limit: int | None) -> None:
        """One addressed read: the current revision (none or current), an immutable one (first,
        previous), an absent one, or another item's; validated against no, its own or another base."""
        self._read(who, item, revision, base, offset, limit)

    def _read(self, who: str, item: str, revision: str, base: str, offset: str, limit: int | None) -> None:
        t = self.truth
        it = t.items.get(item)
        anchor = it or t.items["sm-a1"]
        chosen = {
            "none": anchor.now,
            "current": anchor.now,
            "first": anchor.revisions[0],
            "previous": anchor.revisions[max(0, anchor.current - 1)],
        }.get(revision)
        foreign = t.items["sm-b1" if item == "sm-a1" else "sm-a1"].revisions[0].revision_id
        revision_id = {"none": "", "absent": ABSENT_REVISION, "foreign": foreign}.get(
            revision, chosen.revision_id if chosen else ""
        )
        own = anchor.base
        base_id = {"none": "", "own": own, "other": BASES[(BASES.index(own) + 1) % len(BASES)]}[base]
        text = chosen.text if chosen is not None else ""
        at = {"zero": 0, "one": 1, "seven": 7, "tail": max(0, len(text) - 3), "end": len(text), "past": len(text) + 5}[
            offset
        ]
        arguments: dict[str, Any] = {"knowledge_item_id": item}
        for name, value in (("knowledge_revision_id", revision_id), ("knowledge_base_id", base_id)):
            if value:
                arguments[name] = value
        if at:
            arguments["offset"] = at
        if limit is not None:
            arguments["limit_chars"] = limit
        answer = self._ask(who, arguments)
        what = (
            f"{who}'s read of {item}"
            + (f" revision {revision} ({revision_id})" if revision_id else "")
            + (f" in {base_id}" if base_id else "")
            + f" at {at}"
            + (f" limit {limit}" if limit is not None else "")
        )
        if not self._state_refusal(who, answer):
            if it is None or chosen is None or not t.readable(who, item):
                self._unavailable(
                    answer,
                    arguments,
                    what,
                    t.why_hidden(who, item)
                    if it is not None and chosen
                    else f"{'absent item' if it is None else 'absent or foreign revision'}",
                )
            elif base_id and base_id != it.base:
                self._expect(
                    not answer.ok and UNAVAILABLE in answer.codes,
                    sk.SK_011,
                    f"{what}: an item validated against another base answered {answer.raw}",
                )
            else:
                self._window(answer, item, chosen, at, limit, what)

    def _unavailable(self, answer: Answer, arguments: dict[str, Any], what: str, why: str) -> None:
        self._expect(not answer.ok and UNAVAILABLE in answer.codes, sk.SK_023, f"{what} ({why}) answered {answer.raw}")
        message = message_of(answer)
        for value in arguments.values():
            if isinstance(value, str):
                message = message.replace(value, "<id>")
        signature = (
            answer.is_error,
            tuple(sorted(answer.codes)),
            re.sub(r"\s+", " ", message),
            tuple(sorted(answer.body or {})),
        )
        self.unavailable.setdefault(signature, f"{what} ({why})")
        if self.world.strict:  # one answer word for word is this project's reading; the seed fixes the code
            self._expect(
                len(self.unavailable) == 1,
                sk.SK_023,
                f"strict: unavailable resources answer differently: {sorted(self.unavailable.values())}",
            )

    def _window(
        self, answer: Answer, item: str, rev: Rev, at: int, limit: int | None, what: str
    ) -> dict[str, Any] | None:
        """Judge a readable revision's window; returns the body when the read was served."""
        t = self.truth
        units = [t.unit] if t.unit else [CODE_POINT] if self.world.strict else [CODE_POINT, UTF16]
        if not answer.ok:
            past = any(at >= _total(u, rev.text) for u in units)
            self._expect(past, sk.SK_004, f"{what} was refused: {answer.raw}")
            self._expect(INVALID in answer.codes, sk.SK_026, f"{what}: a window past the end answered {answer.raw}")
            return None
        errors = load_registry().errors("search-knowledge-read-result", answer.body)
        self._expect(not errors, sk.SK_018, f"{what}: the result is not type knowledge: {errors[:3]}")
        self._no_audit_envelope(answer)
        body = answer.body or {}
        self._expect(
            (body.get("knowledge_item_id"), body.get("knowledge_revision_id")) == (item, rev.revision_id),
            sk.SK_004,
            f"{what} gave {body.get('knowledge_item_id')}@{body.get('knowledge_revision_id')}, "
            f"expected {item}@{rev.revision_id}",
        )
        total = body.get("content_total_chars")
        unit = next((u for u in units if total == _total(u, rev.text)), None)
        self._expect(
            unit is not None,
            sk.SK_026,
            f"{what}: content_total_chars is {total}; the text has {len(rev.text)} code points"
            f"{'' if self.world.strict else f' and {utf16_len(rev.text)} UTF-16 units'} ({len(rev.text.encode())} bytes)",
        )
        assert unit is not None
        t.unit = unit
        size = DEFAULT_LIMIT if limit is None else limit
        window = _slice(unit, rev.text, at, size)
        self._expect(
            body.get("content_offset") == at, sk.SK_012, f"{what}: content_offset is {body.get('content_offset')}"
        )
        self._expect(
            body.get("content") == window,
            sk.SK_013 if limit is None and at == 0 else sk.SK_012,
            f"{what}: the window is {str(body.get('content'))[:40]!r}… ({len(str(body.get('content')))} code points), "
            f"{size} {unit}s from {at} are {window[:40]!r}… ({len(window)} code points)",
        )
        limits = {size} if self.world.strict else {size, _total(unit, window)}
        self._expect(
            body.get("content_limit") in limits,
            sk.SK_013,
            f"{what}: content_limit is {body.get('content_limit')}, limit_chars was {size}",
        )
        truncated = at + _total(unit, window) < _total(unit, rev.text)
        self._expect(
            body.get("content_truncated") is truncated,
            sk.SK_026,
            f"{what}: content_truncated is {body.get('content_truncated')} at {at}+{_total(unit, window)} of {total}",
        )
        return body

    @rule(
        who=st.sampled_from(("alice", "carol")),
        item=ITEM,
        revision=st.sampled_from(("none", "first")),
        limit=st.sampled_from((1999, 4000, 10000)),
    )
    @tagged(sk.SK_004, sk.SK_012, sk.SK_013, sk.SK_018, sk.SK_019, sk.SK_020, sk.SK_023, sk.SK_026)
    def page(self, who: str, item: str, revision: str, limit: int) -> None:
        """Window after window to the end of a revision: each window judged, together the text."""
        t = self.truth
        it = t.items[item]
        if not t.runtime or not t.readable(who, item):
            self._read(who, item, revision, "none", "zero", limit)
            return
        rev = it.now if revision == "none" else it.revisions[0]
        arguments: dict[str, Any] = {"knowledge_item_id": item, "limit_chars": limit}
        if revision != "none":
            arguments["knowledge_revision_id"] = rev.revision_id
        at, pieces = 0, []
        for _ in range(12):
            answer = self._ask(who, {**arguments, **({"offset": at} if at else {})})
            body = self._window(
                answer, item, rev, at, limit, f"{who}'s paging of {item}@{rev.revision_id} at {at} limit {limit}"
            )
            if body is None:
                break
            pieces.append(str(body["content"]))
            at += _total(str(t.unit), str(body["content"]))
            if not body["content_truncated"]:
                break
        rebuilt = "".join(pieces)
        if t.unit == UTF16:
            rebuilt = rebuilt.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        self._expect(
            rebuilt == rev.text, sk.SK_026, f"{who}'s windows of {item}@{rev.revision_id} do not rebuild its text"
        )


TAGS = tags(SearchKnowledgeModel)  # rule -> the requirement IDs it checks or sets up
CLAIMS = claims(SearchKnowledgeModel)


def machine(make_world: Callable[[], SkModelWorld], walk_seed: int | str = WALK_SEED) -> type[SearchKnowledgeModel]:
    """The state machine over one world (made once; each example starts from its canonical state:
    runtime on, every item active and published with its canonical text, every base active, alice
    seeing A and B); its ``reach`` collects the rules run and the IDs checked."""
    walk = type(
        "SearchKnowledgeWalk",
        (SearchKnowledgeModel,),
        {"make_world": staticmethod(make_world), "shared": [], "reach": Reach(TAGS)},
    )
    return seeded(walk, walk_seed)


def tour(walk: type[RuleBasedStateMachine]) -> None:
    """One scripted example through the same rules and model: every rule, and every claimed
    check, is reached whatever the walk's seed draws. The order only gives each step what it needs."""
    machine_state = walk()
    s: Any = Steps(machine_state)
    try:
        for who, item, revision, base, offset, limit in (
            ("alice", "sm-a1", "none", "none", "zero", None),
            ("alice", LONG_ITEM, "none", "none", "zero", None),
            ("carol", LONG_ITEM, "current", "own", "seven", 5),
            ("alice", LONG_ITEM, "none", "none", "tail", 10000),
            ("alice", "sm-a1", "none", "none", "past", None),
            ("alice", "sm-a1", "none", "none", "end", 1),
        ):
            s.read(who, item, revision, base, offset, limit)
        s.page("carol", LONG_ITEM, "none", 1999)
        for who, item, token, mode, narrow, max_results, owner in (
            ("alice", "sm-a1", "item", "lexical", "none", 10, False),
            ("alice", "sm-b1", "current", "rrf", "own", 3, False),
            ("alice", "sm-p1", "item", "lexical", "none", 50, False),
            ("carol", "sm-p1", "item", "lexical", "none", 50, False),
            ("alice", "sm-p1", "item", "lexical", "none", 50, True),
            ("alice", "sm-a1", "all", "keyword-ish", "other", 50, False),
            ("alice", "sm-a1", "all", "semantic", "absent", 10, False),
            ("alice", "sm-b1", "item", "hybrid", "other", 1, False),
        ):
            s.query(who, item, token, mode, narrow, max_results, owner)
        s.publish("sm-a1", "long")
        for token, mode in (
            ("current", "lexical"),
            ("historical", "lexical"),
            ("historical", "semantic"),
            ("item", "rrf"),
        ):
            s.query("alice", "sm-a1", token, mode, "none", 50, False)
        for revision, offset, limit in (("first", "one", 5), ("previous", "zero", None), ("none", "seven", 4000)):
            s.read("alice", "sm-a1", revision, "none", offset, limit)
        s.page("alice", "sm-a1", "first", 1999)
        for who, item, revision, base in (
            ("alice", "sm-a1", "absent", "none"),
            ("alice", "sm-a1", "foreign", "none"),
            ("alice", "sm-p1", "none", "none"),
            ("alice", ABSENT_ITEM, "none", "none"),
            ("alice", "sm-a1", "none", "other"),
            ("bob", "sm-a1", "none", "none"),
        ):
            s.read(who, item, revision, base, "zero", None)
        s.query("bob", "sm-a1", "item", "lexical", "none", 10, False)
        for item, what in (("sm-b1", "archive"), (LONG_ITEM, "unpublish")):
            s.visibility((item, what))
            s.read("alice", item, "first", "none", "zero", None)
            s.query("carol", item, "item", "lexical", "none", 50, False)
        s.visibility((A, "archive"))
        s.read("carol", "sm-a1", "first", "none", "zero", None)
        s.query("carol", "sm-a1", "all", "lexical", "none", 50, False)
        for change in ((A, "reactivate"), ("sm-b1", "reactivate"), (LONG_ITEM, "republish"), ("alice", f"{B},{P}")):
            s.visibility(change)
        s.read("alice", "sm-a1", "none", "none", "zero", 5)
        s.read("alice", "sm-p1", "none", "own", "one", 5)
        s.query("alice", "sm-p1", "current", "lexical", "own", 10, False)
        s.runtime_off(False)
        s.runtime_off(True)
        s.page("alice", "sm-b1", "none", 4000)
        s.runtime_on()
        s.query("alice", "sm-b1", "item", "lexical", "none", 10, False)
        s.teardown()  # a step of its own: the last calls' audit check, never masking an earlier failure
    except Exception as exc:
        exc.add_note("\n".join(["The scripted tour, up to the failing step:", *s.lines]))
        raise
