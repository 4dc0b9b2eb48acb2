"""State and behaviour of the blind Core (seed 000) and its test-control extension.

Everything here is transport-free: :class:`Core.handle` takes a method, a path,
headers and a raw body and returns ``(status, headers, body_bytes)``.  The HTTP
adapter in :mod:`blindcore.server` only moves bytes.
"""
from __future__ import annotations

import json
import math
import re
import secrets
import threading
import time
import uuid
from collections import Counter
from urllib.parse import parse_qs, unquote

from . import knowledge

# --------------------------------------------------------------------------- constants
CAPS_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
KNOWLEDGE_SCHEMA = "bailing.agent-knowledge.v1"
TURN_SCHEMA = "bailing.agent-turn-context.v1"
FEEDBACK_SCHEMA = "bailing.agent-feedback.v1"
TRUST = "reference_only"

SEARCH_MAX_HINTS = 3
SEARCH_MAX_BYTES = 4096
READ_DEFAULT_MAX_BYTES = 16384
READ_MIN_MAX_BYTES = 4096
READ_MAX_MAX_BYTES = 32768
REFERENCE_MAX_BYTES = 4096
READ_CHAIN_MAX_BYTES = 131072
REFERENCE_TTL_SECONDS = 300

AGENT_BODY_LIMIT = 1024 * 1024          # 413 above this (Agent API)
CONTROL_BODY_LIMIT = 512 * 1024 * 1024  # the control extension seeds big corpora
TRANSCRIPT_BODY_LIMIT = 64 * 1024

CLOCK_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the clock after a reset

ROUTE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{1,63}")
IDENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
TOKEN_RE = re.compile(r"\w+")

MODES = ("normal", "disabled", "unavailable", "partial", "legacy")
DEFAULT_LEGACY_STATUS = 501
LEGACY_BODIES = {404: {"error": "not_found"}, 405: {"error": "method_not_allowed"},
                 501: {"error": "not_implemented"}}

LIMITS = {
    "search_max_hints": SEARCH_MAX_HINTS,
    "search_max_bytes": SEARCH_MAX_BYTES,
    "read_default_max_bytes": READ_DEFAULT_MAX_BYTES,
    "read_min_max_bytes": READ_MIN_MAX_BYTES,
    "read_max_max_bytes": READ_MAX_MAX_BYTES,
    "reference_max_bytes": REFERENCE_MAX_BYTES,
    "read_chain_max_bytes": READ_CHAIN_MAX_BYTES,
    "reference_ttl_seconds": REFERENCE_TTL_SECONDS,
}

# Reference error codes and statuses.  Only `mismatch` differs from the
# reference's wire defaults (see README, "Choices").
REF_ERRORS = {
    "invalid": (400, "knowledge_reference_invalid"),
    "mismatch": (404, "knowledge_reference_not_found"),
    "expired": (410, "knowledge_reference_expired"),
    "scope": (409, "knowledge_scope_changed"),
    "revision": (409, "knowledge_revision_changed"),
}


