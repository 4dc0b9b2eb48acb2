"""Miniatures of search: hints too many, too large or malformed, a status that
hides what happened, a run that is not checked, a missing endpoint."""

from __future__ import annotations

import json
from typing import Any

from simulator.clock import Clock
from simulator.config import SimConfig
from simulator.core import MAX_HINTS, Caller, Core
from simulator.errors import ApiError
from simulator.miniatures._asgi import Miniature
from simulator.miniatures.capabilities import EndpointMissing
from simulator.sizing import dumps, escaped_size
from simulator.store import Revision, Run, Store


class SearchMissing(EndpointMissing):
    operations = frozenset({"search"})


class SearchIgnoresRun(Core):
    """A run that is not the caller's is taken at its word, as if it were (hints' references bind to it)."""

    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        try:
            run = self._run(body["run_id"], caller)
        except ApiError:
            ident = caller.identity
            run = Run(body["run_id"], caller.route, ident.session_id, ident.account, ident.hub)
        return self._search_in(caller, run, body)


class SearchFourthHint(Core):
    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        if not endpoint:
            return super()._search_hints(caller, run, query, limit, mode, endpoint=endpoint)
        status, hints = super()._search_hints(caller, run, query, 4, mode, endpoint=endpoint)
        return status, (hints * 4)[:4]


class SearchCachedByQuery(Core):
    """Answers are cached by the query's text alone: a later search with the same words, by any
    caller, in any run or workspace, after any change, gets the first caller's hints (and their
    references, bound to that first run). A plausible cache key bug; it also makes the Core answer
    one request two ways depending on what came before."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self._cached: dict[str, dict[str, Any]] = {}

    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        query = str(body.get("query", ""))
        if query not in self._cached:
            self._cached[query] = super().search(caller, body)
        copy: dict[str, Any] = json.loads(json.dumps(self._cached[query]))
        return copy


class SearchHintWithoutSummary(Core):
    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        hint = super()._hint(caller, run, rev)
        del hint["summary"]
        return hint


class SearchStatusEmpty(Core):
    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        found = super().search(caller, body)
        if found["status"] == "ok" and not found["hints"]:
            found["status"] = "empty"
        return found


class SearchFullContent(Core):
    """Each hint's summary is its whole document, and fitting the response leaves summaries alone."""

    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        return {**super()._hint(caller, run, rev), "summary": rev.content}

    def _fit(self, envelope: dict[str, Any], hints: list[dict[str, Any]], key: str, limit: int) -> dict[str, Any]:
        fitted = super()._fit(envelope, hints, key, limit)
        for out, hint in zip(fitted[key], hints, strict=True):
            if "summary" in hint:
                out["summary"] = hint["summary"]
        return fitted


class SearchHintPreview(Core):
    """Each hint of a short document gets an extra ``preview`` member with the whole document
    (title and summary stay as the clean Core makes them; long documents get none, so the
    response keeps its byte bound)."""

    PREVIEW_MAX_BYTES = 400

    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        hint = super()._hint(caller, run, rev)
        if len(rev.content.encode("utf-8")) <= self.PREVIEW_MAX_BYTES:
            hint["preview"] = rev.content
        return hint


class TrustMissing(Core):
    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        found = super().search(caller, body)
        del found["trust"]
        return found

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        page = super().read(caller, body)
        del page["trust"]
        return page


class SearchOversize(Core):
    def _fit(self, envelope: dict[str, Any], hints: list[dict[str, Any]], key: str, limit: int) -> dict[str, Any]:
        return {**envelope, key: hints}


def _chars(text: str) -> int:
    """Characters ``text`` takes inside a JSON string: what this miniature counts instead of bytes."""
    return len(json.dumps(text, ensure_ascii=False)) - 2


def _cut_to_chars(text: str, budget: int) -> str:
    if _chars(text) <= budget:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _chars(text[:mid]) <= budget - 1 else (lo, mid - 1)
    return text[:lo] + "…"


