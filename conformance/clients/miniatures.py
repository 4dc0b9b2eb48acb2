"""Broken clients as miniatures: the reference harness with exactly one obligation dropped each,
for the project's own tests (``python -m conformance.clients.miniatures NAME``). What a client
run must report against each is data: schemas/client-miniatures.yaml."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from conformance.clients.reference import HOST_INPUTS, Connection, ReferenceHarness, Refusal, main
from conformance.clients.reference_client import Capabilities, KnowledgeError, ReferenceClient
from conformance.common import contract as C


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


class HostChecksSignalBeforeOnly(ReferenceHarness):
    """The signal is looked at before the request only: an abort while it is in flight is ignored."""

    def do_host_call(self, command: Mapping[str, Any]) -> dict[str, Any]:
        options = command["options"]
        self.check_signal(options)
        return super().do_host_call({**command, "options": {k: v for k, v in options.items() if k != "signal"}})


class HostChecksBindingBeforeOnly(ReferenceHarness):
    def check_binding(self, conn: Connection, options: Mapping[str, Any], when: str) -> None:
        if when == "before":
            super().check_binding(conn, options, when)


class HostChecksBindingAfterSuccessOnly(ReferenceHarness):
    """The binding is checked again only after a successful answer: a Core error that arrives after
    the Agent Session changed is handed back as it came."""

    def after_failed_work(self, conn: Connection, options: Mapping[str, Any]) -> None:
        return None


class HostTakesModelRun(ReferenceHarness):
    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        data = super().host_input(call, conn, given)
        return {**data, "runId": given["run_id"]} if "run_id" in given and call in HOST_INPUTS else data


class MalformedAnswers(ReferenceHarness):
    def do_capabilities(self, command: Mapping[str, Any]) -> dict[str, Any]:
        return {"supported": "yes"}


def _limits_unchecked(self: ReferenceClient, body: Any) -> Capabilities:
    """Limits must be there, whatever their values."""
    if isinstance(body, dict) and isinstance(body.get("limits"), dict):
        body = {**body, "limits": {k: C.LIMITS[k] for k in body["limits"] if k in C.LIMITS}}
    return ReferenceClient.classify_capabilities(self, body)


def _on_demand_mode_enough(self: ReferenceClient, body: Any) -> Capabilities:
    """Any modes list naming on_demand will do (one without inline too)."""
    if isinstance(body, dict) and "on_demand" in (body.get("delivery_modes") or []):
        body = {**body, "delivery_modes": ["inline", "on_demand"]}
    return ReferenceClient.classify_capabilities(self, body)


def _disabled_as_unsupported(self: ReferenceClient, body: Any) -> Capabilities:
    caps = ReferenceClient.classify_capabilities(self, body)
    return caps if caps.enabled else Capabilities(supported=False)


def _search_errors_as_empty(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return ReferenceClient.search_knowledge(self, data)
    except KnowledgeError:
        return {"status": "ok", "trust": "reference_only", "hints": []}


def _read_errors_as_empty(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return ReferenceClient.read_knowledge(self, data)
    except KnowledgeError as exc:
        if C.is_reference_error_code(exc.feedback["code"]):
            raise
        return {"ref": data["ref"], "revision": "", "content": "", "next_cursor": None, "trust": "reference_only"}


_NEGOTIATED: list[Capabilities] = []


class NegotiatesOncePerProcess(ReferenceHarness):
    """A negotiated turn reuses the first capabilities answer the process got, whichever connection,
    Hub or route asked for it."""

    def do_capabilities(self, command: Mapping[str, Any]) -> dict[str, Any]:
        conn = self.connection(command["connection"])
        caps = conn.client.get_knowledge_capabilities()
        if not _NEGOTIATED and caps.supported:
            _NEGOTIATED.append(caps)
        return self.capabilities_value(caps)

    def delivery(self, conn: Connection, command: Mapping[str, Any]) -> str | None:
        if command["delivery"] == "negotiate" and _NEGOTIATED:
            return "on_demand"
        return super().delivery(conn, command)


class OnDemandNeedsCapabilities(ReferenceHarness):
    """The on_demand host option is honoured only where this connection's capabilities said supported."""

    def do_capabilities(self, command: Mapping[str, Any]) -> dict[str, Any]:
        value = super().do_capabilities(command)
        if value["supported"]:
            self.__dict__.setdefault("negotiated", set()).add(command["connection"])
        return value

    def delivery(self, conn: Connection, command: Mapping[str, Any]) -> str | None:
        chosen = super().delivery(conn, command)
        if command["delivery"] == "negotiate":
            return chosen
        return chosen if conn.key in self.__dict__.get("negotiated", set()) else None


