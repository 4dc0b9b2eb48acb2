"""The client's rules its requests show: what it sends, and in which order, given what the Core
answered it before. Only what a request shows is judged; what a client does with an answer
(how it describes a chain, whether it returns an error to its caller) never reaches the wire."""

from __future__ import annotations

from conformance.clients import rules as clients
from conformance.common import contract as C
from conformance.common.rules import expect
from conformance.observe.context import Context
from conformance.observe.observed import Observed
from conformance.observe.seen import digest
from conformance.observe.sequence_rules import foreign_run, turn_key
from conformance.observe.traffic import Turn
from conformance.server import checks


def wire_names(ob: Observed) -> None:
    """Search and read go out with run_id (and max_bytes), never runId or maxBytes (READ-018)."""
    request = ob.request
    if ob.operation not in ("search", "read") or not isinstance(request, dict):
        return
    named = "run_id" in request and not ({"runId", "maxBytes"} & set(request))
    expect(  # the request described (scrubbed: some 6 % of the judge's time) only when it broke the rule
        named,
        clients.READ_018,
        "" if named else f"{ob.operation} went out without the wire names run_id/max_bytes: {checks.describe(request)}",
    )


def pinned(ob: Observed, earlier: Turn | None) -> None:
    """A turn identity sent again carries the payload it first carried: the delivery choice stays
    pinned across retries of one idempotent turn (TURN-005)."""
    if earlier is None:
        return
    payload = digest(C.canonical(ob.request))
    expect(
        payload == earlier.payload,
        clients.TURN_005,
        f"the turn identity first sent in exchange #{earlier.number} (knowledge_delivery "
        f"{earlier.delivery!r}) went out again with another payload (knowledge_delivery "
        f"{ob.field('knowledge_delivery')!r})",
    )


def negotiated(ctx: Context, ob: Observed, earlier: Turn | None) -> None:
    """Where the host says its on_demand turns are negotiated, capabilities come first and said
    supported (NEG-004). Without that, an on_demand turn may be the host's explicit option, which
    needs no capabilities (TURN-002): not judged. A turn identity sent again is judged by its first
    attempt: a retry keeps the delivery that attempt negotiated (TURN-005), whatever capabilities
    answered since."""
    if not ctx.negotiating or earlier is not None or ob.field("knowledge_delivery") != "on_demand":
        return
    asked = ctx.traffic.asked.get((ob.seen.credential, ob.route))
    if asked is None:
        clients.NEG_004.fail(
            f"an on_demand turn on route {ob.route!r} went out before this connection asked capabilities"
        )
    expect(
        asked.supported and asked.enabled is not None,
        clients.NEG_004,
        f"an on_demand turn went out after capabilities answered HTTP {asked.status} (not supported)",
    )


def run_of_its_own(ctx: Context, ob: Observed) -> None:
    """Search and read name a run the caller's own turn started, never another identity's or
    route's (HOST-005: model arguments cannot choose the run)."""
    if ob.operation not in ("search", "read"):
        return
    run, why = foreign_run(ctx, ob)
    if run is None:
        return
    expect(why is None, clients.HOST_005, f"{ob.operation} named run {run.run_id!r}, started by {why}")


def no_transfer(ctx: Context, ob: Observed) -> None:
    """A reference is presented only by the account it was issued to (REF-010); judged where both
    accounts are known."""
    ref = ob.field("ref")
    issued = ctx.traffic.refs.get(digest(ref)) if isinstance(ref, str) and ob.operation == "read" else None
    mine = ob.caller.identity
    theirs = issued.caller.identity if issued is not None else None
    if mine is None or theirs is None or not (mine.account and theirs.account):
        return
    expect(
        mine.account == theirs.account,
        clients.REF_010,
        f"a reference issued to account of {theirs.name} was presented under {mine.name}, another account",
    )


def after_reference_error(ctx: Context, ob: Observed) -> None:
    """After a reference error the client searches again; it never sends the refused read again,
    nor replays a turn (REF-013). Judged on the caller's next request on that route."""
    where = (ob.seen.credential, ob.route)
    refused = ctx.traffic.reference_errors.get(where)
    if refused is not None and ob.operation in ("search", "read", "turn"):
        ctx.traffic.reference_errors.put(where, "")
        if refused:
            replay = ob.operation == "read" and digest(str(ob.field("ref"))) == refused
            replayed_turn = ob.operation == "turn" and _known_turn(ctx, ob)
            expect(
                not (replay or replayed_turn),
                clients.REF_013,
                f"after a reference error the client sent {'the refused read' if replay else 'a turn'} again "
                "instead of searching",
            )
            if ob.operation == "search":
                clients.REF_013.held()


def _known_turn(ctx: Context, ob: Observed) -> bool:
    key = turn_key(ob)
    return key is not None and key in ctx.traffic.turns


def remember_reference_error(ctx: Context, ob: Observed) -> None:
    """A read refused with a reference code: the caller's next request must not replay it."""
    if ob.operation != "read" or not 400 <= ob.status < 500:
        return
    body = ob.answer()
    code = body.get("error") if isinstance(body, dict) else None
    if C.is_reference_error_code(code):
        ctx.traffic.reference_errors.put((ob.seen.credential, ob.route), digest(str(ob.field("ref"))))
