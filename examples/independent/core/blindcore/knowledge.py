"""The Knowledge service of seed 003 (``search_knowledge``) inside the Core.

No I/O: the Core's HTTP route and control routes call these functions under the
Core's lock.  States: a knowledge base can be archived (``active: false``); an item
can be archived or unpublished; each revision is immutable; the runtime switch and
the OAuth-style scopes (``knowledge:read``) are per workspace and account.  The
audit log records the service's write operations only; the read-only tool never
writes to it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from . import ranking

if TYPE_CHECKING:  # pragma: no cover
    from .core import Item, Revision, Workspace

READ_SCOPE = "knowledge:read"
LIMIT_CHARS_MIN, LIMIT_CHARS_MAX, LIMIT_CHARS_DEFAULT = 1, 10000, 4000
MAX_RESULTS_MIN, MAX_RESULTS_MAX, MAX_RESULTS_DEFAULT = 1, 50, 10
QUERY_MAX_CHARS = 1000
ALPHA_DEFAULT = 0.5
EXCERPT_CHARS = 280
EXCERPT_LEAD = 80

STRING_PARAMS = ("query", "knowledge_base_id", "knowledge_item_id", "knowledge_revision_id", "mode")
INT_PARAMS = ("offset", "limit_chars", "max_results")
PARAMS = STRING_PARAMS + INT_PARAMS + ("alpha",)


class KnowledgeError(Exception):
    """A refusal of the tool: HTTP status, code and the envelope type."""

    def __init__(self, status: int, code: str, kind: str = "knowledge_error") -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.kind = kind


def invalid() -> KnowledgeError:
    return KnowledgeError(400, "knowledge_invalid_request")


def unavailable() -> KnowledgeError:
    # One code for absent, unauthorized, inactive and unpublished: nothing to tell apart.
    return KnowledgeError(404, "knowledge_resource_unavailable")


@dataclass
class KnowledgeState:
    runtime_enabled: bool = True
    scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)   # account -> scopes
    base_active: dict[str, bool] = field(default_factory=dict)
    audit: list[dict[str, Any]] = field(default_factory=list)

    def holds(self, account: str, scope: str) -> bool:
        held = self.scopes.get(account)
        return held is None or scope in held          # every account reads until set

    def record(self, at: float, action: str, **details: Any) -> None:
        event: dict[str, Any] = {"action": action, "at": at}
        event.update({k: v for k, v in details.items() if v is not None})
        self.audit.append(event)


# --------------------------------------------------------------------------- arguments
@dataclass
class Request:
    query: str = ""
    knowledge_base_id: str = ""
    knowledge_item_id: str = ""
    knowledge_revision_id: str = ""
    offset: int = 0
    limit_chars: int = LIMIT_CHARS_DEFAULT
    max_results: int = MAX_RESULTS_DEFAULT
    mode: str = "hybrid"
    alpha: float = ALPHA_DEFAULT


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise invalid()
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)                       # 5.0 is the integer 5 (JSON has one number type)
    raise invalid()


def parse_request(args: Any) -> Request:
    """Types and bounds; undeclared members are ignored; null means the default."""
    if not isinstance(args, dict):
        raise invalid()
    req = Request()
    for name in STRING_PARAMS:
        value = args.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise invalid()
        setattr(req, name, value)
    for name in INT_PARAMS:
        value = args.get(name)
        if value is not None:
            setattr(req, name, _as_int(value))
    alpha = args.get("alpha")
    if alpha is not None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise invalid()
        req.alpha = float(alpha)
    if req.offset < 0:
        raise invalid()
    if not LIMIT_CHARS_MIN <= req.limit_chars <= LIMIT_CHARS_MAX:
        raise invalid()
    if not MAX_RESULTS_MIN <= req.max_results <= MAX_RESULTS_MAX:
        raise invalid()
    if len(req.query) > QUERY_MAX_CHARS:
        raise invalid()
    if req.mode not in ranking.MODES:
        req.mode = "hybrid"                     # exact names only; anything else is hybrid
    req.alpha = ranking.clamp_alpha(req.alpha)
    return req


def choose_shape(req: Request) -> str:
    """'query' or 'read'; the refusals of a mixed or empty call."""
    has_query = req.query.strip() != ""
    has_item = req.knowledge_item_id != ""
    has_revision = req.knowledge_revision_id != ""
    if has_query and has_item:
        raise invalid()                                      # never mixed
    if has_revision and not has_item:
        raise KnowledgeError(400, "knowledge_item_required")  # a revision needs its item
    if has_item:
        return "read"
    if not has_query:
        raise KnowledgeError(400, "knowledge_query_required")
    return "query"


# --------------------------------------------------------------------------- visibility
def base_visible(ws: "Workspace", account: str, base_id: str) -> bool:
    if base_id not in {b for b, _ in ws.bases}:
        return False
    if not ws.knowledge.base_active.get(base_id, True):
        return False
    bases, _ = ws.scope_of(account)
    return bases is None or base_id in bases


def item_searchable(ws: "Workspace", item: "Item") -> bool:
    """Active, published, with a current revision, in an active base (any account)."""
    return (item.current is not None and item.active and item.published
            and ws.knowledge.base_active.get(item.base_id, True))


def item_visible(ws: "Workspace", account: str, item: "Item") -> bool:
    return item_searchable(ws, item) and base_visible(ws, account, item.base_id)


def revision_index(rev: "Revision") -> ranking.DocIndex:
    if rev.sk is None:
        rev.sk = ranking.index_document(rev.title, rev.content)
    return rev.sk


def base_name(ws: "Workspace", base_id: str) -> str | None:
    return next((name for b, name in ws.bases if b == base_id), None)


def reference_of(ws: "Workspace", item: "Item", rev: "Revision") -> str:
    return f"knowledge://{ws.route}/{item.base_id}/{item.id}@{rev.id}"


def source_of(ws: "Workspace", item: "Item") -> dict[str, Any]:
    return {"kind": "knowledge_base", "knowledge_base_id": item.base_id,
            "knowledge_base_name": base_name(ws, item.base_id)}


# --------------------------------------------------------------------------- the tool
def search_knowledge(ws: "Workspace", account: str, args: Any) -> dict[str, Any]:
    """The tool.  Read-only: nothing here writes to the workspace or its audit log."""
    state = ws.knowledge
    if not state.runtime_enabled:
        raise KnowledgeError(503, "knowledge_runtime_disabled", "knowledge_unavailable")
    if not state.holds(account, READ_SCOPE):
        raise KnowledgeError(403, "knowledge_scope_missing")
    req = parse_request(args)
    if choose_shape(req) == "query":
        return _query(ws, account, req)
    return _read(ws, account, req)


def _query(ws: "Workspace", account: str, req: Request) -> dict[str, Any]:
    if req.knowledge_base_id and not base_visible(ws, account, req.knowledge_base_id):
        raise unavailable()
    items: dict[str, "Item"] = {}
    for item in ws.items.values():
        if not item_visible(ws, account, item):
            continue
        if req.knowledge_base_id and item.base_id != req.knowledge_base_id:
            continue
        items[item.id] = item
    docs = {key: revision_index(item.current) for key, item in items.items()}  # type: ignore[arg-type]
    hits = ranking.rank(req.query, docs, req.mode, req.alpha)[: req.max_results]
    results = []
    for position, hit in enumerate(hits, start=1):
        item = items[hit.key]
        rev = item.current
        assert rev is not None
        results.append({
            "rank": position,
            "knowledge_base_id": item.base_id,
            "knowledge_item_id": item.id,
            "knowledge_revision_id": str(rev.id),
            "title": rev.title,
            "excerpt": excerpt(rev.content, req.query),
            "source": source_of(ws, item),
            "citation": f"{rev.title} ({item.base_id}/{item.id}, revision {rev.id})",
            "reference": reference_of(ws, item, rev),
            "scores": hit.scores,
        })
    return {"type": "knowledge_search", "mode": req.mode, "alpha": req.alpha, "results": results}


def _read(ws: "Workspace", account: str, req: Request) -> dict[str, Any]:
    item = ws.items.get(req.knowledge_item_id)
    if item is None or not item_visible(ws, account, item):
        raise unavailable()
    if req.knowledge_base_id and req.knowledge_base_id != item.base_id:
        raise unavailable()
    rev = item.current
    if req.knowledge_revision_id:
        rev = next((r for r in item.revisions if str(r.id) == req.knowledge_revision_id), None)
        if rev is None:
            raise unavailable()
    assert rev is not None
    total = len(rev.content)                                 # code points
    if req.offset > total:
        raise invalid()                                      # a window must start inside
    window = rev.content[req.offset:req.offset + req.limit_chars]
    end = req.offset + len(window)
    return {
        "type": "knowledge",
        "owner": account,
        "team": ws.route,
        "scope": {"kind": "team", "route": ws.route, "granted": READ_SCOPE},
        "knowledge_base_id": item.base_id,
        "knowledge_item_id": item.id,
        "knowledge_revision_id": str(rev.id),
        "current": rev is item.current,
        "title": rev.title,
        "content": window,
        "locator": {"unit": "code_point", "start": req.offset, "end": end},
        "source": source_of(ws, item),
        "reference": reference_of(ws, item, rev),
        "content_offset": req.offset,
        "content_limit": req.limit_chars,
        "content_total_chars": total,
        "content_truncated": end < total,
    }


def excerpt(content: str, query: str) -> str:
    """A bounded window of the content around the first query term, else its start."""
    terms = set(ranking.lex_tokens(query))
    start = 0
    for m in ranking.TOKEN_RE.finditer(content):
        if ranking.lex_token(m.group()) in terms:
            start = max(0, m.start() - EXCERPT_LEAD)
            break
    text = content[start:start + EXCERPT_CHARS]
    if start > 0:
        text = "\u2026" + text
    if start + EXCERPT_CHARS < len(content):
        text += "\u2026"
    return text


# --------------------------------------------------------------------------- control
class ControlError(Exception):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code


def control_object(raw: bytes, allowed: set[str], required: set[str]) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ControlError(400, "invalid_request")
    if not isinstance(body, dict) or set(body) - allowed or required - set(body):
        raise ControlError(400, "invalid_request")
    return body


def _text(body: dict[str, Any], key: str, max_len: int) -> str | None:
    value = body.get(key)
    if value is None and key not in body:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise ControlError(400, "invalid_request")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ControlError(400, "invalid_request")
    return value


def publish_revision(ws: "Workspace", item_id: str, raw: bytes, now: float,
                     new_revision: Callable[["Item", str, str | None, str], "Revision"]) -> dict[str, str]:
    body = control_object(raw, {"title", "content"}, {"content"})
    content = _text(body, "content", 4194304)
    title = _text(body, "title", 4096)
    item = ws.items.get(item_id)
    if item is None:
        raise ControlError(404, "item_not_found")
    assert content is not None and item.current is not None
    rev = new_revision(item, title if title is not None else item.current.title,
                       item.current.summary, content)
    item.published = True
    ws.knowledge.record(now, "knowledge.revision.published", knowledge_item_id=item.id,
                        knowledge_revision_id=str(rev.id))
    return {"item_id": item.id, "revision_id": str(rev.id)}


def set_item_state(ws: "Workspace", item_id: str, raw: bytes, now: float) -> None:
    body = control_object(raw, {"active", "published"}, set())
    if not body or not all(isinstance(v, bool) for v in body.values()):
        raise ControlError(400, "invalid_request")
    item = ws.items.get(item_id)
    if item is None:
        raise ControlError(404, "item_not_found")
    if "active" in body and body["active"] != item.active:
        item.active = body["active"]
        ws.knowledge.record(now, "knowledge.item.reactivated" if item.active else "knowledge.item.archived",
                            knowledge_item_id=item.id)
    if "published" in body and body["published"] != item.published:
        item.published = body["published"]
        ws.knowledge.record(now, "knowledge.item.published" if item.published else "knowledge.item.unpublished",
                            knowledge_item_id=item.id)


def set_base_state(ws: "Workspace", base_id: str, raw: bytes, now: float) -> None:
    body = control_object(raw, {"active"}, {"active"})
    if not isinstance(body["active"], bool):
        raise ControlError(400, "invalid_request")
    if base_id not in {b for b, _ in ws.bases}:
        raise ControlError(404, "base_not_found")
    if ws.knowledge.base_active.get(base_id, True) != body["active"]:
        ws.knowledge.base_active[base_id] = body["active"]
        ws.knowledge.record(now, "knowledge.base.reactivated" if body["active"] else "knowledge.base.archived",
                            knowledge_base_id=base_id)


def set_runtime(ws: "Workspace", raw: bytes, now: float) -> dict[str, bool]:
    body = control_object(raw, {"enabled"}, {"enabled"})
    if not isinstance(body["enabled"], bool):
        raise ControlError(400, "invalid_request")
    if ws.knowledge.runtime_enabled != body["enabled"]:
        ws.knowledge.runtime_enabled = body["enabled"]
        ws.knowledge.record(now, "knowledge.runtime.enabled" if body["enabled"] else "knowledge.runtime.disabled")
    return {"enabled": ws.knowledge.runtime_enabled}


def set_scopes(ws: "Workspace", account: str, raw: bytes, now: float) -> dict[str, list[str]]:
    body = control_object(raw, {"scopes"}, {"scopes"})
    scopes = body["scopes"]
    if (not account or not isinstance(scopes, list)
            or not all(isinstance(s, str) and len(s) <= 128 for s in scopes)
            or len(set(scopes)) != len(scopes)):
        raise ControlError(400, "invalid_request")
    ws.knowledge.scopes[account] = tuple(scopes)
    ws.knowledge.record(now, "knowledge.scopes.set", account=account)
    return {"scopes": list(scopes)}


def audit(ws: "Workspace") -> dict[str, list[dict[str, Any]]]:
    return {"events": [dict(e) for e in ws.knowledge.audit]}
