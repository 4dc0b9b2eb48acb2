"""The Core's knowledge behaviour, independent of HTTP: identities, turns,
capabilities, search, read, references. The reference behaviour only: deliberate
deviations are separate wrappers around it (``simulator.miniatures``)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, cast

from simulator.clock import Clock
from simulator.config import SimConfig
from simulator.errors import ApiError, reference_error
from simulator.signing import MAX_TOKEN_BYTES, Signer, TokenError, digest
from simulator.sizing import dumps, fit_prefix, trim
from simulator.store import Identity, Revision, Run, Scope, Store

KNOWLEDGE_SCHEMA = "bailing.agent-knowledge.v1"
CAPABILITIES_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
TURN_SCHEMA = "bailing.agent-turn-context.v1"
SEARCH_MAX_BYTES = 4096
MAX_HINTS = 3
READ_DEFAULT_BYTES = 16384
READ_MIN_BYTES, READ_MAX_BYTES = 4096, 32768
CHAIN_BUDGET = 131072
REFERENCE_TTL = 300.0
INLINE_BODY_CHARS = 4000
ROUTE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
LEGACY_BODIES = {404: "not_found", 405: "method_not_allowed", 501: "not_implemented"}
LIMITS = {
    "search_max_hints": MAX_HINTS,
    "search_max_bytes": SEARCH_MAX_BYTES,
    "read_default_max_bytes": READ_DEFAULT_BYTES,
    "read_min_max_bytes": READ_MIN_BYTES,
    "read_max_max_bytes": READ_MAX_BYTES,
    "reference_max_bytes": MAX_TOKEN_BYTES,
    "read_chain_max_bytes": CHAIN_BUDGET,
    "reference_ttl_seconds": int(REFERENCE_TTL),
}


@dataclass(frozen=True)
class Canned:
    """The answer of a ``respond_next`` fault: ``status`` with the JSON ``body``, or ``text`` as it is
    (not JSON) when given."""

    status: int
    body: Any = None
    text: str | None = None


@dataclass(frozen=True)
class Caller:
    """Who is asking, on which route: the resolved bearer token."""

    identity: Identity
    route: str


class Core:
    reference_ttl: float = REFERENCE_TTL  # seconds a reference or cursor stays valid
    chain_budget: float = CHAIN_BUDGET  # content bytes one read chain may deliver

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.signer = Signer(store.signing_key())
        self.faults: list[tuple[str, str | None]] = []
        self._fault_lock = threading.Lock()
        self.withheld: list[tuple[str, int, str]] = []  # (route, status, body) of each response a lose fault withheld
        self.canned: list[list[Any]] = []  # [endpoint, route, requests to let through first, Canned] of respond_next

    # ------------------------------------------------------------ identity
    def authenticate(self, authorization: str | None, route: str, *, knowledge_op: bool) -> Caller:
        """Token first (401 before route matching), then the route (vendor convention)."""
        scheme, _, token = (authorization or "").partition(" ")
        ident = self.store.identity(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if ident is None:
            raise ApiError(401, "unauthorized", "missing or invalid bearer token")
        if not ROUTE.match(route) or route == "auto":
            raise ApiError(400, "invalid_route", "route must match [a-z0-9][a-z0-9_-]{1,63} and not be 'auto'")
        if self.store.workspace(route) is None:
            raise ApiError(404, "route_unavailable", f"no workspace is reachable at route {route!r}")
        if ident.route != route:
            raise ApiError(403, "route_not_allowed", "this token belongs to another workspace")
        return Caller(ident, route)

    def mode(self, route: str) -> tuple[str, int]:
        found = self.store.workspace(route)
        return found if found is not None else ("normal", 404)

    def legacy_refusal(self, route: str) -> ApiError | None:
        """A legacy Core does not know the knowledge endpoints."""
        mode, status = self.mode(route)
        if mode != "legacy":
            return None
        return ApiError(status, LEGACY_BODIES[status], "unknown path")

    def take_fault(self, kind: str, route: str) -> bool:
        """Use up one injected fault; under a lock, as a served simulator takes them from several threads
        (none armed, the usual case, is answered without it)."""
        if not self.faults:
            return False
        with self._fault_lock:
            for i, (k, r) in enumerate(self.faults):
                if k == kind and r in (None, route):
                    del self.faults[i]
                    return True
        return False

    def take_canned(self, endpoint: str, route: str) -> Canned | None:
        """The answer of an armed ``respond_next`` fault for this endpoint and route, once: after the
        requests it lets through first (``after``); none armed is answered without the lock."""
        if not self.canned:
            return None
        with self._fault_lock:
            for i, armed in enumerate(self.canned):
                if armed[0] == endpoint and armed[1] in (None, route):
                    if armed[2] > 0:
                        armed[2] -= 1
                        return None
                    del self.canned[i]
                    return cast(Canned, armed[3])
        return None

    def _run(self, run_id: str, caller: Caller) -> Run:
        run = self.store.run(run_id)
        ident = caller.identity
        if run is None or run.session_id != ident.session_id or run.route != caller.route or run.hub != ident.hub:
            raise ApiError(404, "run_not_found", "no run with this id in this Agent Session and route")
        return run

    # -------------------------------------------------------- capabilities
    def capabilities(self, caller: Caller) -> dict[str, Any]:
        mode, _ = self.mode(caller.route)
        return {
            "schema_version": CAPABILITIES_SCHEMA,
            "knowledge_schema_version": KNOWLEDGE_SCHEMA,
            "route": caller.route,
            "enabled": mode != "disabled",
            "delivery_modes": ["inline", "on_demand"],
            "limits": dict(LIMITS),
        }

    # --------------------------------------------------------------- turns
    def start_turn(self, caller: Caller, body: dict[str, Any]) -> tuple[int, bytes]:
        ident = caller.identity
        mode, _ = self.mode(caller.route)
        if mode == "legacy" and "knowledge_delivery" in body:
            raise ApiError(400, "invalid_request", "unknown field knowledge_delivery")
        key = json.dumps(
            [
                ident.session_id,
                caller.route,
                body["client_conversation_id"],
                body["client_turn_id"],
                body["user_message_id"],
            ]
        )
        fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        replayed = self._replay(key, fingerprint)
        if replayed is not None:
            return 200, replayed
        now = self.clock.now()
        run = Run(self.store.new_uuid(), caller.route, ident.session_id, ident.account, ident.hub)
        context = self._turn_context(caller, run, body["user_input"], body.get("knowledge_delivery", "inline"), mode)
        response = dumps(
            {
                "schema_version": TURN_SCHEMA,
                "run_id": run.run_id,
                "context": context,
            }
        ).decode("utf-8")
        self.store.commit_turn(key, fingerprint, run, response, now)
        if self.take_fault("lose_next_turn_response", caller.route):
            self.withheld.append((caller.route, 200, response))  # control can say what was committed (GET /faults/lost)
            raise ApiError(502, "response_lost", "the turn committed but its response was lost (injected fault)")
        return 200, response.encode("utf-8")

    def _replay(self, key: str, fingerprint: str) -> bytes | None:
        """The frozen response of a committed turn with this identity; another payload is a conflict."""
        existing = self.store.turn(key)
        if existing is None:
            return None
        if existing[0] != fingerprint:
            raise ApiError(409, "turn_conflict", "this turn identity was already used with another payload")
        return existing[1].encode("utf-8")

    def _turn_context(self, caller: Caller, run: Run, user_input: str, delivery: str, mode: str) -> dict[str, Any]:
        context: dict[str, Any] = {
            "knowledge": [],
            "knowledge_refs": [],
            "governance": {"knowledge_trust": "reference_only"},
        }
        if delivery == "on_demand":
            status, hints = self._search_hints(caller, run, user_input[:1000], MAX_HINTS, mode, endpoint=False)
            envelope = {
                "schema_version": KNOWLEDGE_SCHEMA,
                "mode": "on_demand",
                "status": status,
                "trust": "reference_only",
            }
            context["knowledge_delivery"] = self._fit(envelope, hints, "hints", SEARCH_MAX_BYTES)
            return context
        if mode != "disabled":
            context["knowledge"], context["knowledge_refs"] = self._inline_bodies(caller, run, user_input)
        return context

    def _inline_bodies(
        self, caller: Caller, run: Run, user_input: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What a legacy (inline) Core assembles: bodies plus their references."""
        bases = self._visible_bases(caller)
        found = self.store.search(
            caller.route, user_input[:1000], bases, MAX_HINTS, viewer=caller.identity.account
        ) or self.store.first_items(caller.route, bases, MAX_HINTS)
        bodies = [
            {"title": r.title, "content": r.content[:INLINE_BODY_CHARS], "ref": self._ref(caller, run, r)}
            for r in found
        ]
        refs = [{"knowledge_item_id": r.item_id, "revision": r.revision_id, "title": r.title} for r in found]
        return bodies, refs

    # -------------------------------------------------------------- search
    def search(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return self._search_in(caller, self._run(body["run_id"], caller), body)

    def _search_in(self, caller: Caller, run: Run, body: dict[str, Any]) -> dict[str, Any]:
        """Search on behalf of ``run``, already resolved as the caller's."""
        mode, _ = self.mode(caller.route)
        status, hints = self._search_hints(
            caller, run, body["query"], min(int(body.get("limit", MAX_HINTS)), MAX_HINTS), mode, endpoint=True
        )
        envelope: dict[str, Any] = {"schema_version": KNOWLEDGE_SCHEMA, "status": status, "trust": "reference_only"}
        if status in ("unavailable", "partial", "disabled"):
            envelope["message"] = {
                "unavailable": "knowledge search is unavailable; this is not an empty corpus",
                "partial": "some knowledge bases could not be searched",
                "disabled": "knowledge is disabled for this workspace",
            }[status]
        return self._fit(envelope, hints, "hints", SEARCH_MAX_BYTES)

    def _visible_bases(self, caller: Caller) -> list[str] | None:
        scope = self.store.scope(caller.route, caller.identity.account)
        return None if scope.bases is None else list(scope.bases)

    def _search_hints(
        self, caller: Caller, run: Run, query: str, limit: int, mode: str, *, endpoint: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        """Hints for a search request, or for a turn's on_demand context (``endpoint=False``:
        the injected search fault targets the search endpoint only)."""
        if mode == "disabled":
            return "disabled", []
        if mode == "unavailable" or (endpoint and self.take_fault("fail_next_search_unavailable", caller.route)):
            return "unavailable", []
        bases = self._visible_bases(caller)
        status = "ok"
        if mode == "partial":
            reachable = bases if bases is not None else self.store.base_ids(caller.route)
            bases = reachable[:-1]
            status = "partial"
        found = self.store.search(caller.route, query, bases, limit, viewer=caller.identity.account)
        return status, [self._hint(caller, run, r) for r in found]

    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        # An author's summary that holds the whole document is not sent: search never includes full content.
        whole = rev.content.strip()
        if rev.summary and not (whole and whole in rev.summary):
            summary = rev.summary
        else:
            summary = rev.content[: min(240, len(rev.content) // 2)].rstrip() + "…"
        return {"title": rev.title, "summary": summary, "ref": self._ref(caller, run, rev)}

    def _fit(self, envelope: dict[str, Any], hints: list[dict[str, Any]], key: str, limit: int) -> dict[str, Any]:
        """Trim titles and summaries on character boundaries until the JSON fits ``limit`` bytes."""
        bare = [{**h, "title": "", **({"summary": ""} if "summary" in h else {})} for h in hints]
        spare = limit - len(dumps({**envelope, key: bare})) - 16 * len(hints)
        each = spare // max(1, len(hints))
        fitted = []
        for h in hints:
            title = trim(h["title"], max(8, each // 4))
            out = {**h, "title": title}
            if "summary" in h:
                out["summary"] = trim(h["summary"], max(8, each - len(dumps(title))))
            fitted.append(out)
        return {**envelope, key: fitted}

    # ---------------------------------------------------------- references
    def _ref(self, caller: Caller, run: Run, rev: Revision) -> str:
        claims: dict[str, Any] = {
            "w": caller.route,
            "h": caller.identity.hub,
            "s": caller.identity.session_id,
            "a": caller.identity.account,
            "r": run.run_id,
            "i": rev.item_id,
            "v": rev.revision_id,
            "sv": self.store.scope(caller.route, caller.identity.account).version,
            "t": self.clock.now(),
        }
        return self.signer.sign("ref", claims)

    def _ref_error(self, status: int, code: str, message: str) -> ApiError:
        return reference_error(status, code, message)

    def _claims(self, kind: str, token: str) -> dict[str, Any]:
        if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
            raise self._ref_error(
                400, "knowledge_reference_invalid", f"the {kind} is longer than {MAX_TOKEN_BYTES} bytes"
            )
        try:
            return self.signer.verify(kind, token)
        except TokenError as exc:
            raise self._ref_error(400, "knowledge_reference_invalid", str(exc)) from None

    def _check_binding(self, kind: str, claims: dict[str, Any], caller: Caller, run: Run) -> None:
        for key, expected, label in binding(caller, run):
            if claims.get(key) != expected:
                raise self._ref_error(403, "knowledge_reference_mismatch", f"this {kind} belongs to another {label}")

    def _age(self, claims: dict[str, Any]) -> float | None:
        """Seconds since the token was issued; None when it names no issue time."""
        issued = claims.get("t")
        return self.clock.now() - issued if isinstance(issued, (int, float)) else None

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        """Valid while younger than the TTL, expired from it on (CHOICES.md, expiry edge)."""
        age = self._age(claims)
        if age is None or age >= self.reference_ttl:
            raise self._ref_error(410, "knowledge_reference_expired", f"this {kind} expired; search again")

    def _check_scope(self, claims: dict[str, Any], current: Revision | None, scope: Scope) -> None:
        in_scope = current is not None and (scope.bases is None or current.base_id in scope.bases)
        if claims.get("sv") != scope.version or not in_scope:
            raise self._ref_error(
                409, "knowledge_scope_changed", "the knowledge scope changed since this reference was issued"
            )

    def _check_revision(self, claims: dict[str, Any], current: Revision) -> None:
        if current.revision_id != claims.get("v"):
            raise self._ref_error(
                409, "knowledge_revision_changed", "a newer revision was published since this reference was issued"
            )

    # ---------------------------------------------------------------- read
    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        run = self._run(body["run_id"], caller)
        mode, _ = self.mode(caller.route)
        if mode == "disabled":
            raise ApiError(403, "knowledge_disabled", "knowledge is disabled for this workspace")
        if mode == "unavailable" or self.take_fault("fail_next_read_unavailable", caller.route):
            raise ApiError(503, "knowledge_unavailable", "knowledge read is unavailable; try again later")
        ref = body["ref"]
        claims = self._claims("ref", ref)
        self._check_binding("reference", claims, caller, run)
        home = str(claims.get("w"))  # the route the reference names: the caller's, once the binding holds
        current = self.store.current_revision(home, str(claims.get("i")))
        self._check_age("reference", claims)
        self._check_scope(claims, current, self.store.scope(home, caller.identity.account))
        if current is None:
            raise self._ref_error(409, "knowledge_revision_changed", "the referenced item is no longer published")
        self._check_revision(claims, current)
        offset, consumed = 0, 0
        if "cursor" in body:
            cursor = self._claims("cursor", body["cursor"])
            self._check_binding("cursor", cursor, caller, run)
            self._check_age("cursor", cursor)
            if (
                cursor.get("p") != digest(ref)
                or not isinstance(cursor.get("o"), int)
                or not isinstance(cursor.get("b"), int)
            ):
                raise self._ref_error(
                    400, "knowledge_reference_invalid", "this cursor does not continue this reference"
                )
            offset, consumed = cursor["o"], cursor["b"]
        return self._page(caller, run, ref, current, offset, consumed, int(body.get("max_bytes", READ_DEFAULT_BYTES)))

    def _cursor(self, caller: Caller, run: Run, ref: str, offset: int, consumed: int, issued_at: float) -> str:
        return self.signer.sign("cursor", _cursor_claims(caller, run, ref, offset, consumed, issued_at))

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        """The page of ``rev`` from character ``offset`` that fits ``max_bytes``, ``consumed`` content bytes into its chain."""
        doc = rev.content
        doc_bytes = len(doc.encode("utf-8"))
        remaining = self.chain_budget - consumed
        # One instant for the page: the placeholder cursor the page is sized with and the real one must
        # differ only in offsets no longer than the placeholder's, never in a timestamp of another length.
        now = self.clock.now()
        shell: dict[str, Any] = {
            "schema_version": KNOWLEDGE_SCHEMA,
            "ref": ref,
            "revision": rev.revision_id,
            "content": "",
            # Only the placeholder's length counts (it is never sent): a string of the length its
            # signed cursor would have, without the signature's HMAC.
            "next_cursor": "0"
            * self.signer.signed_length("cursor", _cursor_claims(caller, run, ref, doc_bytes, 10 * CHAIN_BUDGET, now)),
            "truncated": False,
            "budget_exhausted": False,
            "trust": "reference_only",
            "total_content_bytes": doc_bytes,
            "read_chain_max_bytes": CHAIN_BUDGET,
        }
        room = max_bytes - len(dumps(shell))
        window_text = doc[offset : offset + max(room, 0)]
        keep = self._fit_content(window_text, room, int(min(remaining, 1 << 40)))
        content = window_text[:keep]
        end, size = offset + keep, len(content.encode("utf-8"))
        at_end = end >= len(doc)
        next_size = 0 if at_end else len(doc[end].encode("utf-8"))
        exhausted = not at_end and remaining - size < next_size
        page: dict[str, Any] = {**shell, "content": content, "truncated": not at_end, "next_cursor": None}
        if exhausted:
            page["budget_exhausted"] = True
        elif not at_end:
            page["next_cursor"] = self._cursor(caller, run, ref, end, consumed + size, now)
        return page

    def _fit_content(self, text: str, room: int, remaining: int) -> int:
        """How many characters of ``text`` a page carries: its JSON-escaped UTF-8 bytes within
        ``room`` and its plain UTF-8 bytes within the ``remaining`` chain budget."""
        return fit_prefix(text, room, raw_budget=remaining)


def _cursor_claims(caller: Caller, run: Run, ref: str, offset: int, consumed: int, issued_at: float) -> dict[str, Any]:
    """What a cursor says: whose it is, the reference it continues, where and how far into its chain."""
    ident = caller.identity
    return {
        "w": caller.route,
        "h": ident.hub,
        "s": ident.session_id,
        "a": ident.account,
        "r": run.run_id,
        "p": digest(ref),
        "o": offset,
        "b": consumed,
        "t": issued_at,
    }


def binding(caller: Caller, run: Run) -> list[tuple[str, str, str]]:
    """What a reference is bound to: (claim, the caller's value, what it names), run last."""
    ident = caller.identity
    return [
        ("h", ident.hub, "Hub"),
        ("s", ident.session_id, "Agent Session"),
        ("a", ident.account, "account"),
        ("w", caller.route, "route"),
        ("r", run.run_id, "run"),
    ]
