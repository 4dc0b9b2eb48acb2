"""What a test runs against: a route, identities with known bindings, a known
corpus, and control where the target offers it. Without control, the identities
come from the target configuration and state-dependent rules are not verified."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NoReturn

from conformance.common import contract as C
from conformance.common import fanout
from conformance.common.config import TargetConfig
from conformance.common.control import Control
from conformance.common.outcomes import NotVerified
from conformance.common.rules import expect
from conformance.common.transport import IDENTITIES
from conformance.server import checks, corpus
from conformance.server import rules as server
from conformance.server.checks import ok
from conformance.server.leaks import DocumentText
from conformance.server.wire import CoreWire

OTHER_HUB = "https://other-hub.knowledge-conformance.example"
STALLED_PAGES = (
    8  # pages in a row without content after which a chain is taken not to stop (the seed bounds bytes, not pages)
)
_routes = itertools.count(1)  # unique within a process; the run's namespace makes it unique across runs and workers


@dataclass(frozen=True)
class Who:
    token: str
    route: str
    account: str = ""
    session: str = ""

    def __repr__(self) -> str:
        return f"Who(account={self.account!r}, route={self.route!r}, session={self.session[:8]!r})"


@dataclass(repr=False)
class World:
    cfg: TargetConfig
    core: CoreWire
    route: str
    primary: Who
    others: dict[str, Who] = field(default_factory=dict)
    docs: dict[str, corpus.Doc] = field(default_factory=dict)
    control: Control | None = None
    realtime: bool = False  # --realtime: wait real seconds for expiry when there is no control
    kit: bool = False  # the documents are the corpus kit, ingested by the implementer ([target] kit_route)

    def need_control(self, why: str) -> Control:
        if self.control is None:
            raise NotVerified(f"not verified: needs the test-control extension to {why}")
        return self.control

    def need(self, name: str) -> Who:
        who = self.others.get(name)
        if who is None:
            raise NotVerified(f"not verified: needs a second identity [{name}] in the target configuration")
        return who

    def isolated(self, name: str, dimension: str) -> Who:
        """The identity ``name``, which must differ from primary in ``dimension`` alone: a check
        of one binding credits its rule only when nothing else tells the two apart (a stranger
        that is also another Agent Session is refused by the session check, and a Core that
        ignores ``dimension`` passes). Known dimensions are compared (routes always; accounts
        and sessions where the target configuration gives both); when one is known to differ
        besides ``dimension``, or ``dimension`` is known not to differ, the rule is not isolated."""
        who = self.need(name)
        known = {
            dim: (mine, theirs)
            for dim, mine, theirs in (
                ("route", self.primary.route, who.route),
                ("account", self.primary.account, who.account),
                ("session", self.primary.session, who.session),
            )
            if mine and theirs
        }
        if dimension in known and known[dimension][0] == known[dimension][1]:
            raise NotVerified(
                f"not verified: not isolated: [identities.{name}] has the same {dimension} as primary; "
                f"it must differ from primary in its {dimension} only"
            )
        also = sorted(dim for dim, (mine, theirs) in known.items() if dim != dimension and mine != theirs)
        if also:
            raise NotVerified(
                f"not verified: not isolated: [identities.{name}] differs from primary in its {', '.join(also)} "
                f"as well as its {dimension}, so a refusal may come from the {also[0]} check alone; "
                f"it must share everything but its {dimension} with primary (README: Testing a live Core)"
            )
        return who

    def need_doc(self, key: str) -> corpus.Doc:
        if key not in self.docs:
            raise NotVerified(
                f"not verified: needs the suite's own corpus (document {key!r}), seeded through control "
                "or ingested as the corpus kit ([target] kit_route)"
            )
        return self.docs[key]

    def document_text(self) -> DocumentText:
        """Every document and revision text this run wrote, to prove a response carries none of it."""
        known: DocumentText = self.__dict__.setdefault("_text", DocumentText())
        known.add(d.content for d in self.docs.values())
        known.add(self.control.published if self.control is not None else [])
        return known

    def __repr__(self) -> str:
        return f"World(route={self.route!r}, control={self.control is not None}, docs={sorted(self.docs)})"

    # --------------------------------------------------------- conveniences
    def start_run(self, who: Who | None = None, delivery: str | None = "on_demand", text: str = "binding") -> str:
        who = who or self.primary
        body = ok(self.core.turn(who.token, who.route, self.core.turn_body(text, delivery)), server.TURN_003, "turn")
        run_id = body.get("run_id") if isinstance(body, dict) else None
        expect(
            isinstance(run_id, str) and run_id != "",
            server.TURN_003,
            f"the turn answer has no run_id: {checks.describe(body)}",
        )
        return str(run_id)

    def search(self, query: str, run_id: str, who: Who | None = None, **extra: Any) -> Any:
        who = who or self.primary
        return self.core.search(who.token, who.route, {"query": query, "run_id": run_id, **extra})

    def read(self, ref: str, run_id: str, who: Who | None = None, **extra: Any) -> Any:
        who = who or self.primary
        return self.core.read(who.token, who.route, {"ref": ref, "run_id": run_id, **extra})

    def ref_for(self, run_id: str, doc: corpus.Doc | None = None, who: Who | None = None) -> str:
        """A reference to ``doc`` (or to whatever the probe query finds) for this run."""
        query = doc.token if doc else self.cfg.probe_query
        response = self.search(query, run_id, who)
        body = ok(response, server.SRCH_001, "search")
        hints = body.get("hints") or []
        if doc is not None:
            hint = self.hint_for(hints, doc, run_id, who)
            if hint is None:
                self.not_found(
                    f"no hint of the search for {query!r} reads as document {doc.key!r} "
                    f"(status {body.get('status')!r}, {len(hints)} hints)",
                    doc,
                )
            return str(hint["ref"])
        if not hints:
            raise NotVerified(
                f"not verified: search for {query!r} found nothing to read (status {body.get('status')!r})"
            )
        return str(hints[0]["ref"])

    # ------------------------------------------------ document identification
    def hint_for(self, hints: list[Any], doc: corpus.Doc, run_id: str, who: Who | None = None) -> dict[str, Any] | None:
        """The hint that is ``doc``: reading its ref yields content with the document's token.

        Never by rank or title wording (a Core may rank by meaning and word titles its own
        way); hints whose title names the token are only read first. A hint the Core has
        just issued must be readable (READ-001)."""
        candidates = sorted(
            (h for h in hints if isinstance(h, dict) and isinstance(h.get("ref"), str)),
            key=lambda h: doc.token not in str(h.get("title", "")),
        )
        for hint in candidates:
            page = ok(self.read(hint["ref"], run_id, who), server.READ_001, "read of a hint the search just returned")
            checks.schema("read-response", page, names=self.cfg.names)  # a page no reader can use is no "not found"
            content = page.get("content") if isinstance(page, dict) else None
            if isinstance(content, str) and doc.token in content:
                if self.kit and not doc.content.startswith(content[:-1]):  # the last character may be a split one
                    raise NotVerified(
                        f"not verified: kit document {doc.key!r} on route {self.route!r} does not hold the kit's text "
                        "(its first page is not the start of the exported file: ingested altered?)"
                    )
                return dict(hint)
        return None

    def shows(self, hint: Any, doc: corpus.Doc, run_id: str, who: Who | None = None) -> bool:
        """Whether ``hint`` discloses ``doc``: its title carries the seeded title (with the
        token), or its ref reads as the document. A refused read discloses nothing."""
        if not isinstance(hint, dict):
            return False
        if doc.stored_title in str(hint.get("title", "")):
            return True
        if not isinstance(hint.get("ref"), str):
            return False
        response = self.read(hint["ref"], run_id, who)
        try:
            content = response.json().get("content") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            return False
        return isinstance(content, str) and doc.token in content

    def not_found(self, what: str, *docs: corpus.Doc) -> NoReturn:
        """The seed does not require search to find anything ("at most three" hints): a
        miss leaves what needed the document not verified, unless the run is strict. A kit
        document is never a failure: the suite cannot know how it was ingested."""
        if self.kit:
            keys = ", ".join(repr(d.key) for d in docs) or "of the corpus"
            raise NotVerified(f"not verified: kit document {keys} not found on route {self.route!r}: {what}")
        expect(not self.cfg.strict_codes, server.SRCH_001, f"strict: {what}")
        raise NotVerified(f"not verified: {what}")

    def page(self, ref: str, run_id: str, max_bytes: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        """One page, checked. A refusal of a ``max_bytes`` within 4096..32768 is READ-005's
        failure when the same read without it answers 200; otherwise the read is what broke."""
        extra: dict[str, Any] = {"cursor": cursor} if cursor else {}
        sized: dict[str, Any] = {**extra, **({} if max_bytes is None else {"max_bytes": max_bytes})}
        response = self.read(ref, run_id, **sized)
        accepted = server.READ_001
        if response.status_code != 200 and max_bytes is not None and self.read(ref, run_id, **extra).status_code == 200:
            accepted = server.READ_005
        return checks.page(
            response,
            ref=ref,
            max_bytes=max_bytes,
            requirement_bound=server.READ_004 if max_bytes is None else server.READ_005,
            accepted=accepted,
            strict=self.cfg.strict_codes,
        )

    def chain_budget(self, pages: list[dict[str, Any]]) -> int:
        """The content bytes a chain may carry here: 131072, or the smaller ``read_chain_max_bytes``
        the Core advertises on its pages or in capabilities (the seed fixes only the "at most")."""
        advertised = [p["read_chain_max_bytes"] for p in pages if _count(p.get("read_chain_max_bytes"))]
        if "_caps_budget" not in self.__dict__:  # asked once per world: under load a chain is one of many
            name = self.cfg.names.limits["read_chain_max_bytes"]
            response = self.core.capabilities(self.primary.token, self.route)
            try:
                body = response.json() if response.status_code == 200 else None
                limits = body.get(self.cfg.names.capabilities["limits"]) if isinstance(body, dict) else None
            except ValueError:
                limits = None
            found = limits.get(name) if isinstance(limits, dict) else None
            self.__dict__["_caps_budget"] = found if _count(found) else C.READ_CHAIN_MAX_BYTES
        return int(min([C.READ_CHAIN_MAX_BYTES, self.__dict__["_caps_budget"], *advertised]))

    def follow(
        self, ref: str, run_id: str, max_bytes: int | None = None, *, first: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every page of a chain, each checked as a page on the way (``first``: its first page,
        already read with ``max_bytes``; the chain goes on from there).

        Bounded by what the contract bounds, never by a page count (a Core may answer with
        pages much smaller than asked): a chain stops after at most 131072 content bytes
        (READ-010), so one that still offers a next_cursor past them, or that offers one
        page after page without delivering a byte, does not stop."""
        pages: list[dict[str, Any]] = []
        cursor: str | None = None
        delivered, stalled = 0, 0
        while True:
            body = first if first is not None and not pages else self.page(ref, run_id, max_bytes, cursor)
            pages.append(body)
            size = C.utf8_size(body["content"]) if isinstance(body["content"], str) else 0
            delivered += size
            cursor = body["next_cursor"]
            if cursor is None:
                return pages
            # Raised, never recorded: a chain within the budget shows nothing of how the budget is kept.
            if delivered > C.READ_CHAIN_MAX_BYTES:
                server.READ_010.fail(
                    f"the chain delivered {delivered} content bytes in "
                    f"{len(pages)} pages, over {C.READ_CHAIN_MAX_BYTES}, and still offers a next_cursor"
                )
            stalled = 0 if size else stalled + 1
            if stalled >= STALLED_PAGES:
                server.READ_010.fail(
                    f"{stalled} pages in a row carried no content and offered a next_cursor "
                    f"(after {delivered} content bytes): the chain makes no progress and never stops"
                )


