"""The Core's rules a sequence of exchanges shows: what the Core accepted or refused given what it
had issued before, and when (references, cursors and chains, runs, turns, availability).

Each judgement needs only what the proxy saw: a reference's issue and use times (expiry), the
route, run and identity it was issued to and presented under (bindings), the pages of a chain
(budget, flags, totals, revisions). Where that is not enough (a reference issued before
observation began, identities not configured), the rule is left alone, never guessed."""

from __future__ import annotations

from typing import Any

from conformance.common import contract as C
from conformance.common.outcomes import ContractViolation, NotVerified
from conformance.common.rules import Rule, expect
from conformance.observe.context import AVAILABILITY_WINDOW, Context
from conformance.observe.observed import Observed
from conformance.observe.seen import digest
from conformance.observe.server_rules import unsupported
from conformance.observe.traffic import Capabilities, ChainAt, Issued, Run, Turn, strings_of
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.model import REFERENCE_KINDS

PRESENCE = {"capabilities": server.CAP_001, "search": server.SRCH_001, "read": server.READ_001}
DIMENSIONS = {"hub": server.REF_003, "session": server.REF_004, "account": server.REF_009}


# ------------------------------------------------------------------ endpoints
def presence(ctx: Context, ob: Observed) -> None:
    """An endpoint that answers an old Core's status (404/405/501) on a route whose other knowledge
    endpoints work is missing (CAP-001, SRCH-001, READ-001): the protocol is there, this part not."""
    if ob.operation not in PRESENCE or ob.seen.credential is None:
        return
    traffic, number = ctx.traffic, ob.seen.number
    answer = ob.answer() if ob.status == 404 else None
    code = answer.get("error") if isinstance(answer, dict) else None
    if ob.status in unsupported(ctx.cfg) and code in (None, "not_found"):  # a 404 with its own code is no old Core
        traffic.missing.put((ob.route, ob.operation), number)
        working = [op for op in PRESENCE if op != ob.operation and (ob.route, op) in traffic.working]
        if working:
            PRESENCE[ob.operation].fail(
                f"{ob.operation} answered HTTP {ob.status} on route {ob.route!r}, whose {working[0]} works: "
                "the endpoint of the protocol is missing"
            )
    elif ob.status == 200:
        traffic.working.put((ob.route, ob.operation), number)
        for op, rule in PRESENCE.items():
            earlier = traffic.missing.get((ob.route, op))
            if op != ob.operation and earlier is not None:
                rule.fail(
                    f"{op} answered an old endpoint's status (exchange #{earlier}) on route {ob.route!r}, "
                    f"whose {ob.operation} works (this exchange): the endpoint of the protocol is missing"
                )


