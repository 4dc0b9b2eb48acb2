"""Miniatures of turn delivery: the on_demand context built wrong, or no pinning."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from simulator.clock import Clock
from simulator.config import SimConfig
from simulator.core import Caller, Core
from simulator.errors import ApiError
from simulator.miniatures._asgi import Miniature
from simulator.sizing import dumps
from simulator.store import Run, Store


class TurnIgnoresDelivery(Core):
    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        return super()._turn_context(caller, run, user_input, "inline", mode)


class TurnNoPinning(Core):
    """Nothing is ever replayed: every turn commits a new run, whatever was committed under its identity."""

    def _replay(self, key: str, fingerprint: str) -> bytes | None:
        return None


class LostTurnRecommitted(Core):
    """After a lost response, the retry under that identity is not matched with what was
    committed: it commits a new run (whatever its payload), and later replays return that
    new run consistently."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self._forgotten: set[str] = set()
        self._last_key = ""

    def start_turn(self, caller: Caller, body: dict[str, Any]) -> tuple[int, bytes]:
        try:
            return super().start_turn(caller, body)
        except ApiError as err:
            if err.code == "response_lost":
                self._forgotten.add(self._last_key)
            raise

    def _replay(self, key: str, fingerprint: str) -> bytes | None:
        self._last_key = key
        if key in self._forgotten:
            self._forgotten.discard(key)
            return None  # committed again, replacing the turn stored under this identity
        return super()._replay(key, fingerprint)


class TurnDeliveryBadSchema(Core):
    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        context = super()._turn_context(caller, run, user_input, delivery, mode)
        if "knowledge_delivery" in context:
            context["knowledge_delivery"]["mode"] = "ondemand"
        return context


class TurnUnboundedHints(Core):
    """A turn's hint search asks for five and repeats what it found up to five (still byte-fitted)."""

    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        if endpoint:
            return super()._search_hints(caller, run, query, limit, mode, endpoint=endpoint)
        status, hints = super()._search_hints(caller, run, query, 5, mode, endpoint=endpoint)
        return status, (hints * 5)[:5]


class TurnBodiesOnDemand(Core):
    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        context = super()._turn_context(caller, run, user_input, delivery, mode)
        if delivery == "on_demand":
            context["knowledge"] = self._inline_bodies(caller, run, user_input)[0]
        return context


class DisabledOnDemandFallsBackInline(Core):
    """A disabled workspace cannot search, so an on_demand turn falls back to the inline bodies a
    legacy Core would send (a plausible "better something than nothing" fallback)."""

    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        if delivery == "on_demand" and mode == "disabled":
            return super()._turn_context(caller, run, user_input, "inline", "normal")
        return super()._turn_context(caller, run, user_input, delivery, mode)


class TurnMissingRefsArray(Core):
    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        context = super()._turn_context(caller, run, user_input, delivery, mode)
        if delivery == "on_demand":
            del context["knowledge_refs"]
        return context


class TurnBadSchemaVersion(Core):
    def start_turn(self, caller: Caller, body: dict[str, Any]) -> tuple[int, bytes]:
        status, raw = super().start_turn(caller, body)
        turn = json.loads(raw)
        turn["schema_version"] = "bailing.agent-turn.v0"
        return status, dumps(turn)


class TurnHintsIgnoreScope(Core):
    """The turn's on_demand hint search runs over every base of the workspace, whatever the
    account's scope (the search endpoint stays scoped)."""

    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        if endpoint or mode in ("disabled", "unavailable"):
            return super()._search_hints(caller, run, query, limit, mode, endpoint=endpoint)
        found = self.store.search(caller.route, query, None, limit)
        return ("partial" if mode == "partial" else "ok"), [self._hint(caller, run, r) for r in found]


class TurnUnavailableAsOk(Core):
    """An on_demand turn while knowledge is unavailable says status ok with no hints (search still says unavailable)."""

    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        status, hints = super()._search_hints(caller, run, query, limit, mode, endpoint=endpoint)
        return ("ok" if status == "unavailable" and not endpoint else status), hints


class TurnFingerprintIgnoresDelivery(Core):
    """The turn fingerprint leaves knowledge_delivery out: the same identity with another delivery
    replays the committed run (with its pinned delivery) instead of a 409 turn_conflict."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self._loose: dict[str, str] = {}
        self._body: dict[str, Any] = {}

    def start_turn(self, caller: Caller, body: dict[str, Any]) -> tuple[int, bytes]:
        self._body = body
        return super().start_turn(caller, body)

    def _replay(self, key: str, fingerprint: str) -> bytes | None:
        rest = {k: v for k, v in self._body.items() if k != "knowledge_delivery"}
        loose = hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()
        existing = self.store.turn(key)
        if existing is not None and self._loose.get(key) == loose:
            return existing[1].encode("utf-8")
        self._loose.setdefault(key, loose)
        return super()._replay(key, fingerprint)


class TurnKeyWithoutSession(Core):
    """The idempotency key leaves the Agent Session out: another session's turn with the same
    conversation, turn and message ids on the route gets the first session's committed run."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self._first: dict[str, str] = {}

    def _replay(self, key: str, fingerprint: str) -> bytes | None:
        rest = json.dumps(json.loads(key)[1:])  # the key without its first member, the session
        return super()._replay(self._first.setdefault(rest, key), fingerprint)


MINIATURES: dict[str, Miniature] = {
    "disabled_on_demand_falls_back_inline": DisabledOnDemandFallsBackInline,
    "turn_ignores_delivery": TurnIgnoresDelivery,
    "turn_no_pinning": TurnNoPinning,
    "lost_turn_recommitted": LostTurnRecommitted,
    "turn_delivery_bad_schema": TurnDeliveryBadSchema,
    "turn_unbounded_hints": TurnUnboundedHints,
    "turn_bodies_on_demand": TurnBodiesOnDemand,
    "turn_missing_refs_array": TurnMissingRefsArray,
    "turn_bad_schema_version": TurnBadSchemaVersion,
    "turn_hints_ignore_scope": TurnHintsIgnoreScope,
    "turn_unavailable_as_ok": TurnUnavailableAsOk,
    "turn_fingerprint_ignores_delivery": TurnFingerprintIgnoresDelivery,
    "turn_key_without_session": TurnKeyWithoutSession,
}