def chain_ended(pages: list[dict[str, Any]]) -> None:
    """What every chain that ended (``next_cursor`` null) shows without knowing the document: a
    chain not stopped by the budget is complete, so its last page says ``truncated: false``; it
    carried at most 131072 content bytes; and ``total_content_bytes``, where sent, is what was read
    (all of it for a complete chain, more than it for an exhausted one).

    Run on chains of documents the suite does not know; where it knows the document, its own
    comparisons come first and name the rule more precisely (a chain that overlaps its pages
    breaks READ-015, though its total_content_bytes no longer matches either)."""
    last = pages[-1]
    delivered = sum(C.utf8_size(p["content"]) for p in pages if isinstance(p.get("content"), str))
    exhausted = last.get("budget_exhausted") is True
    if delivered > C.READ_CHAIN_MAX_BYTES:
        server.READ_010.fail(
            f"the chain delivered {delivered} content bytes in {len(pages)} pages, over {C.READ_CHAIN_MAX_BYTES}"
        )
    flags = {k: last.get(k) for k in ("truncated", "next_cursor", "budget_exhausted")}
    if not exhausted:
        expect(
            checks.says_complete(last),
            server.READ_009,
            f"the chain ended (next_cursor null) without budget exhaustion, yet its last page says {checks.describe(flags)}",
        )
    total = last.get("total_content_bytes")
    if isinstance(total, int) and not isinstance(total, bool):
        if exhausted:
            expect(
                total > delivered,
                server.READ_014,
                f"total_content_bytes {total}, yet the chain was exhausted after {delivered} content bytes of it",
            )
        else:
            expect(
                total == delivered,
                server.READ_014,
                f"total_content_bytes {total}, and the complete chain carried {delivered} content bytes",
            )


