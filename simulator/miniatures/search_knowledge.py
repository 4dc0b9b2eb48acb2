"""Quirks of the ``search_knowledge`` tool (seed 003): each a small subclass of the clean
``SearchKnowledge`` overriding one behaviour (``sk_class`` mixes the named ones in, as
``compose`` does for the Core). The Core, the app and the MCP adapter stay clean."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from simulator.search_knowledge.ranking import Doc, Embedder, Scored
from simulator.search_knowledge.tool import Context, SearchKnowledge, SkError
from simulator.store import Revision


class SkAlphaInverted(SearchKnowledge):
    """alpha is taken as the semantic weight (Weaviate's convention), not the lexical one."""

    def alpha(self, alpha: float) -> float:
        return 1.0 - super().alpha(alpha)


class SkSemanticWeightTwoMinusAlpha(SearchKnowledge):
    """The semantic weight is 2 - alpha: alpha * lexical + (2 - alpha) * semantic ranks as the
    seed's formula at alpha / 2 (scores halved), so that is the alpha the clean ranking gets."""

    def alpha(self, alpha: float) -> float:
        return super().alpha(alpha) / 2


class SkAlphaUnclamped(SearchKnowledge):
    """alpha outside [0, 1] is used as given: alpha 3 weighs semantic by -2."""

    def alpha(self, alpha: float) -> float:
        return alpha


class SkModeRefused(SearchKnowledge):
    """An unrecognised mode is refused instead of becoming hybrid."""

    def mode(self, text: str) -> str:
        found = super().mode(text)
        if found != text.strip().lower():
            raise SkError("knowledge_invalid_request", f"unknown mode {text!r}")
        return found


class SkQueryHistorical(SearchKnowledge):
    """Query search ranks and returns an item's first revision, not its current one."""

    def query_revision(self, route: str, current: Revision) -> Revision:
        history = self.state.of(route).history.get(current.item_id)
        first = self.store.revision(route, history[0]) if history else None
        return first or current


class SkPinnedRevisionSkipsState(SearchKnowledge):
    """A read that names a revision takes it as immutable and always readable: the item's state
    and the caller's access are checked only when the current revision is read."""

    def addressed(self, context: Context, item_id: str, revision_id: str, base_id: str) -> Revision:
        if not revision_id:
            return super().addressed(context, item_id, revision_id, base_id)
        found = self.store.revision(context.route, revision_id)
        if found is None or found.item_id != item_id or (base_id and base_id != found.base_id):
            raise self.unavailable("absent revision")
        return found


class SkWindowInBytes(SearchKnowledge):
    """offset, limit_chars and content_total_chars count UTF-8 bytes (cut characters are dropped)."""

    def window(self, text: str, offset: int, limit: int) -> tuple[str, int]:
        raw = text.encode("utf-8")
        return raw[offset : offset + limit].decode("utf-8", errors="ignore"), len(raw)


LEAKED_CODES = {
    "absent item": "knowledge_item_not_found",
    "absent revision": "knowledge_revision_not_found",
    "unauthorized or inactive base": "knowledge_forbidden",
    "inactive item": "knowledge_item_archived",
    "unpublished item": "knowledge_item_unpublished",
}


class SkExistenceLeak(SearchKnowledge):
    """Absent, unauthorized, inactive and unpublished resources get different errors."""

    def unavailable(self, reason: str) -> SkError:
        code = LEAKED_CODES.get(reason)
        return SkError(code, f"unavailable: {reason}") if code else super().unavailable(reason)


class SkOwnerArgumentHonoured(SearchKnowledge):
    """An ``owner`` argument chooses whose knowledge is searched and read."""

    def context(self, context: Context, arguments: dict[str, Any]) -> Context:
        owner = arguments.pop("owner", None)
        return Context(context.route, str(owner)) if isinstance(owner, str) and owner else context


class SkAuditWritten(SearchKnowledge):
    """Every call writes a Knowledge audit event."""

    def after(self, context: Context, now: float) -> None:
        self.state.audit(context.route, "knowledge.searched", now, account=context.account)


class SkOtherChoices(SearchKnowledge):
    """Seed-allowed, not this project's choices: excerpts of up to 3000 characters, a citation and no
    source member, a wording of its own per unavailable cause (the code stays one), and undeclared
    arguments refused before the runtime switch is looked at."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        self.parse(dict(arguments))  # an undeclared or malformed argument is refused first, even with the runtime off
        return super().call(context, arguments, now)

    def unavailable(self, reason: str) -> SkError:
        return SkError(
            "knowledge_resource_unavailable", f"nothing to read here ({len(reason)}/{sum(map(ord, reason)) % 89})"
        )

    def hit(self, rev: Revision, scored: Any, mode: str) -> dict[str, Any]:
        out = super().hit(rev, scored, mode)
        out.pop("source", None)
        out["excerpt"] = rev.content[:3000]
        return out


class SkExcerptWholeContent(SearchKnowledge):
    """A query result's excerpt is the revision's whole content, however long."""

    def hit(self, rev: Revision, scored: Any, mode: str) -> dict[str, Any]:
        return {**super().hit(rev, scored, mode), "excerpt": rev.content}


class SkScoresRounded(SearchKnowledge):
    """Seed-allowed: every score rounded to six decimals (modes are judged by rank)."""

    def hit(self, rev: Revision, scored: Any, mode: str) -> dict[str, Any]:
        out = super().hit(rev, scored, mode)
        out["scores"] = {k: round(v, 6) if isinstance(v, float) else v for k, v in out["scores"].items()}
        return out


class SkSemanticIsLexical(SearchKnowledge):
    """Semantic mode ranks by BM25: it finds exactly what lexical mode finds."""

    def rank(
        self, mode: str, query: str, docs: list[Doc], candidates: set[str], embedder: Embedder, alpha: float
    ) -> list[Scored]:
        return super().rank("lexical" if mode == "semantic" else mode, query, docs, candidates, embedder, alpha)


class SkLexicalIsSemantic(SearchKnowledge):
    """Lexical mode ranks by the embedding: it finds documents that share no term with the query."""

    def rank(
        self, mode: str, query: str, docs: list[Doc], candidates: set[str], embedder: Embedder, alpha: float
    ) -> list[Scored]:
        return super().rank("semantic" if mode == "lexical" else mode, query, docs, candidates, embedder, alpha)


class SkHybridLexicalOnly(SearchKnowledge):
    """Hybrid mode ranks by BM25 alone, whatever alpha says: semantic evidence is ignored."""

    def rank(
        self, mode: str, query: str, docs: list[Doc], candidates: set[str], embedder: Embedder, alpha: float
    ) -> list[Scored]:
        return super().rank("lexical" if mode == "hybrid" else mode, query, docs, candidates, embedder, alpha)


class SkHitStaleMembers(SearchKnowledge):
    """A query result names the current revision but carries the previous revision's title and excerpt."""

    def search(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        out = super().search(context, args)
        for hit in out["results"]:
            history = self.state.of(context.route).history.get(hit["knowledge_item_id"], [])
            before = self.store.revision(context.route, history[-2]) if len(history) > 1 else None
            if before is not None:
                hit["title"], hit["excerpt"] = before.title, before.content[:280]
        return out


class SkReadNeedsRevision(SearchKnowledge):
    """An addressed read without knowledge_revision_id is refused: only pinned revisions can be read."""

    def read(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        if not args["knowledge_revision_id"]:
            raise SkError("knowledge_invalid_request", "knowledge_revision_id is required for a read")
        return super().read(context, args)


class SkRevisionWithoutItem(SearchKnowledge):
    """knowledge_revision_id alone (no item, no query) reads that revision."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        revision = arguments.get("knowledge_revision_id")
        if (
            isinstance(revision, str)
            and revision
            and not arguments.get("knowledge_item_id")
            and not arguments.get("query")
        ):
            found = self.store.revision(context.route, revision)
            arguments = {**arguments, "knowledge_item_id": found.item_id if found else "sk-no-such-item"}
        return super().call(context, arguments, now)


class SkMixedQueryWins(SearchKnowledge):
    """A query mixed with addressed IDs is searched; the IDs are ignored."""

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        query = arguments.get("query")
        if isinstance(query, str) and query.strip():
            arguments = {k: v for k, v in arguments.items() if k not in ("knowledge_item_id", "knowledge_revision_id")}
        return super().parse(arguments)


class SkScopeUnchecked(SearchKnowledge):
    """Any authenticated caller searches and reads, with or without knowledge:read."""

    def may_read(self, context: Context) -> bool:
        return True


class SkHiddenRefused(SearchKnowledge):
    """A hidden tool is taken for an unavailable one: every call is refused."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        raise SkError("tool_not_listed", "search_knowledge is not in this session's tool list")


class SkBaseFilterIgnored(SearchKnowledge):
    """knowledge_base_id is ignored by query search: every visible base is searched."""

    def search(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        return super().search(context, {**args, "knowledge_base_id": ""})


class SkShortDefaultWindow(SearchKnowledge):
    """An addressed read without limit_chars returns 1000 characters, not 4000."""

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return super().parse({"limit_chars": 1000, **arguments})


class SkManyDefaultResults(SearchKnowledge):
    """A query without max_results returns up to 20 results, not 10."""

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return super().parse({"max_results": 20, **arguments})


class SkReadTypeRenamed(SearchKnowledge):
    """An addressed read answers type knowledge_item instead of knowledge."""

    def read(self, context: Context, args: dict[str, Any]) -> dict[str, Any]:
        return {**super().read(context, args), "type": "knowledge_item"}


class SkAuditEnvelope(SearchKnowledge):
    """Every result carries an audit envelope (no event is written)."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        out = super().call(context, arguments, now)
        return {**out, "audit": {"event": "knowledge.read", "account": context.account, "at": now}}


class SkRuntimeOffEmpty(SearchKnowledge):
    """With the runtime switched off, query search answers an empty knowledge_search result."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        try:
            return super().call(context, arguments, now)
        except SkError as err:
            if err.code != "knowledge_runtime_disabled":
                raise
            return {"type": "knowledge_search", "mode": "hybrid", "results": []}


class SkBoundsClamped(SearchKnowledge):
    """offset, limit_chars and max_results out of bounds are clamped into them instead of refused."""

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        bounds = {"offset": (0, 1 << 62), "limit_chars": (1, 10_000), "max_results": (1, 50)}
        clamped = {
            k: min(bounds[k][1], max(bounds[k][0], v)) if k in bounds and type(v) is int else v
            for k, v in arguments.items()
        }
        return super().parse(clamped)


class SkNothingAsEmptySearch(SearchKnowledge):
    """Neither a query nor an item answers an empty knowledge_search result instead of a required code."""

    def call(self, context: Context, arguments: dict[str, Any], now: float) -> dict[str, Any]:
        try:
            return super().call(context, arguments, now)
        except SkError as err:
            if err.code not in ("knowledge_query_required", "knowledge_item_required"):
                raise
            return {"type": "knowledge_search", "mode": "hybrid", "results": []}


class SkNumbersCoerced(SearchKnowledge):
    """Numeric arguments sent as strings, booleans or fractions are coerced (\"5\" is 5, true is 1)."""

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        coerced = dict(arguments)
        for name in ("offset", "limit_chars", "max_results"):
            value = coerced.get(name)
            if isinstance(value, (str, bool, float)):
                try:
                    coerced[name] = int(float(value))
                except ValueError:
                    pass
        if isinstance(coerced.get("alpha"), str):
            try:
                coerced["alpha"] = float(coerced["alpha"])
            except ValueError:
                coerced.pop("alpha")
        if isinstance(coerced.get("query"), (int, float)):
            coerced["query"] = str(coerced["query"])
        return super().parse(coerced)


MINIATURES: dict[str, type[SearchKnowledge]] = {
    "sk_alpha_inverted": SkAlphaInverted,
    "sk_alpha_unclamped": SkAlphaUnclamped,
    "sk_semantic_weight_two_minus_alpha": SkSemanticWeightTwoMinusAlpha,
    "sk_mode_refused": SkModeRefused,
    "sk_query_historical": SkQueryHistorical,
    "sk_pinned_revision_skips_state": SkPinnedRevisionSkipsState,
    "sk_window_in_bytes": SkWindowInBytes,
    "sk_existence_leak": SkExistenceLeak,
    "sk_owner_argument_honoured": SkOwnerArgumentHonoured,
    "sk_audit_written": SkAuditWritten,
    "sk_other_choices": SkOtherChoices,
    "sk_scores_rounded": SkScoresRounded,
    "sk_excerpt_whole_content": SkExcerptWholeContent,
    "sk_semantic_is_lexical": SkSemanticIsLexical,
    "sk_lexical_is_semantic": SkLexicalIsSemantic,
    "sk_hybrid_lexical_only": SkHybridLexicalOnly,
    "sk_hit_stale_members": SkHitStaleMembers,
    "sk_read_needs_revision": SkReadNeedsRevision,
    "sk_revision_without_item": SkRevisionWithoutItem,
    "sk_mixed_query_wins": SkMixedQueryWins,
    "sk_scope_unchecked": SkScopeUnchecked,
    "sk_hidden_refused": SkHiddenRefused,
    "sk_base_filter_ignored": SkBaseFilterIgnored,
    "sk_short_default_window": SkShortDefaultWindow,
    "sk_many_default_results": SkManyDefaultResults,
    "sk_read_type_renamed": SkReadTypeRenamed,
    "sk_audit_envelope": SkAuditEnvelope,
    "sk_runtime_off_empty": SkRuntimeOffEmpty,
    "sk_bounds_clamped": SkBoundsClamped,
    "sk_nothing_as_empty_search": SkNothingAsEmptySearch,
    "sk_numbers_coerced": SkNumbersCoerced,
}


@cache
def _mix(parts: tuple[type[SearchKnowledge], ...]) -> type[SearchKnowledge]:
    if not parts:
        return SearchKnowledge
    return type("SearchKnowledge+" + "+".join(p.__name__ for p in parts), (*parts, SearchKnowledge), {})


def sk_class(quirks: Iterable[str]) -> type[SearchKnowledge]:
    """The tool with the named miniatures mixed in (the clean class when none)."""
    return _mix(tuple(MINIATURES[q] for q in sorted(set(quirks)) if q in MINIATURES))
