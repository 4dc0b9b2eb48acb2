"""Broken clients as miniatures: the reference harness with exactly one obligation dropped each,
for the project's own tests (``python -m conformance.clients.miniatures NAME``). What a client
run must report against each is data: schemas/client-miniatures.yaml."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from conformance.clients.reference import HOST_INPUTS, Connection, ReferenceHarness, main
from conformance.clients.reference_client import Capabilities, KnowledgeError, ReferenceClient


def _client(name: str, base: type[ReferenceClient] = ReferenceClient, **overrides: Any) -> type[ReferenceHarness]:
    """A harness whose client is ``base`` with ``overrides``."""
    client = type(f"{name}_client", (base,), overrides)

    def make_client(self: ReferenceHarness, http: httpx.Client, route: str, token: str) -> ReferenceClient:
        made: ReferenceClient = client(http, route, token)
        return made

    return type(name, (ReferenceHarness,), {"make_client": make_client})


class _LegacyOnly404And501(ReferenceClient):
    def __init__(self, http: httpx.Client, route: str, token: str) -> None:
        super().__init__(http, route, token, unsupported_statuses={404, 501})


def _errors_as_unsupported(self: ReferenceClient) -> Capabilities:
    try:
        return ReferenceClient.get_knowledge_capabilities(self)
    except KnowledgeError as exc:
        if exc.feedback["code"] == "unknown_schema":
            raise
        return Capabilities(supported=False)


def _trusts_any_capabilities(self: ReferenceClient) -> Capabilities:
    response = self.http.get(self._url("capabilities"), headers=self._auth)
    if response.status_code in self.unsupported:
        return Capabilities(supported=False, status=response.status_code)
    if response.status_code != 200:
        raise self._error("get_knowledge_capabilities", response)
    body = response.json()
    return Capabilities(supported=True, enabled=bool(body.get("enabled", True)), limits=dict(body.get("limits") or {}))


def _never_emits(
    self: ReferenceClient, user_input: str, ids: Mapping[str, str], *, knowledge_delivery: str | None = None
) -> dict[str, Any]:
    return ReferenceClient.start_turn(self, user_input, ids)


def _unpinned(
    self: ReferenceClient, user_input: str, ids: Mapping[str, str], *, knowledge_delivery: str | None = None
) -> dict[str, Any]:
    self._pinned.clear()  # every call builds its payload anew: a retry with another option sends another payload
    return ReferenceClient.start_turn(self, user_input, ids, knowledge_delivery=knowledge_delivery)


def _camel_search(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    response = self.http.post(
        self._url("search"), json={"query": data["query"], "runId": data.get("runId")}, headers=self._auth
    )
    if response.status_code != 200:
        raise self._error("search_knowledge", response)
    return dict(response.json())


def _camel_read(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    wire = {
        k: v
        for k, v in {
            "ref": data["ref"],
            "runId": data.get("runId"),
            "maxBytes": data.get("maxBytes"),
            "cursor": data.get("cursor"),
        }.items()
        if v is not None
    }
    response = self.http.post(self._url("read"), json=wire, headers=self._auth)
    if response.status_code != 200:
        raise self._error("read_knowledge", response)
    return dict(response.json())


def _unavailable_as_empty(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    body = ReferenceClient.search_knowledge(self, data)
    return {**body, "status": "ok", "hints": []} if body["status"] == "unavailable" else body


def _replays(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return ReferenceClient.read_knowledge(self, data)
    except KnowledgeError:
        return ReferenceClient.read_knowledge(self, data)  # the same read again, as if it could succeed now


def _chain_as_full(self: ReferenceClient, ref: str, run_id: str, *, max_bytes: int | None = None) -> Any:
    chain = ReferenceClient.read_chain(self, ref, run_id, max_bytes=max_bytes)
    return type(chain)(chain.content, chain.pages, True, False, False, chain.revision)


_SHARED: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}


def _cached_search(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    """One cache for every connection, keyed by workspace and query: another account gets the references
    the first one received (its own searches still go out)."""
    key, mine = (self.route, str(data["query"])), self._auth["Authorization"]
    if key in _SHARED and _SHARED[key][0] != mine:
        return _SHARED[key][1]
    found = ReferenceClient.search_knowledge(self, data)
    _SHARED[key] = (mine, found)
    return found


class FollowsPages(ReferenceHarness):
    def do_read(self, command: Mapping[str, Any]) -> dict[str, Any]:
        client = self.connection(command["connection"]).client
        first = page = client.read_knowledge(command["input"])
        while page.get("next_cursor"):  # reads the whole chain when one page was asked for
            page = client.read_knowledge({**command["input"], "cursor": page["next_cursor"]})
        return first


class ModelChoosesDelivery(ReferenceHarness):
    def delivery(self, conn: Connection, command: Mapping[str, Any]) -> str | None:
        asked = (command.get("model_input") or {}).get("knowledge_delivery")
        return str(asked) if asked else super().delivery(conn, command)


class TurnsWithoutNegotiating(ReferenceHarness):
    def delivery(self, conn: Connection, command: Mapping[str, Any]) -> str | None:
        return None if command["delivery"] == "inline" else "on_demand"


class StripsInlineBodies(ReferenceHarness):
    def do_turn(self, command: Mapping[str, Any]) -> dict[str, Any]:
        turn = super().do_turn(command)
        if command["delivery"] != "inline" and "knowledge_delivery" not in turn["context"]:
            turn["context"]["knowledge"] = []  # "the host asked for on_demand, so no bodies"
        return turn


class HostWithoutAliases(ReferenceHarness):
    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        return super().host_input(call, conn, {k: v for k, v in given.items() if k != "max_bytes"})


class HostIgnoresSignal(ReferenceHarness):
    def check_signal(self, options: Mapping[str, Any]) -> None:
        return None


class HostChecksBindingBeforeOnly(ReferenceHarness):
    def check_binding(self, conn: Connection, options: Mapping[str, Any], when: str) -> None:
        if when == "before":
            super().check_binding(conn, options, when)


class HostTakesModelRun(ReferenceHarness):
    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        data = super().host_input(call, conn, given)
        return {**data, "runId": given["run_id"]} if "run_id" in given and call in HOST_INPUTS else data


class MalformedAnswers(ReferenceHarness):
    def do_capabilities(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return {"supported": "yes"}


MINIATURES: dict[str, Callable[[], ReferenceHarness]] = {
    "legacy_405_raises": _client("legacy_405_raises", _LegacyOnly404And501),
    "errors_as_unsupported": _client("errors_as_unsupported", get_knowledge_capabilities=_errors_as_unsupported),
    "trusts_any_capabilities": _client("trusts_any_capabilities", get_knowledge_capabilities=_trusts_any_capabilities),
    "turns_without_negotiating": TurnsWithoutNegotiating,
    "on_demand_not_emitted": _client("on_demand_not_emitted", start_turn=_never_emits),
    "model_chooses_delivery": ModelChoosesDelivery,
    "retry_not_pinned": _client("retry_not_pinned", start_turn=_unpinned),
    "strips_inline_bodies": StripsInlineBodies,
    "camel_case_on_the_wire": _client(
        "camel_case_on_the_wire", search_knowledge=_camel_search, read_knowledge=_camel_read
    ),
    "follows_pages": FollowsPages,
    "unavailable_as_empty": _client("unavailable_as_empty", search_knowledge=_unavailable_as_empty),
    "budget_chain_as_full": _client("budget_chain_as_full", read_chain=_chain_as_full),
    "replays_after_reference_error": _client("replays_after_reference_error", read_knowledge=_replays),
    "shares_search_cache": _client("shares_search_cache", search_knowledge=_cached_search),
    "host_without_aliases": HostWithoutAliases,
    "host_ignores_signal": HostIgnoresSignal,
    "host_checks_binding_before_only": HostChecksBindingBeforeOnly,
    "host_takes_model_run": HostTakesModelRun,
    "malformed_answers": MalformedAnswers,
}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MINIATURES:
        print(
            f"usage: python -m conformance.clients.miniatures NAME; NAME one of {', '.join(MINIATURES)}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    harness = MINIATURES[sys.argv[1]]()
    harness.name = sys.argv[1]
    raise SystemExit(main(harness))