def provision(
    cfg: TargetConfig,
    core: CoreWire,
    control: Control | None,
    *,
    large: bool = True,
    mode: str = "normal",
    realtime: bool = False,
) -> World:
    """A fresh world through control (its workspaces named under ``core``'s namespace), or the configured one without it."""
    if control is None:
        ids = cfg.identities
        configured = {name: Who(i.token, i.route, i.account, i.session) for name, i in ids.items()}
        _name(configured)
        main = configured.pop("primary")
        kit = cfg.kit_route is not None
        docs = corpus.build() if kit else {}
        return World(cfg, core, cfg.route, main, configured, docs, realtime=realtime, kit=kit)
    route = f"kc-{core.namespace}-{next(_routes)}"
    # Route names that sort on either side of reserved words such as "auto": a Core that compares
    # route names by order instead of equality refuses one of them (see test_capabilities).
    other_route = f"a-{route}"
    docs = corpus.build(large=large)

    def workspace(at: str, at_mode: str) -> None:
        control.create_workspace(at, at_mode)
        control.replace_corpus(at, corpus.bases(docs))

    def mint(account: str, at: str = route, **kw: Any) -> Who:
        m = control.mint(account, at, **kw)
        return Who(m["token"], m["route"], m["account"], m["session_id"])

    # Side by side where nothing depends on the other (a Core far away costs a round trip each,
    # and a run provisions a world for most tests that change state): the two workspaces, then
    # the identities that share the primary's session.
    fanout.each(lambda args: workspace(*args), [(route, mode), (other_route, "normal")])
    primary = mint("alice")
    minted = fanout.each(
        lambda args: mint(*args[0], **args[1]),
        [
            (("alice",), {}),
            # Each differs from primary in one binding only, so each binding is tested alone.
            (("alice",), {"session_id": primary.session}),
            (("bob",), {"session_id": primary.session}),
            (("alice", other_route), {"session_id": primary.session}),
            (("alice",), {"hub": OTHER_HUB, "session_id": primary.session}),
        ],
    )
    others = dict(
        zip(("other_session", "same_session", "other_account", "other_route", "other_hub"), minted, strict=True)
    )
    _name({"primary": primary, **others})
    return World(cfg, core, route, primary, others, docs, control, realtime)


