"""Miniatures of turn delivery: the on_demand context built wrong, or no pinning."""

from __future__ import annotations

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


MINIATURES: dict[str, Miniature] = {
    "turn_ignores_delivery": TurnIgnoresDelivery,
    "turn_no_pinning": TurnNoPinning,
    "lost_turn_recommitted": LostTurnRecommitted,
    "turn_delivery_bad_schema": TurnDeliveryBadSchema,
    "turn_unbounded_hints": TurnUnboundedHints,
    "turn_bodies_on_demand": TurnBodiesOnDemand,
    "turn_missing_refs_array": TurnMissingRefsArray,
    "turn_bad_schema_version": TurnBadSchemaVersion,
}
