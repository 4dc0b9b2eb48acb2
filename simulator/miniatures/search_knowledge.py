"""Quirks of the ``search_knowledge`` tool (seed 003): each a small subclass of the clean
``SearchKnowledge`` overriding one behaviour (``sk_class`` mixes the named ones in, as
``compose`` does for the Core). The Core, the app and the MCP adapter stay clean."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from simulator.search_knowledge.tool import Context, SearchKnowledge, SkError
from simulator.store import Revision


class SkAlphaInverted(SearchKnowledge):
    """alpha is taken as the semantic weight (Weaviate's convention), not the lexical one."""

    def alpha(self, alpha: float) -> float:
        return 1.0 - super().alpha(alpha)


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


class SkScoresRounded(SearchKnowledge):
    """Seed-allowed: every score rounded to six decimals (modes are judged by rank)."""

    def hit(self, rev: Revision, scored: Any, mode: str) -> dict[str, Any]:
        out = super().hit(rev, scored, mode)
        out["scores"] = {k: round(v, 6) if isinstance(v, float) else v for k, v in out["scores"].items()}
        return out


MINIATURES: dict[str, type[SearchKnowledge]] = {
    "sk_alpha_inverted": SkAlphaInverted,
    "sk_alpha_unclamped": SkAlphaUnclamped,
    "sk_mode_refused": SkModeRefused,
    "sk_query_historical": SkQueryHistorical,
    "sk_window_in_bytes": SkWindowInBytes,
    "sk_existence_leak": SkExistenceLeak,
    "sk_owner_argument_honoured": SkOwnerArgumentHonoured,
    "sk_audit_written": SkAuditWritten,
    "sk_other_choices": SkOtherChoices,
    "sk_scores_rounded": SkScoresRounded,
}


@cache
def _mix(parts: tuple[type[SearchKnowledge], ...]) -> type[SearchKnowledge]:
    if not parts:
        return SearchKnowledge
    return type("SearchKnowledge+" + "+".join(p.__name__ for p in parts), (*parts, SearchKnowledge), {})


def sk_class(quirks: Iterable[str]) -> type[SearchKnowledge]:
    """The tool with the named miniatures mixed in (the clean class when none)."""
    return _mix(tuple(MINIATURES[q] for q in sorted(set(quirks)) if q in MINIATURES))
