"""The Locust user: one identity of the pool driving turns, searches, read chains followed page
by page and reference reuse, while many others do the same.

Every step runs the suite's own checks (``conformance.server.checks``, ``World.follow``, the binding
refusal of ``test_bindings``), so the invariants are the sequential suite's: the search bound
(4096 bytes, three hints), every page within its ``max_bytes``, a chain within 131072 content
bytes, references bound to their account, the reference-error family, no 5xx. A check that
passes credits the requirements it covers; one that fails names the one requirement it saw
broken, exactly as in the suite. Nothing here is timed."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import gevent
import httpx
import pytest
from locust import HttpUser, between, task
from locust.clients import HttpSession

from conformance.load.http import LocustTransport
from conformance.load.setup import Context, Issued, context
from conformance.server import checks
from conformance.server.checks import expect
from conformance.server.wire import CoreWire
from conformance.server.world import World
from conformance.target import contract as C
from conformance.target.outcomes import ContractViolation, HarnessError
from conformance.target.transport import Recorder

TURN = ("TURN-003", "TURN-006", "TURN-007", "TURN-008", "WIRE-002")
SEARCH = ("SRCH-001", "SRCH-003", "SRCH-004", "SRCH-005", "SRCH-006", "SRCH-007", "SRCH-008", "READ-007", "WIRE-002")
PAGE = ("READ-001", "READ-002", "READ-003", "READ-007", "READ-009", "READ-011", "READ-014", "READ-016", "WIRE-002")
CHAIN = (*PAGE, "READ-010", "READ-020")
BINDING = ("REF-009", "REF-014")  # REF-011 and REF-012 too when the refusal is a reference error (not run_not_found)
REFERENCE_CODES = ("REF-011", "REF-012")
MAX_BYTES = (None, C.READ_MIN_MAX_BYTES, 8192, C.READ_DEFAULT_MAX_BYTES, C.READ_MAX_MAX_BYTES)
LONGEST_CHARACTER = 4  # UTF-8 bytes: a chain that stops with more room than this left stopped early
PROFILE = tuple(dict.fromkeys((*TURN, *SEARCH, *CHAIN, "READ-004", "READ-005", *BINDING, *REFERENCE_CODES)))
"""Every requirement a load run judges: its report's scope."""


def bound_of(max_bytes: int | None) -> str:
    return "READ-004" if max_bytes is None else "READ-005"