def _pin_kept_once(
    self: ReferenceClient, user_input: str, ids: Mapping[str, str], *, knowledge_delivery: str | None = None
) -> dict[str, Any]:
    """The first retry replays the pinned payload; the second is rebuilt without the delivery choice."""
    body: dict[str, Any] = {k: ids[k] for k in ("client_conversation_id", "client_turn_id", "user_message_id")}
    body["user_input"] = user_input
    if knowledge_delivery is not None:
        body["knowledge_delivery"] = knowledge_delivery
    last: httpx.Response | None = None
    for attempt in range(3):
        sent = body if attempt < 2 else {k: v for k, v in body.items() if k != "knowledge_delivery"}
        last = self.http.post(self._url("turns"), json=sent, headers=self._auth)
        if last.status_code == 200:
            return self.checked_turn(dict(last.json()))
        if last.status_code not in (502, 503, 504):
            break
    assert last is not None
    raise self._error("start_turn", last)


def _exclusive_max_bytes(self: ReferenceClient, data: Mapping[str, Any]) -> dict[str, Any]:
    """maxBytes is passed on only strictly inside 4096..32768 (and only as an int); otherwise dropped."""
    given = data.get("maxBytes")
    keep = isinstance(given, int) and 4096 < given < 32768
    return ReferenceClient.read_knowledge(self, {**data, "maxBytes": given if keep else None})


def _budget_not_truncated(self: ReferenceClient, ref: str, run_id: str, *, max_bytes: int | None = None) -> Any:
    chain = ReferenceClient.read_chain(self, ref, run_id, max_bytes=max_bytes)
    return type(chain)(chain.content, chain.pages, chain.complete, False, chain.budget_exhausted, chain.revision)


class BudgetChainDescribedFull(ReferenceHarness):
    def do_read_all(self, command: Mapping[str, Any]) -> dict[str, Any]:
        value = super().do_read_all(command)
        return {**value, "description": f"full read of {value['pages']} page(s)"}


class ChainSwallowsErrors(ReferenceHarness):
    """A chain stopped by an error answers what it read, complete false, and says nothing of the error."""

    def do_read_all(self, command: Mapping[str, Any]) -> dict[str, Any]:
        data = command["input"]
        client = self.connection(command["connection"]).client
        parts: list[str] = []
        cursor = None
        while True:
            try:
                page = client.read_knowledge({**data, "cursor": cursor})
            except KnowledgeError:
                return {
                    "complete": False,
                    "truncated": True,
                    "budget_exhausted": False,
                    "pages": len(parts),
                    "content": "".join(parts),
                }
            parts.append(page["content"])
            cursor = page.get("next_cursor")
            if not cursor or len(parts) > 64:
                return {
                    "complete": not page.get("truncated"),
                    "truncated": bool(page.get("truncated")),
                    "budget_exhausted": bool(page.get("budget_exhausted")),
                    "pages": len(parts),
                    "content": "".join(parts),
                }


class ChainStopsAsComplete(ChainSwallowsErrors):
    """A chain stopped by an error is called complete: the pages read so far are the document."""

    def do_read_all(self, command: Mapping[str, Any]) -> dict[str, Any]:
        value = super().do_read_all(command)
        return {**value, "complete": True, "truncated": False} if not value["budget_exhausted"] else value


class ChainDropsLastPage(ReferenceHarness):
    """The chain loop leaves as soon as a page has no next cursor, before keeping that page's content:
    a chain under the budget answers complete with every page but the last."""

    def do_read_all(self, command: Mapping[str, Any]) -> dict[str, Any]:
        data = command["input"]
        client = self.connection(command["connection"]).client
        parts: list[str] = []
        page = client.read_knowledge(data)
        while page.get("next_cursor") and len(parts) < 64:
            parts.append(page["content"])
            page = client.read_knowledge({**data, "cursor": page["next_cursor"]})
        return {
            "complete": not page.get("truncated"),
            "truncated": bool(page.get("truncated")),
            "budget_exhausted": bool(page.get("budget_exhausted")),
            "pages": len(parts) + 1,
            "content": "".join(parts),
        }


class CapsInlinePreview(ReferenceHarness):
    def do_turn(self, command: Mapping[str, Any]) -> dict[str, Any]:
        turn = super().do_turn(command)
        for item in turn["context"].get("knowledge") or []:
            if isinstance(item, dict) and isinstance(item.get("content"), str):
                item["content"] = item["content"][:2000]  # a preview, not the body
        return turn


class HostWithoutCapabilities(ReferenceHarness):
    """The host transport exposes searchKnowledge and readKnowledge only: getKnowledgeCapabilities is no call of it."""

    def do_host_call(self, command: Mapping[str, Any]) -> dict[str, Any]:
        if command["call"] == "getKnowledgeCapabilities":
            raise Refusal("invalid_input", "unknown host call getKnowledgeCapabilities")
        return super().do_host_call(command)


class HostIgnoresWorkspace(ReferenceHarness):
    """The host never compares the options' explicit workspace with its connection's: every call acts on the connection's."""

    def do_host_call(self, command: Mapping[str, Any]) -> dict[str, Any]:
        options = dict(command["options"])
        options["workspace"] = self.connection(options["connectionKey"]).route
        return super().do_host_call({**command, "options": options})


class HostRefusesBothSpellings(ReferenceHarness):
    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        if "maxBytes" in given and "max_bytes" in given:
            raise Refusal("invalid_input", "give maxBytes or max_bytes, not both")
        return super().host_input(call, conn, given)