class SearchCountsCharacters(Core):
    """Hints are fitted by counting characters of their JSON, not UTF-8 bytes: each hint gets a
    third of the 4096 bound, a quarter of that for its title. Right for ASCII, and for one hint of
    any text; three hints of multi-byte text together overflow the bound (turn hints too)."""

    def _fit(self, envelope: dict[str, Any], hints: list[dict[str, Any]], key: str, limit: int) -> dict[str, Any]:
        fitted = []
        for hint in hints:
            bare = {**hint, "title": "", **({"summary": ""} if "summary" in hint else {})}
            room = limit // MAX_HINTS - len(json.dumps(bare, ensure_ascii=False)) - 16
            out = {**hint, "title": _cut_to_chars(hint["title"], max(8, room // 4))}
            if "summary" in hint:
                out["summary"] = _cut_to_chars(hint["summary"], max(8, room - _chars(out["title"])))
            fitted.append(out)
        return {**envelope, key: fitted}


def _strings(body: Any) -> list[str]:
    """Every string value of ``body``, at any depth (member names left out)."""
    if isinstance(body, str):
        return [body]
    if isinstance(body, dict):
        return [s for v in body.values() for s in _strings(v)]
    if isinstance(body, list):
        return [s for v in body for s in _strings(v)]
    return []


_SHORT_ESCAPES = frozenset("\b\f\n\r\t")


class FillsTheBound(Core):
    """Fills titles and summaries greedily up to the bound as ``measure`` counts the JSON: each field
    in turn gets its share of what is left, the last one the rest, so the response ends within one
    character of the bound by that count. With the right measure (UTF-8 bytes of the whole
    response) this is a correct Core; each subclass counts one thing wrong."""

    def measure(self, body: dict[str, Any]) -> int:
        return len(dumps(body))

    def _fit(self, envelope: dict[str, Any], hints: list[dict[str, Any]], key: str, limit: int) -> dict[str, Any]:
        out = [{**h, "title": "", **({"summary": ""} if "summary" in h else {})} for h in hints]
        fields = [(i, f) for i, h in enumerate(hints) for f in ("title", "summary") if f in h]
        for n, (i, f) in enumerate(fields):
            used = self.measure({**envelope, key: out})
            target = used + (limit - used) // (len(fields) - n)
            text = hints[i][f]
            lo, hi = 0, len(text)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                out[i][f] = text[:mid]
                lo, hi = (mid, hi) if self.measure({**envelope, key: out}) <= target else (lo, mid - 1)
            out[i][f] = text[:lo]
        return {**envelope, key: out}


class SearchFillsCountingCharacters(FillsTheBound):
    """Fills the bound by the characters of the JSON, not its UTF-8 bytes (right for ASCII only)."""

    def measure(self, body: dict[str, Any]) -> int:
        return len(dumps(body).decode("utf-8"))


class SearchEscapeCountedAsOneByte(FillsTheBound):
    """Counts the UTF-8 bytes of the JSON, but each six-byte ``\\uXXXX`` escape (a control character)
    as one byte, the character it stands for."""

    def measure(self, body: dict[str, Any]) -> int:
        escapes = sum(1 for s in _strings(body) for ch in s if ch < " " and ch not in _SHORT_ESCAPES)
        return len(dumps(body)) - 5 * escapes


class SearchCountsBytesBeforeEscaping(FillsTheBound):
    """Counts each string by its UTF-8 bytes before JSON escaping: a quote, a backslash, a newline
    or a control character as the one byte it is, not the two or six its escape takes."""

    def measure(self, body: dict[str, Any]) -> int:
        return len(dumps(body)) - sum(escaped_size(s) - len(s.encode("utf-8")) for s in _strings(body))


class SearchFitsBeforeEnvelope(FillsTheBound):
    """Fits the hints to 4096 bytes before the ``status`` and ``trust`` members are added."""

    def measure(self, body: dict[str, Any]) -> int:
        return len(dumps({k: v for k, v in body.items() if k not in ("status", "trust")}))


class SearchFitsWithoutMessage(FillsTheBound):
    """Fits the hints to 4096 bytes without the ``message`` a partial (or unavailable) answer
    carries: right in normal mode, over the bound by the message in partial mode."""

    def measure(self, body: dict[str, Any]) -> int:
        return len(dumps({k: v for k, v in body.items() if k != "message"}))


class UnavailableAsEmptyOk(Core):
    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        found = super().search(caller, body)
        if found["status"] == "unavailable":
            found["status"] = "ok"
            found.pop("message", None)
        return found


class PartialAsOk(Core):
    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        found = super().search(caller, body)
        if found["status"] == "partial":
            found["status"] = "ok"
            found.pop("message", None)
        return found


class HintSummaryVerbatim(Core):
    """An author's summary is sent as it is, even one that holds the whole document."""

    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        hint = super()._hint(caller, run, rev)
        return {**hint, "summary": rev.summary} if rev.summary else hint


MINIATURES: dict[str, Miniature] = {
    "search_missing": SearchMissing,
    "search_ignores_run": SearchIgnoresRun,
    "search_fourth_hint": SearchFourthHint,
    "search_cached_by_query": SearchCachedByQuery,
    "search_hint_without_summary": SearchHintWithoutSummary,
    "search_status_empty": SearchStatusEmpty,
    "search_full_content": SearchFullContent,
    "hint_summary_verbatim": HintSummaryVerbatim,
    "search_hint_preview": SearchHintPreview,
    "trust_missing": TrustMissing,
    "search_oversize": SearchOversize,
    "search_counts_characters": SearchCountsCharacters,
    "search_fills_counting_characters": SearchFillsCountingCharacters,
    "search_escape_counted_as_one_byte": SearchEscapeCountedAsOneByte,
    "search_counts_bytes_before_escaping": SearchCountsBytesBeforeEscaping,
    "search_fits_before_envelope": SearchFitsBeforeEnvelope,
    "search_fits_without_message": SearchFitsWithoutMessage,
    "unavailable_as_empty_ok": UnavailableAsEmptyOk,
    "partial_as_ok": PartialAsOk,
}
