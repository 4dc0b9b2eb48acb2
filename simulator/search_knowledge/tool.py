"""The ``search_knowledge`` tool of seed 003 as plain behaviour: arguments in, a result or an
``SkError`` out, for the caller the credential resolved (a workspace and an account), never
for one an argument names.

Documented behaviour where the seed is open (schemas/CHOICES.md, "search_knowledge"):
- an argument the tool does not declare (``owner``, ``scope``, ``team``...) is refused with
  ``knowledge_invalid_request``: the owner and team context come from the credential only;
- wrong types (a string offset, a fractional limit, a boolean alpha) and a query longer than
  ``MAX_QUERY_CHARS`` are ``invalid_arguments`` (the seed's "validation failure");
- every bound is checked whatever the shape (``limit_chars`` 0 is refused in query search too);
- neither a query nor an item is ``knowledge_query_required``; a revision without an item and
  without a query is ``knowledge_item_required``; a query with any addressed ID is
  ``knowledge_invalid_request`` (mixed);
- ``mode`` is recognised after trimming and lower-casing; anything else is hybrid;
- absent, unauthorized, inactive and unpublished resources get one and the same answer (code
  and message), whichever it is, so existence does not leak;
- characters are Unicode code points: ``offset``, ``limit_chars`` and ``content_total_chars``
  count them (a combining mark is one, an astral character is one); an offset past the end
  gives an empty window, not an error;
- a query over a base the caller cannot see is ``knowledge_resource_unavailable``, as for reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.search_knowledge.ranking import Doc, Embedder, Scored, clamp_alpha, rank
from simulator.search_knowledge.store import SkState
from simulator.store import Revision, Store

TOOL = "search_knowledge"
MODES = ("hybrid", "lexical", "semantic", "rrf")
MAX_QUERY_CHARS = 2000
EXCERPT_CHARS = 280
ARGUMENTS = {
    "query": str,
    "knowledge_base_id": str,
    "knowledge_item_id": str,
    "knowledge_revision_id": str,
    "offset": int,
    "limit_chars": int,
    "max_results": int,
    "mode": str,
    "alpha": float,
}
BOUNDS = {"offset": (0, None), "limit_chars": (1, 10_000), "max_results": (1, 50)}
DEFAULTS: dict[str, Any] = {
    "query": "",
    "knowledge_base_id": "",
    "knowledge_item_id": "",
    "knowledge_revision_id": "",
    "offset": 0,
    "limit_chars": 4000,
    "max_results": 10,
    "mode": "hybrid",
    "alpha": 0.5,
}
UNAVAILABLE = "the requested knowledge resource is not available"
STATUS = {
    "knowledge_invalid_request": 400,
    "invalid_arguments": 400,
    "knowledge_query_required": 400,
    "knowledge_item_required": 400,
    "insufficient_scope": 403,
    "knowledge_resource_unavailable": 404,
    "knowledge_runtime_disabled": 503,
}


class SkError(Exception):
    """A refusal: ``envelope`` is the result type (``knowledge_unavailable`` for the runtime switch)."""

    def __init__(self, code: str, message: str, envelope: str = "knowledge_error") -> None:
        super().__init__(message)
        self.code, self.message, self.envelope = code, message, envelope

    def body(self) -> dict[str, Any]:
        return {"type": self.envelope, "error": self.code, "message": self.message}

    @property
    def status(self) -> int:
        return STATUS.get(self.code, 400)


@dataclass(frozen=True)
class Context:
    """Who asks: the team (workspace) and the owner (account) the credential resolved."""

    route: str
    account: str


class SearchKnowledge:
    """The clean tool. Miniatures (``simulator.miniatures.search_knowledge``) override one method each."""

    def __init__(self, store: Store, state: SkState) -> None:
        self.store, self.state = store, state
        state.attach(store)  # the states live beside the corpus, so a kept store keeps them

    # ------------------------------------------------------------ entry
    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        arguments = dict(arguments)
        context = self.context(context, arguments)
        if not self.may_read(context):
            raise SkError("insufficient_scope", "search_knowledge needs the knowledge:read scope")
        if not self.state.of(context.route).runtime_enabled:
            raise SkError(
                "knowledge_runtime_disabled",
                "the Knowledge runtime is switched off for this workspace; nothing else is searched instead",
                envelope="knowledge_unavailable",
            )
        args = self.parse(arguments)
        result = self.search(context, args) if args["query"] else self.read(context, args)
        self.after(context, now)
        return result

    def context(self, context: Context, arguments: dict[str, Any]) -> Context:
        """The caller's context is the credential's; arguments never change it."""
        return context

    def may_read(self, context: Context) -> bool:
        """Whether the credential holds ``knowledge:read``."""
        return self.state.can_read(context.route, context.account)

    def after(self, context: Context, now: float) -> None:
        """Read-only: nothing is written, no audit event."""

    # ------------------------------------------------------------ arguments
    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(arguments) - set(ARGUMENTS))
        if unknown:
            raise SkError(
                "knowledge_invalid_request",
                f"unknown arguments {unknown}: the owner and team come from the credential, never from arguments",
            )
        args = {**DEFAULTS, **arguments}
        for name, kind in ARGUMENTS.items():
            value = args[name]
            fits = (
                (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
                if kind is float
                else (isinstance(value, int) and not isinstance(value, bool))
                if kind is int
                else isinstance(value, str)
            )
            if not fits:
                raise SkError("invalid_arguments", f"{name} must be {'a number' if kind is float else kind.__name__}")
        if len(args["query"]) > MAX_QUERY_CHARS:
            raise SkError("invalid_arguments", f"query is longer than {MAX_QUERY_CHARS} characters")
        for name, (low, high) in BOUNDS.items():
            if args[name] < low or (high is not None and args[name] > high):
                raise SkError("knowledge_invalid_request", f"{name} must be {low}..{high if high is not None else ''}")
        query, item, revision = args["query"].strip(), args["knowledge_item_id"], args["knowledge_revision_id"]
        if query and (item or revision):
            raise SkError("knowledge_invalid_request", "choose query search or an addressed read, not both")
        if not query and not item:
            if revision:
                raise SkError("knowledge_item_required", "knowledge_revision_id needs knowledge_item_id")
            raise SkError("knowledge_query_required", "give a query, or a knowledge_item_id to read")
        args["query"] = query
        args["mode"] = self.mode(args["mode"])
        args["alpha"] = self.alpha(float(args["alpha"]))
        return args

    def mode(self, text: str) -> str:
        found = text.strip().lower()
        return found if found in MODES else "hybrid"

    def alpha(self, alpha: float) -> float:
        """The lexical weight, clamped to [0, 1]."""
        return clamp_alpha(alpha)

    # ------------------------------------------------------------ resources
    def unavailable(self, reason: str) -> SkError:
        """One answer for absent, unauthorized, inactive and unpublished (``reason`` stays inside)."""
        return SkError("knowledge_resource_unavailable", UNAVAILABLE)

    def visible_bases(self, context: Context) -> set[str]:
        state = self.state.of(context.route)
        allowed = self.store.scope(context.route, context.account).bases
        return {
            b for b in self.store.base_ids(context.route) if (allowed is None or b in allowed)
        } - state.inactive_bases

    def searchable(self, route: str) -> list[Revision]:
        """The workspace's published current revisions of active items in active bases."""
        state = self.state.of(route)
        return [
            r
            for r in self.store.first_items(route, None, 1 << 30)
            if r.base_id not in state.inactive_bases
            and r.item_id not in state.inactive_items
            and r.item_id not in state.unpublished_items
        ]

    def query_revision(self, route: str, current: Revision) -> Revision:
        """What query search ranks for an item: its current revision."""
        return current

    # ------------------------------------------------------------ query search
    def search(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        bases = self.visible_bases(context)
        narrow = args["knowledge_base_id"]
        if narrow:
            if narrow not in bases:
                raise self.unavailable("base")
            bases = {narrow}
        revisions = {r.item_id: self.query_revision(context.route, r) for r in self.searchable(context.route)}
        docs = [Doc(r.item_id, f"{r.title}\n{r.content}") for r in revisions.values()]
        candidates = {i for i, r in revisions.items() if r.base_id in bases}
        ranked = self.rank(args["mode"], args["query"], docs, candidates, _Cached(self.state, revisions), args["alpha"])
        results = [self.hit(revisions[s.item_id], s, args["mode"]) for s in ranked[: args["max_results"]]]
        out: dict[str, Any] = {"type": "knowledge_search", "mode": args["mode"], "results": results}
        if args["mode"] == "hybrid":
            out["alpha"] = args["alpha"]
        return out

    def rank(
        self, mode: str, query: str, docs: list[Doc], candidates: set[str], embedder: Embedder, alpha: float
    ) -> list[Scored]:
        """The candidates ranked in ``mode`` (``simulator.search_knowledge.ranking``)."""
        return rank(mode, query, docs, candidates, embedder, alpha)

    def hit(self, rev: Revision, scored: Scored, mode: str) -> dict[str, Any]:
        scores: dict[str, Any] = {"lexical": scored.lexical, "semantic": scored.semantic, "final": scored.final}
        if mode in ("hybrid", "rrf"):
            scores[mode] = scored.final
        if mode == "rrf":
            scores["ranks"] = dict(scored.ranks)
        return {
            "knowledge_base_id": rev.base_id,
            "knowledge_item_id": rev.item_id,
            "knowledge_revision_id": rev.revision_id,
            "title": rev.title,
            "excerpt": rev.content[:EXCERPT_CHARS],
            "source": _source(rev),
            "citation": f"{rev.title} ({rev.item_id}@{rev.revision_id})",
            "reference": _reference(rev),
            "scores": scores,
        }

    # ------------------------------------------------------------ addressed read
    def read(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        rev = self.addressed(
            context, args["knowledge_item_id"], args["knowledge_revision_id"], args["knowledge_base_id"]
        )
        content, total = self.window(rev.content, args["offset"], args["limit_chars"])
        return {
            "type": "knowledge",
            "owner": context.account,
            "team": context.route,
            "scope": "team",
            "knowledge_base_id": rev.base_id,
            "knowledge_item_id": rev.item_id,
            "knowledge_revision_id": rev.revision_id,
            "title": rev.title,
            "content": content,
            "locator": {**_reference(rev), "offset": args["offset"], "limit_chars": args["limit_chars"]},
            "source": _source(rev),
            "reference": _reference(rev),
            "content_offset": args["offset"],
            "content_limit": args["limit_chars"],
            "content_total_chars": total,
            "content_truncated": args["offset"] + len(content) < total,
        }

    def addressed(self, context: Context, item_id: str, revision_id: str, base_id: str) -> Revision:
        state = self.state.of(context.route)
        current = self.store.current_revision(context.route, item_id)
        if current is None:
            raise self.unavailable("absent item")
        if current.base_id not in self.visible_bases(context):
            raise self.unavailable("unauthorized or inactive base")
        if item_id in state.inactive_items:
            raise self.unavailable("inactive item")
        if item_id in state.unpublished_items:
            raise self.unavailable("unpublished item")
        if base_id and base_id != current.base_id:
            raise self.unavailable("item of another base")
        if not revision_id:
            return current
        found = self.store.revision(context.route, revision_id)
        if found is None or found.item_id != item_id:
            raise self.unavailable("absent revision")
        return found

    def window(self, text: str, offset: int, limit: int) -> tuple[str, int]:
        """The window and the total, in code points."""
        return text[offset : offset + limit], len(text)


class _Cached:
    """The state's embedder, with vectors cached per (immutable) revision."""

    def __init__(self, state: SkState, revisions: dict[str, Revision]) -> None:
        self.state = state
        self.by_text = {f"{r.title}\n{r.content}": r.revision_id for r in revisions.values()}

    def embed(self, text: str) -> list[float]:
        revision = self.by_text.get(text)
        return self.state.embedder.embed(text) if revision is None else self.state.vector(revision, text)


def _reference(rev: Revision) -> dict[str, Any]:
    return {
        "knowledge_base_id": rev.base_id,
        "knowledge_item_id": rev.item_id,
        "knowledge_revision_id": rev.revision_id,
    }


def _source(rev: Revision) -> dict[str, Any]:
    return {"type": "knowledge_base", "knowledge_base_id": rev.base_id, "title": rev.title}
