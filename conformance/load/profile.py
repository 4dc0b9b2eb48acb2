"""The Locust user: one identity of the pool driving turns, searches, read chains followed page
by page and reference reuse, while many others do the same.

Every step runs the suite's own checks (``conformance.server.checks``, ``World.follow``, the binding
refusal of ``test_bindings``), so the invariants are the sequential suite's: the search bound
(4096 bytes, three hints), every page within its ``max_bytes``, a chain within 131072 content
bytes, references bound to their account, the reference-error family, no 5xx. A check that
passes credits the requirements it covers; one that fails names the one requirement it saw
broken, exactly as in the suite. Nothing here is timed."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import gevent
import httpx
from locust import HttpUser, between, task
from locust.clients import HttpSession

from conformance.common import contract as C
from conformance.common.outcomes import ContractViolation, HarnessError, NotVerified
from conformance.common.rules import expect, record_into
from conformance.common.transport import Recorder, judged_exchange
from conformance.load.http import LocustTransport
from conformance.load.setup import Context, Issued, context
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.wire import CoreWire
from conformance.server.world import World
from knowledge_schemas import load_catalogue

MAX_BYTES = (None, C.READ_MIN_MAX_BYTES, 8192, C.READ_DEFAULT_MAX_BYTES, C.READ_MAX_MAX_BYTES)
LONGEST_CHARACTER = 4  # UTF-8 bytes: a chain that stops with more room than this left stopped early
PROFILE = (
    *(server.TURN_003, server.TURN_006, server.TURN_007, server.TURN_008, server.WIRE_002),  # a turn
    *(server.SRCH_001, *checks.SEARCH_RULES),  # a search
    *(server.READ_001, server.READ_002, server.READ_003, *checks.CHAIN_RULES, server.READ_020),  # chains
    *(server.REF_009, server.REF_011, server.REF_012, server.REF_014),  # another account's reference
)
"""Every requirement a load run judges: its report's scope. What a run verifies of it follows from
the checks that passed (``conformance.common.rules``), counted per requirement in the tally."""


class ContractUser(HttpUser):
    """One identity of the pool (``Context.next_identity``); all of them at once are the load."""

    wait_time = between(0.0, 0.02)

    def on_start(self) -> None:
        self.ctx: Context = context(self.environment)
        record_into(self.ctx.tally.ledger)  # every user of this process: its checks count in the one tally
        self.who = self.ctx.next_identity()
        # Its choices (queries, page sizes, references to reuse) follow from the run ID; the interleaving of users does not.
        self.rng = random.Random(f"{self.ctx.settings.namespace}/{self.who.account}/{self.who.session}")
        self.recorder, self.side_recorder = self._recorder(), self._recorder()
        self.core = self._core(self.client, self.recorder)
        # A second session of the same user: the owner's half of a simultaneous reuse goes out on its own connection.
        self.side = self._core(HttpSession(self.host, self.environment.events.request, self), self.side_recorder)
        self.world = self.ctx.world(self.core, self.who)
        self.run_id = ""
        self.judge(self.new_run)

    def _recorder(self) -> Recorder:
        """The exchanges of the current step, secrets redacted: a violation's evidence."""
        wire = self.ctx.cfg.wire
        return Recorder(0.0, str(wire["auth"]["header"]), str(wire["auth"]["scheme"]), wire["paths"])

    def _core(self, session: Any, recorder: Recorder) -> CoreWire:
        def keep(response: httpx.Response) -> None:
            response.read()
            recorder.record(response)

        http = httpx.Client(
            base_url=self.host or "",
            transport=LocustTransport(session, self.ctx.cfg.timeout_seconds),
            event_hooks={"response": [keep]},
        )
        return CoreWire(http, self.ctx.cfg, self.ctx.settings.namespace)

    # ------------------------------------------------------------ judging
    def judge(self, step: Callable[[], object], recorder: Recorder | None = None) -> bool:
        """Run one step of checks: each that passes counts for its rule (the process's ledger is the
        tally's, see ``context``); a violation counts against the one requirement it names.
        Without a run of its own (its first turn was refused), a user only starts turns."""
        if not self.run_id and step != self.new_run:
            self.ctx.tally.skip("no run: the user's turns were refused")
            return False
        recorder = recorder or self.recorder
        recorder.current = []
        try:
            step()
        except ContractViolation as exc:
            self.ctx.tally.violated(exc.requirement, str(exc), self._exchange(recorder, exc.requirement))
            return False
        except NotVerified as exc:  # the suite's "not verified" (e.g. a search found nothing)
            self.ctx.tally.skip(exc.reason.removeprefix("not verified: ")[:200])
            return False
        except (HarnessError, httpx.TransportError) as exc:
            self.ctx.tally.error(type(exc).__name__, str(exc)[:300])
            return False
        return True

    def _exchange(self, recorder: Recorder, requirement: str) -> dict[str, Any] | None:
        """The request the violated check judged (see ``judged_exchange``), as evidence."""
        catalogue = load_catalogue()
        via = catalogue[requirement].via if requirement in catalogue else None
        chosen = judged_exchange(recorder.current, via)
        return None if chosen is None else chosen.evidence(self.host or "", self.ctx.cfg.wire["auth"], judged=True)

    # -------------------------------------------------------------- steps
    def new_run(self) -> None:
        """An on_demand turn (its text one of the queries: the worst cases for the bound come up too),
        checked as the suite checks one (test_turns): its run is this user's from now on."""
        response = self.core.turn(
            self.who.token, self.who.route, self.core.turn_body(self.rng.choice(self.ctx.queries))
        )
        body = checks.ok(response, server.TURN_003, "an on_demand turn")
        self.run_id = str(body.get("run_id", ""))
        context = body.get("context")
        context = context if isinstance(context, dict) else {}
        checks.bounded_delivery(self.world, body, context)
        checks.empty_knowledge(self.world, context)

    def search(self, query: str) -> dict[str, Any]:
        body = checks.search_response(self.world.search(query, self.run_id))
        self.ctx.issue(self.who, self.run_id, [h["ref"] for h in body["hints"]])
        return body

    def follow(self, ref: str, max_bytes: int | None) -> None:
        """The whole chain, page by page (``World.follow``: each page within its bound, no
        next_cursor past the budget), then what only the whole chain shows: its content within
        131072 bytes, and no budget declared exhausted with room left for any character."""
        pages = self.world.follow(ref, self.run_id, max_bytes)
        texts = [p["content"] for p in pages if isinstance(p.get("content"), str)]
        if any(a[-1:] > "\x7f" or b[:1] > "\x7f" for a, b in itertools.pairwise(texts)):
            server.READ_016.held()  # a cut next to a multibyte character, and every page valid UTF-8 without a lone surrogate
        delivered = sum(C.utf8_size(t) for t in texts)
        expect(
            delivered <= C.READ_CHAIN_MAX_BYTES,
            server.READ_010,
            f"the chain delivered {delivered} content bytes in {len(pages)} pages, over {C.READ_CHAIN_MAX_BYTES}",
        )
        if pages[-1].get("budget_exhausted") is True:  # as test_read: strict holds the edge, else one page's room
            budget = self.world.chain_budget(pages)
            room = LONGEST_CHARACTER if self.world.cfg.strict_codes else C.READ_MAX_MAX_BYTES
            expect(
                delivered > budget - room,
                server.READ_020,
                f"budget_exhausted after {delivered} content bytes, though the chain's {budget}-byte budget "
                f"had room for more than {room - 1} more",
            )

    def refuse(self, world: World, response: httpx.Response) -> None:
        """The suite's binding refusal (checks.binding_refused): the reference-error rules count when it is one."""
        checks.binding_refused(world, response, server.REF_009, "ref", known=[])

    # -------------------------------------------------------------- tasks
    @task(2)
    def turn(self) -> None:
        self.judge(self.new_run)

    @task(4)
    def search_hints(self) -> None:
        query = self.rng.choice(self.ctx.queries)
        self.judge(lambda: self.search(query))

    @task(4)
    def read_chain(self) -> None:
        """Search, then follow one hint's whole chain at a random page size."""
        found: dict[str, Any] = {}
        if not self.judge(lambda: found.update(self.search(self.rng.choice(self.ctx.queries)))):
            return
        hints = found.get("hints") or []
        if not hints:
            self.ctx.tally.skip("a search found nothing to read")
            return
        ref, max_bytes = self.rng.choice(hints)["ref"], self.rng.choice(MAX_BYTES)
        self.judge(lambda: self.follow(ref, max_bytes))

    @task(2)
    def reuse_foreign_reference(self) -> None:
        """Another account's reference, presented with this identity's own run: refused."""
        issued = self.ctx.foreign(self.who, self.rng)
        if issued is None:
            self.ctx.tally.skip("no reference of another account issued yet")
            return
        self.judge(
            lambda: self.refuse(self.world, self.world.read(issued.ref, self.run_id, max_bytes=C.READ_MIN_MAX_BYTES)),
        )

    @task(2)
    def reuse_at_once(self) -> None:
        """Owner and stranger present the same reference with the same run at the same moment,
        as when a reference leaks to another account while its owner reads it: the owner gets
        its page, the stranger a refusal, whichever the Core serves first."""
        issued = self.ctx.foreign(self.who, self.rng)
        if issued is None:
            self.ctx.tally.skip("no reference of another account issued yet")
            return
        owner = self.ctx.world(self.side, issued.owner)
        asks: list[gevent.Greenlet[..., None]] = [
            gevent.spawn(self._owner_reads, owner, issued),
            gevent.spawn(self._stranger_reads, issued),
        ]
        try:
            gevent.joinall(asks)
        finally:  # a user stopped at the end of the run takes its two reads with it: none outlives the world's cleanup
            gevent.killall(asks)

    def _owner_reads(self, owner: World, issued: Issued) -> None:
        self.judge(lambda: owner.page(issued.ref, issued.run_id, C.READ_MIN_MAX_BYTES), self.side_recorder)

    def _stranger_reads(self, issued: Issued) -> None:
        self.judge(
            lambda: self.refuse(self.world, self.world.read(issued.ref, issued.run_id, max_bytes=C.READ_MIN_MAX_BYTES)),
        )
