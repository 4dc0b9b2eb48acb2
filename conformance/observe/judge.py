"""The judge: each observed exchange, in order, through the rules of both sides.

Every rule group runs on its own, in its own ledger (``conformance.common.rules.recording``):
what its checks held is counted, the violation it raised is kept with its exchange, and a group
that breaks (the judge's own fault, never the traffic's) is counted as a judge error and the
others still run. Nothing here ever raises into its caller, so a proxy that calls it from its
worker keeps forwarding whatever happens."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.common.outcomes import ContractViolation, NotVerified
from conformance.common.rules import Ledger, recording
from conformance.common.secrets import clip
from conformance.common.transport import BODY_KEEP, REDACTED, Exchange
from conformance.common.untrusted import shown
from conformance.observe import client_rules, mcp_calls, sequence_rules, server_rules
from conformance.observe.context import EXPIRY_MARGIN, Context
from conformance.observe.credentials import Credentials
from conformance.observe.observed import Observed
from conformance.observe.seen import Body, Seen, digest
from conformance.observe.tally import Finding, Tally
from conformance.observe.traffic import Caller, Turn
from conformance.server import rules as server

TOKEN_SHAPE = re.compile(r"bha_[A-Za-z0-9_\-]{8,}")
"""The vendor's Agent Session token format: masked in evidence even past the scrubber's bound."""


def _text(body: Body) -> str:
    """A body for evidence: scrubbed, cut, with its size when cut."""
    if body.broken is not None:
        return f"(not decodable: {body.broken})"
    text = clip(body.data[: BODY_KEEP * 4].decode("utf-8", "replace"), BODY_KEEP)
    if body.size > len(text.encode("utf-8")) or not body.complete:
        text += f"… ({body.size if body.size >= 0 else 'unknown'} bytes in all)"
    return TOKEN_SHAPE.sub("***", text)


class Judge:
    def __init__(
        self,
        cfg: TargetConfig,
        credentials: Credentials,
        *,
        base_url: str,
        negotiating: bool = False,
        margin: float = EXPIRY_MARGIN,
        client_rules: bool = True,
    ) -> None:
        self.ctx = Context(cfg, credentials, negotiating=negotiating, margin=margin)
        self.client_rules = client_rules  # false: the traffic's client is the suite's own driver (a transcript)
        self.tally = Tally()
        self.base_url = base_url
        self._held: set[str] = set()  # the rules this exchange's checks held: each counts once an exchange
        self._violated: set[str] = set()  # the rules this exchange broke (not also counted as held)

    # ---------------------------------------------------------------- plumbing
    def judge(self, seen: Seen) -> None:
        """Judge one exchange; never raises."""
        try:
            self._judge(seen)
        except Exception as exc:  # the judge's own fault: counted and reported, never raised into forwarding
            self.tally.broke(f"exchange #{seen.number}: {type(exc).__name__}: {shown(exc, 300)}")

    def _caller(self, credential: str | None, route: str) -> tuple[Caller, str | None]:
        identity = self.ctx.credentials.of(credential)
        return Caller(credential, identity, route), identity.name if identity is not None else None

    def _client(self, ob: Observed, step: Callable[[], Any]) -> None:
        """A client rule's group, when the client's rules are judged."""
        if self.client_rules:
            self._apply(ob, step)

    def _apply(self, ob: Observed, step: Callable[[], Any]) -> Any:
        """Run one rule group in its own ledger: its held rules counted, its violation kept."""
        with recording(Ledger()) as ledger:
            try:
                return step()
            except ContractViolation as exc:
                self._violated.add(exc.requirement)
                self.tally.violate(Finding(exc.requirement, shown(str(exc), 2000), ob.seen.number, self._evidence(ob)))
                return None
            except NotVerified:
                return None
            except Exception as exc:
                self.tally.broke(
                    f"exchange #{ob.seen.number} ({ob.operation}): {type(exc).__name__}: {shown(exc, 300)}"
                )
                return None
            finally:
                self._held |= ledger.passed

    def _evidence(self, ob: Observed) -> dict[str, Any]:
        seen = ob.seen
        auth = self.ctx.cfg.wire["auth"]
        exchange = Exchange(
            method=seen.method,
            path=TOKEN_SHAPE.sub("***", clip(seen.path, 2000)),  # never the query: no request of the contract has one
            request_body=_text(seen.request),
            status=seen.status,
            response_body=_text(seen.response),
            headers={"authorization": REDACTED} if seen.credential else {},
            identity=ob.label,
            operation=ob.operation,
        )
        return exchange.evidence(
            self.base_url, {"header": str(auth["header"]), "scheme": str(auth["scheme"])}, judged=True
        )

    # ------------------------------------------------------------------- rules
    def _judge(self, seen: Seen) -> None:
        self.tally.seen()
        self.ctx.credentials.flush()
        self.ctx.credentials.note(seen.credential)
        seen = seen.decoded()
        ob = Observed.of(seen, self.ctx.cfg.wire["paths"], self._caller)
        if ob is None:
            if not self._mcp(seen):
                self.tally.skipped("not a request of the contract (another path or method)")
            return
        self.tally.was_judged()
        if seen.status == 0:
            self.tally.skipped("the upstream gave no answer: only the client's request judged")
        self._held, self._violated = set(), set()
        try:
            {"capabilities": self._capabilities, "turn": self._turn, "search": self._search, "read": self._read}[
                ob.operation
            ](ob)
        finally:
            self.tally.hold(dict.fromkeys(self._held - self._violated, 1))

    def _mcp(self, seen: Seen) -> bool:
        """An MCP POST's tool calls: each search or read result judged by the relayed rules (false
        when the exchange made no tool call)."""
        found = mcp_calls.answered(seen)
        if found is None:
            return False
        self.tally.was_judged()
        caller, label = self._caller(seen.credential, seen.path)
        self._held, self._violated = set(), set()
        try:
            for call, result in found:
                ob = Observed(seen, f"MCP {call.tool}", seen.path, caller, label)
                self._apply(ob, lambda: mcp_calls.judge(self.ctx, seen, call, result))  # noqa: B023 (called at once)
        finally:
            self.tally.hold(dict.fromkeys(self._held - self._violated, 1))
        return True

    def _answered(self, ob: Observed) -> None:
        if ob.status:
            self._apply(ob, lambda: server_rules.cache_control(ob))
            self._apply(ob, lambda: server_rules.error_answer(ob, self.ctx.cfg))

    def _capabilities(self, ob: Observed) -> None:
        ctx = self.ctx
        self._answered(ob)
        body = self._apply(ob, lambda: server_rules.capabilities(ob, ctx.cfg)) if ob.status else None
        self._apply(ob, lambda: sequence_rules.presence(ctx, ob))
        sequence_rules.capabilities_seen(ctx, ob, body)

    def _turn(self, ob: Observed) -> None:
        ctx = self.ctx
        self._answered(ob)
        self._client(ob, lambda: client_rules.after_reference_error(ctx, ob))
        key = sequence_rules.turn_key(ob)
        earlier = ctx.traffic.turns.get(key) if key is not None else None
        self._client(ob, lambda: client_rules.pinned(ob, earlier))
        self._client(ob, lambda: client_rules.negotiated(ctx, ob, earlier))
        answer = ob.answer() if ob.status == 200 else None
        body = answer if isinstance(answer, dict) else None
        self._apply(ob, lambda: sequence_rules.turn_pinned(ctx, ob, body, earlier))
        self._apply(ob, lambda: sequence_rules.disabled_turn(ctx, ob, body))
        self._apply(ob, lambda: sequence_rules.empty_knowledge(ctx, ob, body))
        shape = server.TURN_008 not in self._violated
        self._apply(ob, lambda: sequence_rules.bounded_delivery(ctx, ob, body, shape=shape))
        if body is not None and ob.field("knowledge_delivery") == "on_demand":
            delivery = ctx.cfg.names.delivery(body.get("context"))
            status = delivery.get("status") if isinstance(delivery, dict) else None
            hints = delivery.get("hints") if isinstance(delivery, dict) else None
            self._apply(ob, lambda: sequence_rules.availability(ctx, ob, status, hints))
        self._apply(ob, lambda: sequence_rules.run_started(ctx, ob, body))
        run_id = body.get("run_id") if body is not None else None
        if key is not None and (earlier is None or (earlier.run_id is None and isinstance(run_id, str))):
            ctx.traffic.turns.put(
                key,
                Turn(
                    digest(C.canonical(ob.request)),
                    ob.field("knowledge_delivery"),
                    run_id if isinstance(run_id, str) else None,
                    ob.seen.number,
                ),
            )

    def _search(self, ob: Observed) -> None:
        ctx = self.ctx
        self._answered(ob)
        self._client(ob, lambda: client_rules.wire_names(ob))
        self._client(ob, lambda: client_rules.run_of_its_own(ctx, ob))
        self._client(ob, lambda: client_rules.after_reference_error(ctx, ob))
        body = self._apply(ob, lambda: server_rules.search(ob)) if ob.status else None
        self._apply(ob, lambda: sequence_rules.presence(ctx, ob))
        self._apply(ob, lambda: sequence_rules.run_bound(ctx, ob))
        self._apply(ob, lambda: sequence_rules.disabled_search(ctx, ob, body))
        if body is not None:
            status, hints = body.get("status"), body.get("hints")
            self._apply(ob, lambda: sequence_rules.availability(ctx, ob, status, hints))
        self._apply(ob, lambda: sequence_rules.search_issued(ctx, ob, body))

    def _read(self, ob: Observed) -> None:
        ctx = self.ctx
        self._answered(ob)
        self._apply(ob, lambda: server_rules.oversize_tokens(ob))
        self._apply(ob, lambda: server_rules.read_refusal(ob, ctx.cfg))
        self._client(ob, lambda: client_rules.wire_names(ob))
        self._client(ob, lambda: client_rules.run_of_its_own(ctx, ob))
        self._client(ob, lambda: client_rules.no_transfer(ctx, ob))
        self._client(ob, lambda: client_rules.after_reference_error(ctx, ob))
        page = self._apply(ob, lambda: server_rules.page(ob, ctx.cfg)) if ob.status else None
        self._apply(ob, lambda: sequence_rules.presence(ctx, ob))
        self._apply(ob, lambda: sequence_rules.run_bound(ctx, ob))
        self._apply(ob, lambda: sequence_rules.disabled_read(ctx, ob))
        self._apply(ob, lambda: sequence_rules.read_reference(ctx, ob))
        self._apply(ob, lambda: sequence_rules.budget_offer(ctx, ob, page))
        self._apply(ob, lambda: sequence_rules.read_chain(ctx, ob, page))
        client_rules.remember_reference_error(ctx, ob)