class ContractUser(HttpUser):
    """One identity of the pool (``Context.next_identity``); all of them at once are the load."""

    wait_time = between(0.0, 0.02)

    def on_start(self) -> None:
        self.ctx: Context = context(self.environment)
        self.who = self.ctx.next_identity()
        # Its choices (queries, page sizes, references to reuse) follow from the run ID; the interleaving of users does not.
        self.rng = random.Random(f"{self.ctx.settings.namespace}/{self.who.account}/{self.who.session}")
        self.recorder, self.side_recorder = self._recorder(), self._recorder()
        self.core = self._core(self.client, self.recorder)
        # A second session of the same user: the owner's half of a simultaneous reuse goes out on its own connection.
        self.side = self._core(HttpSession(self.host, self.environment.events.request, self), self.side_recorder)
        self.world = self.ctx.world(self.core, self.who)
        self.run_id = ""
        self.judge(TURN, self.new_run)

    def _recorder(self) -> Recorder:
        """The exchanges of the current step, secrets redacted: a violation's evidence."""
        return Recorder(0.0, str(self.ctx.cfg.wire["auth"]["header"]))

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
    def judge(self, ids: Iterable[str], step: Callable[[], object], recorder: Recorder | None = None) -> bool:
        """Run one step of checks: credit ``ids`` when it passes, the one named requirement when it does not.
        Without a run of its own (its first turn was refused), a user only starts turns."""
        if not self.run_id and step != self.new_run:
            self.ctx.tally.skip("no run: the user's turns were refused")
            return False
        recorder = recorder or self.recorder
        recorder.current = []
        try:
            step()
        except ContractViolation as exc:
            self.ctx.tally.violated(exc.requirement, str(exc), self._exchange(recorder))
            return False
        except pytest.skip.Exception as exc:  # the suite's "not verified" (e.g. a search found nothing)
            self.ctx.tally.skip(str(exc.msg).removeprefix("not verified: ")[:200])
            return False
        except (HarnessError, httpx.TransportError) as exc:
            self.ctx.tally.error(type(exc).__name__, str(exc)[:300])
            return False
        self.ctx.tally.passed(ids)
        return True

    def _exchange(self, recorder: Recorder) -> dict[str, Any] | None:
        if not recorder.current:
            return None
        auth = self.ctx.cfg.wire["auth"]
        last = recorder.current[-1]
        return {**asdict(last), "curl": last.curl(self.host or "", auth["header"], auth["scheme"])}

    # -------------------------------------------------------------- steps
    def new_run(self) -> None:
        """An on_demand turn (its text one of the queries: the worst cases for the bound come up too),
        checked as the suite checks one (test_turns): its run is this user's from now on."""
        response = self.core.turn(
            self.who.token, self.who.route, self.core.turn_body(self.rng.choice(self.ctx.queries))
        )
        body = checks.ok(response, "TURN-003", "an on_demand turn")
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
        delivered = sum(C.utf8_size(p["content"]) for p in pages if isinstance(p.get("content"), str))
        expect(
            delivered <= C.READ_CHAIN_MAX_BYTES,
            "READ-010",
            f"the chain delivered {delivered} content bytes in {len(pages)} pages, over {C.READ_CHAIN_MAX_BYTES}",
        )
        if pages[-1].get("budget_exhausted") is True:
            expect(
                delivered > C.READ_CHAIN_MAX_BYTES - LONGEST_CHARACTER,
                "READ-020",
                f"budget_exhausted after {delivered} content "
                f"bytes: any next character would still fit the {C.READ_CHAIN_MAX_BYTES}-byte budget",
            )

    def refuse(self, world: World, response: httpx.Response) -> None:
        """The suite's binding refusal (checks.binding_refused), credited to the reference-error rules when it is one."""
        checks.binding_refused(world, response, "REF-009", "ref", known=[])
        if C.is_reference_error_code(response.json().get("error")):  # refused() has read it as an error envelope
            self.ctx.tally.passed(REFERENCE_CODES)

    # -------------------------------------------------------------- tasks
    @task(2)
    def turn(self) -> None:
        self.judge(TURN, self.new_run)

    @task(4)
    def search_hints(self) -> None:
        query = self.rng.choice(self.ctx.queries)
        self.judge(SEARCH, lambda: self.search(query))

    @task(4)
    def read_chain(self) -> None:
        """Search, then follow one hint's whole chain at a random page size."""
        found: dict[str, Any] = {}
        if not self.judge(SEARCH, lambda: found.update(self.search(self.rng.choice(self.ctx.queries)))):
            return
        hints = found.get("hints") or []
        if not hints:
            self.ctx.tally.skip("a search found nothing to read")
            return
        ref, max_bytes = self.rng.choice(hints)["ref"], self.rng.choice(MAX_BYTES)
        self.judge((*CHAIN, bound_of(max_bytes)), lambda: self.follow(ref, max_bytes))

    @task(2)
    def reuse_foreign_reference(self) -> None:
        """Another account's reference, presented with this identity's own run: refused."""
        issued = self.ctx.foreign(self.who, self.rng)
        if issued is None:
            self.ctx.tally.skip("no reference of another account issued yet")
            return
        self.judge(
            BINDING,
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
        asks = [gevent.spawn(self._owner_reads, owner, issued), gevent.spawn(self._stranger_reads, issued)]
        try:
            gevent.joinall(asks)
        finally:  # a user stopped at the end of the run takes its two reads with it: none outlives the world's cleanup
            gevent.killall(asks)

    def _owner_reads(self, owner: World, issued: Issued) -> None:
        self.judge(
            (*PAGE, "READ-005"), lambda: owner.page(issued.ref, issued.run_id, C.READ_MIN_MAX_BYTES), self.side_recorder
        )

    def _stranger_reads(self, issued: Issued) -> None:
        self.judge(
            BINDING,
            lambda: self.refuse(self.world, self.world.read(issued.ref, issued.run_id, max_bytes=C.READ_MIN_MAX_BYTES)),
        )