class HostChecksSessionOnly(ReferenceHarness):
    def check_binding(self, conn: Connection, options: Mapping[str, Any], when: str) -> None:
        if conn.binding.get("sessionId") != options["expectedBinding"].get("sessionId"):
            raise Refusal("binding_changed", f"agent_binding_changed ({when} the request)")


class StripsOnDemandBodies(ReferenceHarness):
    """An explicit on_demand turn's bodies are dropped, whatever the Core sent: "on_demand means hints only"."""

    def do_turn(self, command: Mapping[str, Any]) -> dict[str, Any]:
        turn = super().do_turn(command)
        if command["delivery"] == "on_demand":
            turn["context"]["knowledge"], turn["context"]["knowledge_refs"] = [], []
        return turn


def _delivery_checked_when_asked(
    self: ReferenceClient, user_input: str, ids: Mapping[str, str], *, knowledge_delivery: str | None = None
) -> dict[str, Any]:
    """context.knowledge_delivery is checked only on a turn that asked for on_demand."""
    checked = self.checked_turn
    if knowledge_delivery != "on_demand":
        self.checked_turn = lambda turn: turn  # type: ignore[method-assign]
    try:
        return ReferenceClient.start_turn(self, user_input, ids, knowledge_delivery=knowledge_delivery)
    finally:
        self.checked_turn = checked  # type: ignore[method-assign]


def _chain_end_by_cursor(self: ReferenceClient, page: dict[str, Any]) -> tuple[bool, bool]:
    """The chain is complete when the cursor runs out unless the budget flag says otherwise: the last
    page's ``truncated`` is never read."""
    exhausted = page.get("budget_exhausted") is True
    return exhausted, exhausted


class NegotiationNotPinned(ReferenceHarness):
    """A negotiated turn asks capabilities again on every retry and follows the new answer: the pin of an
    explicit delivery holds, a negotiated one is rebuilt."""

    def do_turn(self, command: Mapping[str, Any]) -> dict[str, Any]:
        if command["delivery"] == "negotiate":
            ids = command["ids"]
            key = (ids["client_conversation_id"], ids["client_turn_id"], ids["user_message_id"])
            self.connection(command["connection"]).client._pinned.pop(key, None)
        return super().do_turn(command)


class HostTakesModelCamelRun(ReferenceHarness):
    """The host transport lets a model's camelCase runId choose the run of a read (the snake-case run_id is
    ignored)."""

    def host_input(self, call: str, conn: Connection, given: Mapping[str, Any]) -> dict[str, Any]:
        data = super().host_input(call, conn, given)
        return {**data, "runId": given["runId"]} if "runId" in given and call == "readKnowledge" else data


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
    "host_checks_signal_before_only": HostChecksSignalBeforeOnly,
    "host_checks_binding_before_only": HostChecksBindingBeforeOnly,
    "host_checks_binding_after_success_only": HostChecksBindingAfterSuccessOnly,
    "host_takes_model_run": HostTakesModelRun,
    "capabilities_limits_unchecked": _client("capabilities_limits_unchecked", classify_capabilities=_limits_unchecked),
    "capabilities_on_demand_mode_enough": _client(
        "capabilities_on_demand_mode_enough", classify_capabilities=_on_demand_mode_enough
    ),
    "disabled_as_unsupported": _client("disabled_as_unsupported", classify_capabilities=_disabled_as_unsupported),
    "search_errors_as_empty": _client("search_errors_as_empty", search_knowledge=_search_errors_as_empty),
    "read_errors_as_empty_page": _client("read_errors_as_empty_page", read_knowledge=_read_errors_as_empty),
    "negotiates_once_per_process": NegotiatesOncePerProcess,
    "on_demand_needs_capabilities": OnDemandNeedsCapabilities,
    "pin_kept_for_one_retry": _client("pin_kept_for_one_retry", start_turn=_pin_kept_once),
    "max_bytes_exclusive_bounds": _client("max_bytes_exclusive_bounds", read_knowledge=_exclusive_max_bytes),
    "budget_chain_not_truncated": _client("budget_chain_not_truncated", read_chain=_budget_not_truncated),
    "budget_chain_described_full": BudgetChainDescribedFull,
    "chain_swallows_errors": ChainSwallowsErrors,
    "chain_stops_as_complete": ChainStopsAsComplete,
    "chain_drops_last_page": ChainDropsLastPage,
    "caps_inline_preview": CapsInlinePreview,
    "host_refuses_both_spellings": HostRefusesBothSpellings,
    "host_without_capabilities": HostWithoutCapabilities,
    "host_ignores_workspace": HostIgnoresWorkspace,
    "host_checks_session_only": HostChecksSessionOnly,
    "strips_on_demand_bodies": StripsOnDemandBodies,
    "delivery_checked_on_demand_only": _client(
        "delivery_checked_on_demand_only", start_turn=_delivery_checked_when_asked
    ),
    "chain_end_by_cursor": _client("chain_end_by_cursor", chain_end=_chain_end_by_cursor),
    "negotiation_not_pinned": NegotiationNotPinned,
    "host_takes_model_camel_run": HostTakesModelCamelRun,
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