# --------------------------------------------------------------------------- helpers
class HTTPError(Exception):
    def __init__(self, status: int, body, headers: dict | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def err(status: int, code: str, **extra) -> HTTPError:
    body = {"error": code}
    body.update(extra)
    return HTTPError(status, body)


def bad_request(code: str = "invalid_request") -> HTTPError:
    return err(400, code)


def ref_error(kind: str, operation: str = "read_knowledge") -> HTTPError:
    status, code = REF_ERRORS[kind]
    return HTTPError(status, {
        "error": code,
        "retryable": True,
        "feedback": {
            "schema_version": FEEDBACK_SCHEMA,
            "category": "knowledge_reference",
            "code": code,
            "origin": "core",
            "operation": operation,
            "dispatch": "not_dispatched",
            "retryable": True,
            "next_action": "search_knowledge",
        },
    })


def is_route(value) -> bool:
    return isinstance(value, str) and value != "auto" and ROUTE_RE.fullmatch(value) is not None


def is_ident(value) -> bool:
    return isinstance(value, str) and IDENT_RE.fullmatch(value) is not None


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def utf8_ok(value: str) -> bool:
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _reject_constant(name):
    raise ValueError(f"non-finite number {name}")


def parse_json(raw: bytes):
    """Parse a request body; any failure is a 400 invalid_request."""
    try:
        text = raw.decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise bad_request()


def object_body(raw: bytes, allowed: set, required: set) -> dict:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise bad_request()
    if set(body) - allowed or required - set(body):
        raise bad_request()
    return body


def dumps_agent(obj) -> bytes:
    """Agent API encoding: compact UTF-8; read/search sizing relies on it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def dumps_ascii(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def char_cost(ch: str) -> int:
    """Bytes one code point takes inside a JSON string encoded by dumps_agent."""
    o = ord(ch)
    if ch in '"\\\n\r\t\b\f':
        return 2
    if o < 0x20:
        return 6
    if o < 0x80:
        return 1
    if o < 0x800:
        return 2
    if o < 0x10000:
        return 3
    return 4


def utf8_len_char(ch: str) -> int:
    o = ord(ch)
    return 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4


def trim_to_cost(text: str, max_cost: int) -> str:
    """Cut `text` on a code point so its JSON cost stays within max_cost."""
    total = 0
    for i, ch in enumerate(text):
        total += char_cost(ch)
        if total > max_cost:
            cut, used = i, total - char_cost(ch)
            while cut > 0 and used + 3 > max_cost:  # room for the ellipsis
                cut -= 1
                used -= char_cost(text[cut])
            return text[:cut].rstrip() + "\u2026"
    return text


def norm_token(tok: str) -> str:
    tok = tok.casefold()
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        tok = tok[:-1]
    return tok


def tokens(text: str) -> list:
    return [norm_token(t) for t in TOKEN_RE.findall(text)]


def new_opaque(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24)


# --------------------------------------------------------------------------- state
class Revision:
    __slots__ = ("id", "item_id", "title", "summary", "content", "content_bytes",
                 "title_tokens", "body_tf", "sk")

    def __init__(self, rev_id: int, item_id: str, title: str, summary, content: str):
        self.id = rev_id
        self.item_id = item_id
        self.title = title
        self.summary = summary
        self.content = content
        self.content_bytes = len(content.encode("utf-8"))
        self.title_tokens = set(tokens(title))
        self.body_tf = Counter(tokens(content))
        if summary:
            self.body_tf.update(set(tokens(summary)))
        self.sk = None  # the seed-003 ranking index, built on first use


class Item:
    __slots__ = ("id", "base_id", "current", "revisions", "order", "active", "published")

    def __init__(self, item_id: str, base_id: str, order: int):
        self.id = item_id
        self.base_id = base_id
        self.current: Revision | None = None
        self.revisions: list = []
        self.order = order
        self.active = True      # seed 003: archived when False
        self.published = True   # seed 003: unpublished when False


class Workspace:
    def __init__(self, route: str, mode: str = "normal"):
        self.route = route
        self.mode = mode
        self.legacy_status = DEFAULT_LEGACY_STATUS
        self.bases: list = []          # [(base_id, name)]
        self.items: dict = {}          # item_id -> Item
        self.scopes: dict = {}         # account -> (set(bases), version)
        self.runs: dict = {}           # run_id -> run dict
        self.turns: dict = {}          # idempotency key -> (fingerprint, response)
        self.refs: dict = {}           # ref token -> ref record
        self.cursors: dict = {}        # cursor token -> cursor record
        self.rev_counter = 0
        self.knowledge = knowledge.KnowledgeState()   # seed 003 states

    def new_revision(self, item: "Item", title: str, summary, content: str) -> "Revision":
        rev = Revision(self.next_revision_id(), item.id, title, summary, content)
        item.current = rev
        item.revisions.append(rev)
        return rev

    def next_revision_id(self) -> int:
        self.rev_counter += 1
        return self.rev_counter

    def scope_of(self, account: str):
        return self.scopes.get(account, (None, 0))


class Core:
    """The whole server state behind one lock."""

    def __init__(self, control_token: str | None = None, clock: str = "frozen",
                 hub_url: str | None = None):
        self.control_token = control_token or None
        self.clock_mode = clock
        self.hub_url = hub_url
        self.lock = threading.RLock()
        self.reset()

    # ------------------------------------------------------------------ clock
    def reset(self):
        with self.lock:
            self.workspaces: dict = {}
            self.tokens: dict = {}       # token -> identity dict
            self.faults: list = []
            self.lost: list = []
            self.transcript: list = []
            self.clock_base = CLOCK_EPOCH
            self.clock_real_anchor = time.monotonic()
            self.route_offsets: dict = {}

    def now(self, route: str | None = None) -> float:
        t = self.clock_base
        if self.clock_mode == "real":
            t += time.monotonic() - self.clock_real_anchor
        if route is not None:
            t += self.route_offsets.get(route, 0.0)
        return t

    # ------------------------------------------------------------------ entry
    def handle(self, method: str, target: str, headers: dict, raw: bytes,
               host: str = "127.0.0.1"):
        """Return (status, extra_headers, body_bytes)."""
        path, _, query = target.partition("?")
        with self.lock:
            if path == "/_control/v1" or path.startswith("/_control/v1/"):
                status, hdrs, body = self._control(method, path[len("/_control/v1"):],
                                                   query, headers, raw, host)
                data = b"" if body is None else dumps_ascii(body)
            elif path.startswith("/agent-api/"):
                status, hdrs, body, ident = self._agent(method, path, headers, raw)
                data = dumps_agent(body)
                self._record(method, path, status, raw, ident)
            else:
                status, hdrs, data = 404, {}, dumps_agent({"error": "not_found"})
            return status, hdrs, data

    def _record(self, method, path, status, raw, ident):
        entry = {"method": method, "path": path, "status": status, "at": self.now()}
        if raw:
            body = None
            if len(raw) <= TRANSCRIPT_BODY_LIMIT:
                try:
                    body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
                except (UnicodeDecodeError, ValueError, RecursionError):
                    body = None
            entry["body"] = body
        if ident is not None:
            entry["account"] = ident["account"]
            entry["session_id"] = ident["session_id"]
        self.transcript.append(entry)

    # ================================================================== Agent API
    AGENT_ROUTES = (
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/knowledge/capabilities"), "capabilities", "GET"),
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/knowledge/search"), "search", "POST"),
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/knowledge/read"), "read", "POST"),
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/turns"), "turns", "POST"),
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/bootstrap"), "bootstrap", "GET"),
        (re.compile(r"/agent-api/v1/workspaces/([^/]+)/knowledge-service/search-knowledge"),
         "search_knowledge", "POST"),
    )
    LEGACY_ENDPOINTS = ("capabilities", "search", "read")

    def _match_agent(self, path):
        for rx, name, meth in self.AGENT_ROUTES:
            m = rx.fullmatch(path)
            if m:
                return name, meth, unquote(m.group(1))
        return None, None, None

    def _agent(self, method, path, headers, raw):
        endpoint, allowed, route = self._match_agent(path)
        ident = self._identity(headers)
        # respond_next faults answer before authentication.
        if endpoint is not None:
            for i, f in enumerate(self.faults):
                if (f["kind"] == "respond_next" and f["endpoint"] == endpoint
                        and f.get("route") in (None, route)):
                    del self.faults[i]
                    return f["status"], {}, f.get("body"), ident
        try:
            if ident is None:
                raise err(401, "unauthorized")
            if path == "/agent-api/v1/session":
                if method != "GET":
                    raise HTTPError(405, {"error": "method_not_allowed"}, {"Allow": "GET"})
                return 200, {}, self._session_of(ident), ident
            if endpoint is None:
                raise err(404, "not_found")
            if not is_route(route):
                raise err(400, "invalid_route")
            ws = self.workspaces.get(route)
            if ws is None or ident["route"] != route:
                # Another workspace's token learns nothing about this one.
                raise err(404, "route_unavailable")
            if ws.mode == "legacy" and endpoint in self.LEGACY_ENDPOINTS:
                st = ws.legacy_status
                raise HTTPError(st, dict(LEGACY_BODIES[st]))
            if method != allowed:
                raise HTTPError(405, {"error": "method_not_allowed"}, {"Allow": allowed})
            if endpoint not in ("capabilities", "bootstrap") and len(raw) > AGENT_BODY_LIMIT:
                raise err(413, "payload_too_large")
            handler = getattr(self, "_ep_" + endpoint)
            status, body = handler(ws, ident, raw)
            return status, {}, body, ident
        except HTTPError as e:
            return e.status, e.headers, e.body, ident

    def _identity(self, headers):
        auth = headers.get("authorization")
        if not auth:
            return None
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.tokens.get(token.strip())

    # ---------------------------------------------------------------- bootstrap
    @staticmethod
    def _session_of(ident: dict) -> dict:
        return {"schema_version": "bailing.agent-bootstrap.v1", "route": ident["route"],
                "hub": ident["hub"], "session_id": ident["session_id"], "account": ident["account"]}

    def _ep_bootstrap(self, ws: Workspace, ident: dict, raw: bytes) -> tuple[int, dict]:
        """Who the token is on this route: what an adapter in front of the Core needs
        to key an Agent Session's current run (vendor sibling, minimal body).
        `GET /agent-api/v1/session` answers the same without a route."""
        return 200, self._session_of(ident)

    # ---------------------------------------------------------------- search_knowledge (seed 003)
    def _ep_search_knowledge(self, ws: Workspace, ident: dict, raw: bytes) -> tuple[int, dict]:
        try:
            args = parse_json(raw) if raw else {}
            return 200, knowledge.search_knowledge(ws, ident["account"], args)
        except HTTPError:
            raise err(400, "knowledge_invalid_request")
        except knowledge.KnowledgeError as e:
            raise err(e.status, e.code, type=e.kind)

    # ---------------------------------------------------------------- capabilities
    def _ep_capabilities(self, ws, ident, raw):
        return 200, {
            "schema_version": CAPS_SCHEMA,
            "knowledge_schema_version": KNOWLEDGE_SCHEMA,
            "route": ws.route,
            "enabled": ws.mode != "disabled",
            "delivery_modes": ["inline", "on_demand"],
            "limits": dict(LIMITS),
        }

    # ---------------------------------------------------------------- turns
    TURN_FIELDS = {"client_conversation_id", "client_turn_id", "user_message_id", "user_input"}

    def _ep_turns(self, ws, ident, raw):
        legacy = ws.mode == "legacy"
        body = parse_json(raw)
        if not isinstance(body, dict):
            raise bad_request()
        allowed = set(self.TURN_FIELDS) | {"knowledge_delivery"}
        if not legacy and set(body) - allowed:
            raise bad_request()
        if self.TURN_FIELDS - set(body):
            raise bad_request()
        for k in ("client_conversation_id", "client_turn_id", "user_message_id"):
            if not is_ident(body[k]):
                raise bad_request()
        ui = body["user_input"]
        if not isinstance(ui, str) or not (1 <= len(ui) <= 64000):
            raise bad_request()
        delivery = "inline"
        if not legacy and "knowledge_delivery" in body:
            delivery = body["knowledge_delivery"]
            if delivery not in ("inline", "on_demand"):
                raise bad_request()
        # Idempotency: key = Agent Session + route + the three ids; the
        # fingerprint keeps member order (see README, Choices).
        key = (ident["hub"], ident["session_id"], ident["account"], ws.route,
               body["client_conversation_id"], body["client_turn_id"], body["user_message_id"])
        fingerprint = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
        committed = ws.turns.get(key)
        if committed is not None:
            if committed[0] != fingerprint:
                raise err(409, "turn_conflict")
            return self._deliver_turn(ws, committed[1])
        if delivery == "on_demand" and ws.mode == "disabled":
            raise err(403, "knowledge_disabled")
        run_id = str(uuid.uuid4())
        run = {"id": run_id, "hub": ident["hub"], "session_id": ident["session_id"],
               "account": ident["account"], "route": ws.route, "delivery": delivery}
        ws.runs[run_id] = run
        context = {"knowledge": [], "knowledge_refs": []}
        if delivery == "on_demand":
            status, hits = self._search_hits(ws, ident, ui, SEARCH_MAX_HINTS)
            hints = self._fit_hints(ws, ident, run, hits, overhead_probe={
                "schema_version": KNOWLEDGE_SCHEMA, "mode": "on_demand",
                "status": status, "hints": [], "trust": TRUST})
            context["knowledge_delivery"] = {
                "schema_version": KNOWLEDGE_SCHEMA, "mode": "on_demand",
                "status": status, "hints": hints, "trust": TRUST}
        elif ws.mode in ("normal", "partial", "legacy"):
            _, hits = self._search_hits(ws, ident, ui, SEARCH_MAX_HINTS)
            for item in hits:
                rev = item.current
                context["knowledge"].append({"title": rev.title, "content": rev.content})
                context["knowledge_refs"].append(
                    {"title": rev.title, "item_id": item.id, "revision": rev.id})
        context["governance"] = {"knowledge_trust": TRUST}
        response = {"schema_version": TURN_SCHEMA, "run_id": run_id, "context": context}
        ws.turns[key] = (fingerprint, response)
        return self._deliver_turn(ws, response)

    def _deliver_turn(self, ws, response):
        for i, f in enumerate(self.faults):
            if f["kind"] == "lose_next_turn_response" and f.get("route") in (None, ws.route):
                del self.faults[i]
                self.lost.append({"route": ws.route, "status": 200, "body": response})
                raise err(502, "response_lost")
        return 200, response

    # ---------------------------------------------------------------- search
    def _run_of(self, ws, ident, run_id):
        if not isinstance(run_id, str) or UUID_RE.fullmatch(run_id) is None:
            raise bad_request()
        run = ws.runs.get(run_id.lower()) or ws.runs.get(run_id)
        if run is None or (run["hub"], run["session_id"], run["account"]) != (
                ident["hub"], ident["session_id"], ident["account"]):
            raise err(404, "run_not_found")
        return run

    def _ep_search(self, ws, ident, raw):
        body = object_body(raw, {"query", "run_id", "limit"}, {"query", "run_id"})
        q = body["query"]
        if not isinstance(q, str) or not (1 <= len(q) <= 1000):
            raise bad_request()
        limit = body.get("limit", SEARCH_MAX_HINTS)
        if not is_int(limit) or not (1 <= limit <= SEARCH_MAX_HINTS):
            raise bad_request()  # a larger limit is refused, not clamped
        run = self._run_of(ws, ident, body["run_id"])
        envelope = {"schema_version": KNOWLEDGE_SCHEMA, "status": "ok", "hints": [], "trust": TRUST}
        for i, f in enumerate(self.faults):
            if f["kind"] == "fail_next_search_unavailable" and f.get("route") in (None, ws.route):
                del self.faults[i]
                envelope["status"] = "unavailable"
                return 200, envelope
        status, hits = self._search_hits(ws, ident, q, limit)
        envelope["status"] = status
        envelope["hints"] = self._fit_hints(ws, ident, run, hits, overhead_probe=dict(envelope))
        return 200, envelope

    def _visible_items(self, ws, ident):
        bases, _ = ws.scope_of(ident["account"])
        items = [it for it in ws.items.values() if knowledge.item_searchable(ws, it)]
        if bases is not None:
            items = [it for it in items if it.base_id in bases]
        if ws.mode == "partial":
            items = [it for it in items if it.order % 2 == 0]
        return items

    def _search_hits(self, ws, ident, query, limit):
        """(status, items) ranked by this Core's own scoring."""
        if ws.mode == "disabled":
            return "disabled", []
        if ws.mode == "unavailable":
            return "unavailable", []
        terms = set(tokens(query))
        scored = []
        for item in self._visible_items(ws, ident):
            rev = item.current
            score = 0.0
            for t in terms:
                if t in rev.title_tokens:
                    score += 2.0
                tf = rev.body_tf.get(t, 0)
                if tf:
                    score += 1.0 + math.log1p(tf) / 4.0
            if score > 0:
                scored.append((-score, rev.content_bytes, item.id, item))
        scored.sort(key=lambda s: s[:3])
        status = "partial" if ws.mode == "partial" else "ok"
        return status, [s[3] for s in scored[:min(limit, SEARCH_MAX_HINTS)]]

    def _summary_of(self, rev):
        content = rev.content
        summary = rev.summary
        if not summary:
            first = content.strip().split("\n", 1)[0]
            cap = min(160, len(content) // 2)
            summary = first[:cap]
            if len(summary) < len(content):
                summary = summary.rstrip() + "\u2026" if summary else ""
        if content and content in summary:
            summary = content[:len(content) // 2] + "\u2026" if len(content) > 1 else ""
        return summary

    def _fit_hints(self, ws, ident, run, items, overhead_probe):
        """Mint refs and trim hints so the whole JSON stays within 4096 bytes."""
        refs = [self._mint_ref(ws, ident, run, item) for item in items]
        title_cap, summary_cap = 400, 700
        while True:
            hints = [{"title": trim_to_cost(item.current.title, title_cap),
                      "summary": trim_to_cost(self._summary_of(item.current), summary_cap),
                      "ref": ref}
                     for item, ref in zip(items, refs)]
            probe = dict(overhead_probe)
            probe["hints"] = hints
            if len(dumps_agent(probe)) <= SEARCH_MAX_BYTES or summary_cap < 8:
                return hints
            title_cap, summary_cap = title_cap // 2, summary_cap // 2

    def _mint_ref(self, ws, ident, run, item):
        token = new_opaque("kr_")
        ws.refs[token] = {
            "token": token, "hub": ident["hub"], "session_id": ident["session_id"],
            "account": ident["account"], "route": ws.route, "run_id": run["id"],
            "item_id": item.id, "revision_id": item.current.id,
            "scope_version": ws.scope_of(ident["account"])[1],
            "issued_at": self.now(ws.route),
        }
        return token

    # ---------------------------------------------------------------- read
    def _ep_read(self, ws, ident, raw):
        body = object_body(raw, {"ref", "run_id", "cursor", "max_bytes"}, {"ref", "run_id"})
        ref_tok = body["ref"]
        cur_tok = body.get("cursor")
        if not isinstance(ref_tok, str) or ("cursor" in body and not isinstance(cur_tok, str)):
            raise bad_request()
        max_bytes = body.get("max_bytes", READ_DEFAULT_MAX_BYTES)
        if not is_int(max_bytes):
            raise bad_request()
        max_bytes = max(READ_MIN_MAX_BYTES, min(READ_MAX_MAX_BYTES, max_bytes))  # clamp
        run = self._run_of(ws, ident, body["run_id"])
        if ws.mode == "disabled":
            raise err(403, "knowledge_disabled")
        if ws.mode == "unavailable":
            raise err(503, "knowledge_unavailable")
        for i, f in enumerate(self.faults):
            if f["kind"] == "fail_next_read_unavailable" and f.get("route") in (None, ws.route):
                del self.faults[i]
                raise err(503, "knowledge_unavailable")
        now = self.now(ws.route)
        ref = self._check_token(ws.refs, ref_tok, ident, run, now, check_expiry=cur_tok is None)
        if cur_tok is None:
            chain = {"ref": ref, "offset": 0, "consumed": 0}
            self._check_current(ws, ident, ref)
        else:
            cursor = self._check_token(ws.cursors, cur_tok, ident, run, now, check_expiry=True)
            # The cursor names its own chain; the ref beside it only has to be
            # a valid reference of this caller and run.
            chain = {"ref": ws.refs[cursor["ref_token"]], "offset": cursor["offset"],
                     "consumed": cursor["consumed"]}
            self._check_current(ws, ident, cursor)
        return 200, self._page(ws, ident, run, chain, max_bytes)

    def _check_token(self, store, tok, ident, run, now, check_expiry):
        if not tok or len(tok.encode("utf-8", "surrogatepass")) > REFERENCE_MAX_BYTES:
            raise ref_error("invalid")
        rec = store.get(tok)
        if rec is None:
            raise ref_error("invalid")
        if (rec["hub"], rec["session_id"], rec["account"], rec["route"], rec["run_id"]) != (
                ident["hub"], ident["session_id"], ident["account"], run["route"], run["id"]):
            raise ref_error("mismatch")
        if check_expiry and now - rec["issued_at"] > REFERENCE_TTL_SECONDS:
            raise ref_error("expired")
        return rec

    def _check_current(self, ws, ident, rec):
        if ws.scope_of(ident["account"])[1] != rec["scope_version"]:
            raise ref_error("scope")
        item = ws.items.get(rec["item_id"])
        if (item is None or item.current is None or item.current.id != rec["revision_id"]
                or not knowledge.item_searchable(ws, item)):
            raise ref_error("revision")
        bases, _ = ws.scope_of(ident["account"])
        if bases is not None and item.base_id not in bases:
            raise ref_error("scope")

    def _page(self, ws, ident, run, chain, max_bytes):
        ref = chain["ref"]
        item = ws.items[ref["item_id"]]
        rev = item.current
        offset, consumed = chain["offset"], chain["consumed"]
        text = rev.content
        remaining_budget = READ_CHAIN_MAX_BYTES - consumed
        cursor_tok = new_opaque("kc_")

        def envelope(content, next_cursor, truncated, exhausted):
            env = {"schema_version": KNOWLEDGE_SCHEMA, "ref": ref["token"], "revision": rev.id,
                   "content": content, "next_cursor": next_cursor, "truncated": truncated}
            if exhausted:
                env["budget_exhausted"] = True
            env.update({"trust": TRUST, "total_content_bytes": rev.content_bytes,
                        "read_chain_max_bytes": READ_CHAIN_MAX_BYTES})
            return env

        def cap(env):
            return max_bytes - len(dumps_agent(env))

        def fit(json_cap):
            """Take code points from offset; returns (end_index, why)."""
            used_json = used_bytes = 0
            i = offset
            n = len(text)
            while i < n:
                ch = text[i]
                b = utf8_len_char(ch)
                if used_bytes + b > remaining_budget:
                    return i, "budget"
                c = char_cost(ch)
                if used_json + c > json_cap:
                    return i, "json"
                used_json += c
                used_bytes += b
                i += 1
            return i, "end"

        # 1. the rest fits on a last page
        end, why = fit(cap(envelope("", None, False, False)))
        if why == "end":
            return envelope(text[offset:end], None, False, False)
        # 2. the budget ends the chain on this page
        end_b, why_b = fit(cap(envelope("", None, True, True)))
        if why_b == "budget":
            return envelope(text[offset:end_b], None, True, True)
        # 3. a middle page; never reach the budget on a page that carries a cursor
        end_m, why_m = fit(cap(envelope("", cursor_tok, True, False)))
        end = end_b if why_m == "budget" else end_m
        # Different page-cutting strategy: prefer to end a page after whitespace
        # found in its last 64 code points.
        for j in range(end - 1, max(offset, end - 64) - 1, -1):
            if text[j] in " \n\t" and j + 1 > offset:
                end = j + 1
                break
        if end <= offset:  # cannot happen with max_bytes >= 4096, kept as a guard
            end = offset + 1
        page_bytes = len(text[offset:end].encode("utf-8"))
        ws.cursors[cursor_tok] = {
            "token": cursor_tok, "ref_token": ref["token"], "hub": ident["hub"],
            "session_id": ident["session_id"], "account": ident["account"],
            "route": ws.route, "run_id": run["id"], "item_id": item.id,
            "revision_id": rev.id, "scope_version": ref["scope_version"],
            "offset": end, "consumed": consumed + page_bytes,
            "issued_at": self.now(ws.route),
        }
        return envelope(text[offset:end], cursor_tok, True, False)

    # ================================================================== control
    CONTROL_ROUTES = (
        (re.compile(r"/reset"), {"POST": "reset"}),
        (re.compile(r"/workspaces"), {"POST": "create_workspace"}),
        (re.compile(r"/workspaces/([^/]+)"), {"DELETE": "delete_workspace"}),
        (re.compile(r"/workspaces/([^/]+)/corpus"), {"PUT": "corpus"}),
        (re.compile(r"/workspaces/([^/]+)/items/([^/]+)/revisions"), {"POST": "publish"}),
        (re.compile(r"/workspaces/([^/]+)/scopes/([^/]+)"), {"PUT": "scope"}),
        (re.compile(r"/workspaces/([^/]+)/mode"), {"PUT": "mode"}),
        (re.compile(r"/clock"), {"GET": "get_clock", "PUT": "set_clock"}),
        (re.compile(r"/clock/advance"), {"POST": "advance"}),
        (re.compile(r"/identities"), {"POST": "identity"}),
        (re.compile(r"/faults"), {"POST": "fault"}),
        (re.compile(r"/faults/lost"), {"GET": "lost"}),
        (re.compile(r"/transcript"), {"GET": "transcript"}),
        # seed 003 Knowledge service (control-openapi.yaml, feature `knowledge`)
        (re.compile(r"/workspaces/([^/]+)/knowledge/items/([^/]+)/revisions"), {"POST": "k_publish"}),
        (re.compile(r"/workspaces/([^/]+)/knowledge/items/([^/]+)/state"), {"PUT": "k_item_state"}),
        (re.compile(r"/workspaces/([^/]+)/knowledge/bases/([^/]+)/state"), {"PUT": "k_base_state"}),
        (re.compile(r"/workspaces/([^/]+)/knowledge/runtime"), {"PUT": "k_runtime"}),
        (re.compile(r"/workspaces/([^/]+)/knowledge/scopes/([^/]+)"), {"PUT": "k_scopes"}),
        (re.compile(r"/workspaces/([^/]+)/knowledge/audit"), {"GET": "k_audit"}),
    )

    def _control(self, method, sub, query, headers, raw, host):
        if not self.control_token:
            return 404, {}, {"error": "not_found"}
        auth = headers.get("authorization", "")
        scheme, _, tok = auth.strip().partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
                tok.strip().encode(), self.control_token.encode()):
            return 401, {}, {"error": "unauthorized"}
        try:
            for rx, methods in self.CONTROL_ROUTES:
                m = rx.fullmatch(sub)
                if m:
                    if method not in methods:
                        raise HTTPError(405, {"error": "method_not_allowed"},
                                        {"Allow": ", ".join(methods)})
                    if len(raw) > CONTROL_BODY_LIMIT:
                        raise err(413, "payload_too_large")
                    args = [unquote(g) for g in m.groups()]
                    fn = getattr(self, "_c_" + methods[method])
                    status, body = fn(*args, raw=raw, query=query, host=host)
                    return status, {}, body
            raise err(404, "not_found")
        except HTTPError as e:
            return e.status, e.headers, e.body
        except knowledge.ControlError as e:
            return e.status, {}, {"error": e.code}

    def _ws(self, route) -> Workspace:
        if not is_route(route):
            raise err(400, "invalid_route")
        ws = self.workspaces.get(route)
        if ws is None:
            raise err(404, "route_unavailable")
        return ws

    def _c_reset(self, raw, query, host):
        self.reset()
        return 204, None

    def _c_create_workspace(self, raw, query, host):
        body = object_body(raw, {"route", "mode"}, {"route"})
        if not is_route(body["route"]):
            raise err(400, "invalid_route")
        mode = body.get("mode", "normal")
        if mode not in MODES:
            raise bad_request()
        if body["route"] in self.workspaces:
            raise err(409, "workspace_exists")
        self.workspaces[body["route"]] = Workspace(body["route"], mode)
        return 201, {"route": body["route"], "mode": mode}

    def _c_delete_workspace(self, route, raw, query, host):
        ws = self._ws(route)
        del self.workspaces[ws.route]
        for tok in [t for t, i in self.tokens.items() if i["route"] == route]:
            del self.tokens[tok]
        self.route_offsets.pop(route, None)
        return 204, None

    @staticmethod
    def _text(d, key, max_len, required=False):
        if key not in d:
            if required:
                raise bad_request()
            return None
        v = d[key]
        if not isinstance(v, str) or len(v) > max_len or not utf8_ok(v):
            raise bad_request()
        return v

    def _c_corpus(self, route, raw, query, host):
        ws = self._ws(route)
        body = object_body(raw, {"bases"}, {"bases"})
        bases = body["bases"]
        if not isinstance(bases, list) or len(bases) > 1000:
            raise bad_request()
        parsed, base_ids, item_ids = [], set(), set()
        for b in bases:
            if not isinstance(b, dict) or set(b) - {"id", "name", "items"} or {"id", "items"} - set(b):
                raise bad_request()
            if not is_ident(b["id"]) or b["id"] in base_ids:
                raise bad_request()
            base_ids.add(b["id"])
            name = self._text(b, "name", 256)
            if not isinstance(b["items"], list) or len(b["items"]) > 100000:
                raise bad_request()
            items = []
            for it in b["items"]:
                if (not isinstance(it, dict) or set(it) - {"id", "title", "summary", "content"}
                        or {"id", "title", "content"} - set(it)):
                    raise bad_request()
                if not is_ident(it["id"]) or it["id"] in item_ids:
                    raise bad_request()
                item_ids.add(it["id"])
                items.append((it["id"], self._text(it, "title", 4096, True),
                              self._text(it, "summary", 16384),
                              self._text(it, "content", 4194304, True)))
            parsed.append((b["id"], name, items))
        ws.bases, ws.items = [], {}
        ws.knowledge.base_active = {}
        receipt, order = {}, 0
        for base_id, name, items in parsed:
            ws.bases.append((base_id, name))
            for item_id, title, summary, content in items:
                item = Item(item_id, base_id, order)
                order += 1
                rev = Revision(ws.next_revision_id(), item_id, title, summary, content)
                item.current = rev
                item.revisions.append(rev)
                ws.items[item_id] = item
                receipt[item_id] = str(rev.id)
        ws.knowledge.record(self.now(ws.route), "knowledge.corpus.replaced",
                            bases=len(parsed), items=len(receipt))
        return 200, {"items": receipt}

    def _c_publish(self, route, item_id, raw, query, host):
        ws = self._ws(route)
        body = object_body(raw, {"title", "summary", "content"}, {"content"})
        content = self._text(body, "content", 4194304, True)
        title = self._text(body, "title", 4096)
        summary = self._text(body, "summary", 16384)
        item = ws.items.get(item_id)
        if item is None:
            raise err(404, "item_not_found")
        prev = item.current
        rev = Revision(ws.next_revision_id(), item_id,
                       title if title is not None else prev.title,
                       summary if summary is not None else prev.summary,
                       content)
        item.current = rev
        item.revisions.append(rev)
        ws.knowledge.record(self.now(ws.route), "knowledge.revision.published",
                            knowledge_item_id=item_id, knowledge_revision_id=str(rev.id))
        return 201, {"item_id": item_id, "revision_id": str(rev.id)}

    def _c_scope(self, route, account, raw, query, host):
        ws = self._ws(route)
        if not account:
            raise bad_request()
        body = object_body(raw, {"bases", "version"}, {"bases"})
        bases = body["bases"]
        if (not isinstance(bases, list) or not all(isinstance(b, str) for b in bases)
                or len(set(bases)) != len(bases)):
            raise bad_request()
        version = ws.scope_of(account)[1] + 1
        ws.scopes[account] = (set(bases), version)
        return 200, {"bases": bases, "version": version}

    def _c_mode(self, route, raw, query, host):
        ws = self._ws(route)
        body = object_body(raw, {"mode", "legacy_status"}, {"mode"})
        if body["mode"] not in MODES:
            raise bad_request()
        if "legacy_status" in body and (not is_int(body["legacy_status"])
                                        or body["legacy_status"] not in LEGACY_BODIES):
            raise bad_request()
        ws.mode = body["mode"]
        ws.legacy_status = body.get("legacy_status", DEFAULT_LEGACY_STATUS)
        out = {"mode": ws.mode}
        if ws.mode == "legacy":
            out["legacy_status"] = ws.legacy_status
        return 200, out

    def _c_get_clock(self, raw, query, host):
        return 200, {"now": self.now()}

    def _c_set_clock(self, raw, query, host):
        body = object_body(raw, {"now"}, {"now"})
        if not is_number(body["now"]):
            raise bad_request()
        self.clock_base = float(body["now"])
        self.clock_real_anchor = time.monotonic()
        return 200, {"now": self.now()}

    def _c_advance(self, raw, query, host):
        body = object_body(raw, {"seconds", "routes"}, {"seconds"})
        s = body["seconds"]
        if not is_number(s) or not (0 <= s <= 31536000):
            raise bad_request()
        routes = body.get("routes")
        if routes is None:
            self.clock_base += s
            return 200, {"now": self.now()}
        if (not isinstance(routes, list) or len(routes) > 10000
                or not all(is_route(r) for r in routes)):
            raise bad_request()
        for r in routes:
            self.route_offsets[r] = self.route_offsets.get(r, 0.0) + s
        return 200, {"now": self.now(routes[0] if routes else None)}

    def _c_identity(self, raw, query, host):
        body = object_body(raw, {"account", "route", "hub", "session_id"}, {"account", "route"})
        if not is_ident(body["account"]):
            raise bad_request()
        if not is_route(body["route"]):
            raise err(400, "invalid_route")
        hub = body.get("hub", self.hub_url or f"http://{host}")
        if not isinstance(hub, str) or not hub or len(hub) > 512:
            raise bad_request()
        sid = body.get("session_id")
        if sid is None:
            sid = str(uuid.uuid4())
        elif not isinstance(sid, str) or UUID_RE.fullmatch(sid) is None:
            raise bad_request()
        sid = sid.lower()
        self._ws(body["route"])
        token = "bha_" + secrets.token_urlsafe(36)
        ident = {"account": body["account"], "route": body["route"], "hub": hub, "session_id": sid}
        self.tokens[token] = ident
        return 201, dict(ident, token=token)

    FAULT_KINDS = ("lose_next_turn_response", "fail_next_search_unavailable",
                   "fail_next_read_unavailable", "respond_next")

    def _c_fault(self, raw, query, host):
        body = object_body(raw, {"kind", "route", "endpoint", "status", "body"}, {"kind"})
        if body["kind"] not in self.FAULT_KINDS:
            raise bad_request()
        if "route" in body and not is_route(body["route"]):
            raise err(400, "invalid_route")
        if body["kind"] == "respond_next":
            if body.get("endpoint") not in ("capabilities", "search", "read", "turns"):
                raise bad_request()
            st = body.get("status")
            if not is_int(st) or not (200 <= st <= 599):
                raise bad_request()
        elif {"endpoint", "status", "body"} & set(body):
            raise bad_request()
        self.faults.append(body)
        return 201, body

    def _c_lost(self, raw, query, host):
        route = (parse_qs(query).get("route") or [None])[0]
        if route is not None and not is_route(route):
            raise err(400, "invalid_route")
        out = [r for r in self.lost if route is None or r["route"] == route]
        return 200, {"responses": out}

    def _c_transcript(self, raw, query, host):
        return 200, {"requests": list(self.transcript)}

    # ---------------------------------------------------------------- seed 003 control
    def _c_k_publish(self, route: str, item_id: str, raw: bytes, query: str, host: str) -> tuple[int, dict]:
        ws = self._ws(route)
        return 201, knowledge.publish_revision(ws, item_id, raw, self.now(route), ws.new_revision)

    def _c_k_item_state(self, route: str, item_id: str, raw: bytes, query: str, host: str) -> tuple[int, None]:
        ws = self._ws(route)
        knowledge.set_item_state(ws, item_id, raw, self.now(route))
        return 204, None

    def _c_k_base_state(self, route: str, base_id: str, raw: bytes, query: str, host: str) -> tuple[int, None]:
        ws = self._ws(route)
        knowledge.set_base_state(ws, base_id, raw, self.now(route))
        return 204, None

    def _c_k_runtime(self, route: str, raw: bytes, query: str, host: str) -> tuple[int, dict]:
        ws = self._ws(route)
        return 200, knowledge.set_runtime(ws, raw, self.now(route))

    def _c_k_scopes(self, route: str, account: str, raw: bytes, query: str, host: str) -> tuple[int, dict]:
        ws = self._ws(route)
        return 200, knowledge.set_scopes(ws, account, raw, self.now(route))

    def _c_k_audit(self, route: str, raw: bytes, query: str, host: str) -> tuple[int, dict]:
        return 200, knowledge.audit(self._ws(route))