def capabilities_seen(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    enabled_name = ctx.cfg.names.capabilities["enabled"]
    enabled = body.get(enabled_name) if body is not None else None
    seen = Capabilities(
        ob.status,
        ob.seen.response.data if ob.readable else b"",
        enabled if isinstance(enabled, bool) else None,
        ob.status == 200 and body is not None,
        ob.seen.answered,
    )
    if ob.status != 0:
        ctx.traffic.capabilities.put(ob.route, seen)
        ctx.traffic.asked.put((ob.seen.credential, ob.route), seen)


def _disabled(ctx: Context, route: str) -> bool:
    caps = ctx.traffic.capabilities.get(route)
    return caps is not None and caps.enabled is False


# ---------------------------------------------------------------------- turns
def turn_key(ob: Observed) -> tuple[str, str, str] | None:
    request = ob.request
    if not isinstance(request, dict):
        return None
    ids = [request.get(k) for k in ("client_conversation_id", "client_turn_id", "user_message_id")]
    if not all(isinstance(i, str) for i in ids):
        return None
    return ob.caller.key, ob.route, "\x1f".join(str(i) for i in ids)


def turn_pinned(ctx: Context, ob: Observed, body: dict[str, Any] | None, earlier: Turn | None) -> None:
    """The same turn identity again: the same payload replays the committed run (TURN-004); another
    payload keeps the pinned run or is refused (TURN-011; strict: the 409 turn_conflict)."""
    if earlier is None or earlier.run_id is None or ob.status == 0:
        return
    payload = digest(C.canonical(ob.request))
    run_id = body.get("run_id") if body is not None else None
    if payload == earlier.payload:
        if ob.status == 200:
            expect(
                run_id == earlier.run_id,
                server.TURN_004,
                f"the same turn identity and payload (first sent in exchange #{earlier.number}) started run "
                f"{run_id!r}, the original was {earlier.run_id!r}",
            )
        return
    cfg = ctx.cfg
    if cfg.strict_codes:
        expect(
            ob.status == cfg.status("turn_conflict"),
            server.TURN_011,
            f"the same turn identity with another payload answered HTTP {ob.status}, strict expects "
            f"{cfg.status('turn_conflict')} {cfg.code('turn_conflict')}",
        )
        return
    if ob.status == 200:
        expect(
            run_id == earlier.run_id,
            server.TURN_011,
            f"the same turn identity with another payload (the first in exchange #{earlier.number}) started "
            f"run {run_id!r} instead of keeping the pinned run {earlier.run_id!r}",
        )
    elif 400 <= ob.status < 500:
        server.TURN_011.held()


def run_started(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    """Remember the run a turn started and the references its on_demand hints issued."""
    run_id = body.get("run_id") if body is not None else None
    if body is None or ob.status != 200 or not isinstance(run_id, str):
        return
    ctx.traffic.runs.put(run_id, Run(run_id, ob.caller, ob.seen.answered))
    ctx.traffic.latest_run.put((ob.seen.credential, ob.route), run_id)
    delivery = ctx.cfg.names.delivery(body.get("context"))
    if isinstance(delivery, dict) and isinstance(delivery.get("hints"), list):
        _issue(ctx, ob, run_id, delivery["hints"])


class _PassiveCore:
    """The Core as ``checks.advertises_on_demand`` asks it: the route's capabilities answer the
    proxy saw last (none seen: an old endpoint's 404, so nothing is taken as advertised)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def capabilities(self, _token: object, route: str) -> Any:
        import httpx

        seen = self.ctx.traffic.capabilities.get(route)
        if seen is None:
            return httpx.Response(404, content=b'{"error":"not_found"}')
        return httpx.Response(seen.status, content=seen.body)


class _PassiveWorld:
    """What the suite's turn checks read of a world, answered from the traffic."""

    class _Primary:
        token = ""

    primary = _Primary()

    def __init__(self, ctx: Context, route: str) -> None:
        self.cfg = ctx.cfg
        self.route = route
        self.core = _PassiveCore(ctx)
        self._ctx = ctx

    def document_text(self) -> Any:
        return self._ctx.traffic.whole_documents()


def _on_demand_context(ob: Observed, body: dict[str, Any] | None) -> dict[str, Any] | None:
    if ob.status != 200 or body is None or ob.field("knowledge_delivery") != "on_demand":
        return None
    context = body.get("context")
    return context if isinstance(context, dict) else None


def empty_knowledge(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    """An on_demand turn's knowledge and knowledge_refs are present and empty (checks.empty_knowledge)."""
    context = _on_demand_context(ob, body)
    if context is None or _disabled(ctx, ob.route):
        return
    try:
        checks.empty_knowledge(_PassiveWorld(ctx, ob.route), context)
    except NotVerified:
        return  # a legacy-shaped answer the seed allows on a route that does not advertise the mode


def bounded_delivery(ctx: Context, ob: Observed, body: dict[str, Any] | None, *, shape: bool = True) -> None:
    """An on_demand turn's delivery object: schema, bounded hints (checks.bounded_delivery).
    ``shape`` false: the answer already broke TURN-008, whose missing member the whole answer's
    schema (WIRE-002) would name again; the suite's check stops at TURN-008 too."""
    context = _on_demand_context(ob, body)
    if context is None or body is None or _disabled(ctx, ob.route):
        return
    try:
        checks.bounded_delivery(_PassiveWorld(ctx, ob.route), body, context)
    except NotVerified:
        return
    except ContractViolation as exc:
        if shape or exc.requirement != server.WIRE_002:
            raise


def disabled_turn(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    """On a route whose capabilities said enabled false an on_demand turn delivers no knowledge;
    one whose capabilities said enabled true is not disabled in its delivery (CAP-006)."""
    context = _on_demand_context(ob, body)
    if context is None:
        return
    delivery = ctx.cfg.names.delivery(context)
    status = delivery.get("status") if isinstance(delivery, dict) else None
    caps = ctx.traffic.capabilities.get(ob.route)
    if caps is not None and caps.enabled is True and status == "disabled":
        server.CAP_006.fail(
            f"capabilities of route {ob.route!r} said enabled true, the on_demand turn's delivery says disabled"
        )
    if not _disabled(ctx, ob.route):
        return
    knowledge = context.get(ctx.cfg.names.turn_context["knowledge"])
    expect(
        not knowledge,
        server.CAP_006,
        f"capabilities of route {ob.route!r} said enabled false, yet an on_demand turn delivered "
        f"{len(knowledge) if isinstance(knowledge, list) else 'some'} knowledge bodies",
    )


# -------------------------------------------------------------------- search
def _issue(ctx: Context, ob: Observed, run_id: str, hints: list[Any]) -> None:
    """Register the references ``hints`` carry; one already issued to another run shows that
    search does not bind the current run (SRCH-002)."""
    for hint in hints:
        ref = hint.get("ref") if isinstance(hint, dict) else None
        if not isinstance(ref, str):
            continue
        key = digest(ref)
        before = ctx.traffic.refs.get(key)
        strings = frozenset(digest(s.strip()) for s in strings_of(hint))
        origin = "turn" if ob.operation == "turn" else "search"
        ctx.traffic.refs.put(key, Issued(ob.caller, run_id, ob.seen.sent, ob.seen.answered, strings, origin))
        if before is not None and before.run_id != run_id:
            server.SRCH_002.fail(
                f"the same reference was issued in run {before.run_id!r} and again in run {run_id!r}: "
                "search answers are not bound to the current run"
            )
        if before is None:
            server.SRCH_002.held()


def foreign_run(ctx: Context, ob: Observed) -> tuple[Run | None, str | None]:
    """The run a request names, and why it is not the caller's (another route, or an identity
    known to differ), or None when it is or cannot be told."""
    run_id = ob.field("run_id")
    run = ctx.traffic.runs.get(run_id) if isinstance(run_id, str) else None
    if run is None:
        return None, None
    if run.caller.route != ob.route:
        return run, f"route {run.caller.route!r}"
    mine, theirs = ob.caller.identity, run.caller.identity
    differs = mine.differs(theirs) if mine is not None and theirs is not None else None
    return run, (f"another {differs}" if differs else None)


def run_bound(ctx: Context, ob: Observed) -> None:
    """A run of another session, client or route is run_not_found (AUTH-003): never served."""
    run, why = foreign_run(ctx, ob)
    if run is None or why is None or ob.status == 0:
        return
    expect(
        ob.status != 200,
        server.AUTH_003,
        f"{ob.operation} under run {run.run_id!r}, started by {why}, was served instead of run_not_found",
    )


def search_issued(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    if body is None:
        return
    run_id = ob.field("run_id")
    hints = body.get("hints")
    if isinstance(run_id, str) and isinstance(hints, list):
        _issue(ctx, ob, run_id, hints)


def disabled_search(ctx: Context, ob: Observed, body: dict[str, Any] | None) -> None:
    """After capabilities said enabled false, search says disabled, with no hints (SRCH-009); a
    search that says disabled where capabilities said enabled true breaks CAP-006."""
    caps = ctx.traffic.capabilities.get(ob.route)
    if body is not None and body.get("status") == "disabled" and caps is not None and caps.enabled is True:
        server.CAP_006.fail(f"capabilities of route {ob.route!r} said enabled true, search says disabled")
    if body is None or not _disabled(ctx, ob.route):
        return
    expect(
        body.get("status") == "disabled" and body.get("hints") == [],
        server.SRCH_009,
        f"capabilities of route {ob.route!r} said enabled false, yet search answered status "
        f"{body.get('status')!r} with {len(body.get('hints') or [])} hints",
    )


def availability(ctx: Context, ob: Observed, status: object, hints: object) -> None:
    """A search and an on_demand turn on one route, close in time, agree that knowledge is
    unavailable: one never says ok with no hints while the other says unavailable (SRCH-010)."""
    if not isinstance(status, str):  # an answer that says nothing of availability: what came before no longer counts
        ctx.traffic.availability.put((ob.route, ob.operation), ("", False, ob.seen.answered))
        return
    empty = hints == []
    other = "turn" if ob.operation == "search" else "search"
    before = ctx.traffic.availability.get((ob.route, other))
    ctx.traffic.availability.put((ob.route, ob.operation), (status, empty, ob.seen.answered))
    if before is None or not before[0] or ob.seen.sent - before[2] > AVAILABILITY_WINDOW:
        return
    pair = {status: empty, before[0]: before[1]}
    said = f"on route {ob.route!r} the {other} said {before[0]!r} and this {ob.operation} says {status!r}"
    if "unavailable" in pair and pair.get("ok") is True:
        server.SRCH_010.fail(f"{said}{' with no hints' if empty else ''}: unavailability reported as an empty result")
    if ob.operation == "search" and status == "ok" and before[0] == "disabled":  # not the other way: one may disable
        server.SRCH_009.fail(f"{said}: a disabled workspace searched as ok")
    if status == before[0] and status in ("unavailable", "disabled"):
        (server.SRCH_010 if status == "unavailable" else server.SRCH_009).held()


# ---------------------------------------------------------------------- read
def _binding(ctx: Context, ob: Observed, issued: Issued) -> tuple[Rule, str] | None:
    """The binding a read breaks by presenting ``issued`` here: route, identity, or run."""
    if issued.caller.route != ob.route:
        return server.REF_005, f"issued on route {issued.caller.route!r}, presented on {ob.route!r}"
    mine, theirs = ob.caller.identity, issued.caller.identity
    if mine is not None and theirs is not None:
        differs = mine.differs(theirs)
        if differs is not None:
            return DIMENSIONS[differs], f"issued to {theirs.name}, presented by {mine.name} (another {differs})"
    run_id = ob.field("run_id")
    if isinstance(run_id, str) and run_id != issued.run_id:
        return server.REF_006, f"issued in run {issued.run_id!r}, presented under run {run_id!r}"
    return None


def read_reference(ctx: Context, ob: Observed) -> None:
    """A read's reference against when and to whom it was issued: accepted only within 300 s
    (REF-001) and refused as expired only after (REF-002), accepted only in its binding (REF-003,
    REF-004, REF-005, REF-006, REF-009); a refusal with a reason carries a reference code (REF-011)."""
    ref = ob.field("ref")
    issued = ctx.traffic.refs.get(digest(ref)) if isinstance(ref, str) else None
    if ob.status == 0 or (ob.status != 200 and not 400 <= ob.status < 500):
        return
    body = ob.answer() if ob.status != 200 else None
    code = body.get("error") if isinstance(body, dict) else None
    if ob.status in unsupported(ctx.cfg) and code in (None, "not_found"):
        return  # an old endpoint's status: the endpoint is missing (READ-001), not the reference refused
    if issued is None:
        if C.is_reference_error_code(code) and ob.readable:
            checks.reference_error(
                ob.response(), ctx.cfg, REFERENCE_KINDS, requirement=server.REF_011, text=ctx.traffic.document_text()
            )
        return
    low, high = ob.seen.sent - issued.answered, ob.seen.answered - issued.sent
    expired = low > ctx.ttl + ctx.tolerance
    binding = _binding(ctx, ob, issued)
    if ob.status == 200:
        expect(
            not expired, server.REF_001, f"a reference at least {low:.1f} s old (issued in exchange before) was read"
        )
        if binding is not None:
            binding[0].fail(f"a reference {binding[1]} was accepted")
        if high < ctx.ttl:
            server.REF_002.held()
        return
    kinds = set()
    if expired:
        server.REF_001.held()
        kinds.add("reference_expired")
    if binding is not None:
        binding[0].held()
        kinds.add("reference_mismatch")
    if code == ctx.cfg.code("reference_expired") and not expired and binding is None:
        expect(
            high >= ctx.ttl - ctx.tolerance,
            server.REF_002,
            f"a reference at most {high:.1f} s old was refused as expired",
        )
    if _disabled(ctx, ob.route) or not ob.readable:
        return
    if C.is_reference_error_code(code):
        rule = server.REF_001 if expired else binding[0] if binding is not None else server.REF_011
        checks.reference_error(
            ob.response(), ctx.cfg, kinds or REFERENCE_KINDS, requirement=rule, text=ctx.traffic.document_text()
        )
    elif expired or (binding is not None and code != ctx.cfg.code("run_not_found")):
        why = f"{low:.1f} s old" if expired else binding[1] if binding is not None else ""
        server.REF_011.fail(f"a reference ({why}) was refused with code {code!r}, not knowledge_reference_* / *changed")


def disabled_read(ctx: Context, ob: Observed) -> None:
    """After capabilities said enabled false, read serves no page (CAP-006)."""
    if not _disabled(ctx, ob.route) or ob.status == 0:
        return
    expect(
        ob.status != 200,
        server.CAP_006,
        f"capabilities of route {ob.route!r} said enabled false, yet read served a page",
    )


def read_chain(ctx: Context, ob: Observed, page: dict[str, Any] | None) -> None:
    """A page's place in its chain: one revision per reference and chain (REF-008), the budget
    (READ-010, READ-011, READ-020), honest flags (READ-009), totals (READ-014) and pages that add up
    to the revision (READ-015, READ-016)."""
    if page is None or not isinstance(page.get("content"), str):
        return
    traffic = ctx.traffic
    ref, cursor = ob.field("ref"), ob.field("cursor")
    key = digest(str(ref))
    content = str(page["content"])
    revision = repr(page.get("revision"))
    total = page.get("total_content_bytes") if isinstance(page.get("total_content_bytes"), int) else None
    if cursor:
        at = traffic.cursors.get(digest(str(cursor)))
        if at is None:
            at = ChainAt(traffic.next_chain(), key, False, 0, 0, 0, revision, total, False)
    else:
        at = ChainAt(traffic.next_chain(), key, True, 0, 0, 0, revision, total, False)
        first = traffic.revisions.get(key)
        if first is not None:
            expect(
                first == revision,
                server.REF_008,
                f"the reference read as revision {first} before and as {revision} now: it was accepted after "
                "its revision changed",
            )
        else:
            traffic.revisions.put(key, revision)
    expect(
        at.revision == revision,
        server.REF_008,
        f"the chain's pages report revision {at.revision} and then {revision}: a cursor was accepted after "
        "its revision changed",
    )
    if at.total is not None and total is not None:
        expect(
            at.total == total, server.READ_014, f"total_content_bytes changed within a chain: {at.total} then {total}"
        )
    edge = bool(content) and (content[0] == "\ufffd" or content[-1] == "\ufffd")
    now = ChainAt(
        at.chain,
        key,
        at.from_start,
        at.consumed + C.utf8_size(content),
        at.chars + len(content),
        at.pages + 1,
        revision,
        total if total is not None else at.total,
        at.split_edge or (edge and page.get("next_cursor") is not None) or (edge and at.pages > 0),
        max(at.largest, len(ob.seen.response.data)),
    )
    if content and ord(content[-1]) > 0x7F and page.get("next_cursor") is not None:
        server.READ_016.held()  # a cut next to a multibyte character, and no character split (checks.page)
    budget = C.READ_CHAIN_MAX_BYTES
    if now.from_start:
        expect(
            now.consumed <= budget,
            server.READ_010,
            f"read chain delivered {now.consumed} content bytes, more than {budget}",
        )
    next_cursor = page.get("next_cursor")
    if isinstance(next_cursor, str):
        traffic.cursors.put(digest(next_cursor), now)
        return
    whole = now.from_start and now.pages == 1 and page.get("budget_exhausted") is not True
    traffic.page_text(content, whole and not page.get("truncated"))
    _whole_hint(ctx, key, content, whole and not page.get("truncated"))
    if now.from_start:
        _filled(ob, now)
        _chain_end(now, page, ctx.cfg.strict_codes)


def _filled(ob: Observed, chain: ChainAt) -> None:
    """A chain of default pages, followed from its first page to its end, that has three pages or
    more has one over half of 16384 bytes: "Read complete JSON defaults to 16384 bytes" (a Core
    whose default is 4096 bounds every default page by the wrong number; the suite's
    test_the_default_page_is_the_page_of_16384_bytes). A Core may cut one page short (next to a
    character it must not split), never every one."""
    if ob.field("max_bytes") is not None or chain.pages < 3:
        return
    half = C.READ_DEFAULT_MAX_BYTES // 2
    expect(
        chain.largest > half,
        server.READ_004,
        f"a chain of {chain.pages} default pages never had a page over {half} bytes (its largest "
        f"{chain.largest}): the default is not 16384",
    )


def budget_offer(ctx: Context, ob: Observed, page: dict[str, Any] | None) -> None:
    """A chain past its budget offers no next_cursor: it stops budget_exhausted (READ-011)."""
    cursor = ob.field("cursor")
    if page is None or not isinstance(page.get("content"), str) or page.get("next_cursor") is None:
        return
    at = ctx.traffic.cursors.get(digest(str(cursor))) if cursor else None
    consumed = (at.consumed if at is not None else 0) + C.utf8_size(str(page["content"]))
    if cursor and (at is None or not at.from_start):
        return
    expect(
        consumed <= C.READ_CHAIN_MAX_BYTES,
        server.READ_011,
        f"the chain delivered {consumed} content bytes, past {C.READ_CHAIN_MAX_BYTES}, and still offers a "
        "next_cursor instead of stopping with budget_exhausted",
    )


def _whole_hint(ctx: Context, key: str, content: str, whole: bool) -> None:
    """A hint of the reference carried the whole document its one-page read gave (SRCH-006)."""
    issued = ctx.traffic.refs.get(key)
    if not whole or issued is None or not issued.strings or len(content.strip()) < 24:
        return
    expect(
        digest(content.strip()) not in issued.strings,
        server.TURN_007 if issued.origin == "turn" else server.SRCH_006,
        f"a hint {'of an on_demand turn ' if issued.origin == 'turn' else ''}carried the whole document its "
        f"reference reads as ({len(content)} characters)",
    )


def _next_character_fits(chain: ChainAt, page: dict[str, Any]) -> None:
    """Strict: a chain stops budget_exhausted only where the revision's next character would pass
    the budget (this project's edge, the suite's test_a_chain_reads_up_to_its_budget), so a
    revision of exactly 131072 bytes reads completely. The wire shows the bytes left
    (total_content_bytes) but not the next character's size: at most 4 bytes and at most what is
    left, so the chain is judged only where that much still fits."""
    advertised = page.get("read_chain_max_bytes")
    budget = C.READ_CHAIN_MAX_BYTES
    if isinstance(advertised, int) and not isinstance(advertised, bool) and 0 < advertised < budget:
        budget = advertised
    left = chain.total - chain.consumed if chain.total is not None else 0
    expect(
        left <= 0 or budget - chain.consumed < min(left, 4),
        server.READ_020,
        f"strict: the chain stopped budget_exhausted after {chain.consumed} content bytes of {chain.total}, "
        f"though {budget - chain.consumed} byte(s) of its {budget}-byte budget still hold the next character",
    )


def _chain_end(chain: ChainAt, page: dict[str, Any], strict: bool) -> None:
    """The last page of a chain observe followed from its first page (strict: this project's edge,
    no empty page one request after the budget ran out, CHOICES.md)."""
    budget = C.READ_CHAIN_MAX_BYTES
    exhausted = page.get("budget_exhausted") is True
    truncated = page.get("truncated")
    total = chain.total
    if exhausted:
        expect(
            chain.consumed > budget - C.READ_MAX_MAX_BYTES,
            server.READ_020,
            f"the chain stopped budget_exhausted after only {chain.consumed} content bytes "
            f"(more than {budget - C.READ_MAX_MAX_BYTES} were expected before its {budget}-byte budget runs out)",
        )
        server.READ_011.held()
        if strict:
            expect(
                page.get("content") != "" or chain.pages == 1,
                server.READ_020,
                "strict: the chain offered one more cursor after the page that exhausted its budget, and ended "
                "with an empty page (CHOICES.md)",
            )
            _next_character_fits(chain, page)
        if total is not None:
            expect(
                chain.consumed < total,
                server.READ_009,
                f"the chain delivered all {total} bytes of the revision, yet its last page says budget_exhausted "
                f"and truncated {truncated!r}",
            )
        return
    if truncated is True:
        server.READ_011.fail(
            f"the chain stopped after {chain.consumed} content bytes with truncated true and no budget_exhausted: "
            "stopping early needs budget_exhausted true"
        )
    if total is None:
        return
    if chain.consumed == total:
        for rule in (server.READ_009, server.READ_014, server.READ_015):
            rule.held()
        return
    if chain.consumed < total and chain.consumed > budget - C.READ_MAX_MAX_BYTES:
        server.READ_011.fail(
            f"the chain ended after {chain.consumed} of {total} content bytes, at the budget, with truncated "
            f"{truncated!r} and no budget_exhausted"
        )
    if total == chain.chars:
        server.READ_014.fail(
            f"total_content_bytes is {total}, the characters of the revision; its bytes are {chain.consumed}"
        )
    if chain.split_edge:
        server.READ_016.fail(
            f"the chain's pages carry {chain.consumed} content bytes, the revision has {total}, and a page begins "
            "or ends with U+FFFD: a character was split between pages"
        )
    server.READ_015.fail(
        f"the chain's {chain.pages} pages carry {chain.consumed} content bytes and end complete, but the revision "
        f"has total_content_bytes {total}: the pages overlap or skip characters"
    )