def _count(value: Any) -> bool:
    """A positive integer (never a boolean): a limit a Core may advertise."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _name(identities: dict[str, Who]) -> None:
    """Each identity's token by its name (``primary``, ``other_route``, ...): a failure's curl line names it."""
    for name, who in identities.items():
        IDENTITIES.name(who.token, name)


@dataclass(repr=False)
class Stated:
    """A workspace in one state (disabled, legacy, unavailable), and a run and a reference of the
    route where one could be had (through control: before the state was set)."""

    world: World
    state: str
    run_id: str | None = None
    ref: str | None = None
    no_run: str = ""  # why there is no run

    def need_run(self) -> str:
        if self.run_id is None:
            raise NotVerified(f"not verified: {self.no_run}, so there is no run to search with")
        return self.run_id


def in_state(
    cfg: TargetConfig, core: CoreWire, control: Control | None, state: str, *, realtime: bool = False
) -> Stated:
    """The configured ``[target.workspaces]`` route kept in ``state``, or, through control, a fresh
    workspace set to it; neither: not verified."""
    configured = cfg.workspaces.get(state)
    if configured is not None:
        who = Who(configured.token, configured.route, configured.account, configured.session)
        kit = cfg.kit_route is not None  # its text is known to the leak checks, wherever it was ingested
        world = World(cfg, core, who.route, who, {}, corpus.build() if kit else {}, realtime=realtime, kit=kit)
        # A legacy Core knows no knowledge_delivery; a disabled or unavailable one may refuse a turn.
        response = core.turn(
            who.token, who.route, core.turn_body(cfg.probe_query, None if state == "legacy" else "on_demand")
        )
        try:
            body = response.json() if response.status_code == 200 else None
        except ValueError:
            body = None
        run = body.get("run_id") if isinstance(body, dict) else None
        why = f"the {state} workspace {who.route!r} answered the turn with HTTP {response.status_code}"
        return Stated(world, state, str(run) if isinstance(run, str) else None, None, why)
    if control is None:
        raise NotVerified(
            f"not verified: needs the test-control extension to set a workspace's mode, "
            f"or a workspace kept {state} ([target.workspaces.{state}])"
        )
    world = provision(cfg, core, control, large=False, realtime=realtime)
    run_id = world.start_run()
    hints = checks.search_response(world.search("binding", run_id))["hints"]
    control.set_mode(world.route, state)
    return Stated(world, state, run_id, str(hints[0]["ref"]) if hints else None)
