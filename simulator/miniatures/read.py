"""Miniatures of read: page bounds, honest flags, the chain budget, byte counts,
and references or cursors of the wrong size."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import Any

from starlette.types import Receive, Scope, Send

from simulator.core import CHAIN_BUDGET, READ_DEFAULT_BYTES, READ_MAX_BYTES, READ_MIN_BYTES, Caller, Core
from simulator.errors import ApiError
from simulator.miniatures._asgi import BodyRewrite, Captured, Miniature, Wrapper, read_body, replay
from simulator.miniatures.capabilities import EndpointMissing
from simulator.signing import MAX_TOKEN_BYTES
from simulator.sizing import dumps, fit_prefix
from simulator.store import Revision, Run

_MAC_CHARS = 24  # a signature: 18 bytes, unpadded base64 (simulator.signing)
_LONE = re.compile("[\ud800-\udfff]")


class ReadMissing(EndpointMissing):
    operations = frozenset({"read"})


class ReadNewRef(Core):
    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        page = super().read(caller, body)
        claims = self.signer.verify("ref", body["ref"])
        page["ref"] = self.signer.sign("ref", {**claims, "t": claims["t"] + 0.5})
        return page


class ReadDefault32k(Core):
    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return super().read(caller, {"max_bytes": 32768, **body})


class MaxBytesIgnored(Core):
    """A valid max_bytes is accepted, then every page is sized by the default."""

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return super().read(caller, {**body, "max_bytes": READ_DEFAULT_BYTES})


class MaxBytesUnchecked(BodyRewrite):
    operations = frozenset({"read"})

    def rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        value = body.get("max_bytes")
        if type(value) is int:
            body["max_bytes"] = min(max(value, 4096), 32768)
        return body


class ReadDefault4096(Core):
    """The default page is the smallest allowed one: every page within 16384 bytes, none near it."""

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return super().read(caller, {"max_bytes": READ_MIN_BYTES, **body})


class MaxBytesOfOtherTypeIgnored(BodyRewrite):
    """A max_bytes that is not an integer (``"8192"``, ``8192.5``) is dropped, as a loosely typed
    handler does (``typeof x === "number" && Number.isInteger(x) ? x : default``): the read is
    served with the default page instead of refused or bounded by the number sent."""

    operations = frozenset({"read"})

    def rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        if "max_bytes" in body and type(body["max_bytes"]) is not int:
            del body["max_bytes"]
        return body


class MaxBytesOutOfRangeCrashes(Wrapper):
    """A read whose max_bytes is outside 4096..32768 crashes the handler (500) instead of being
    refused or clamped; every other read is the clean Core's."""

    operations = frozenset({"read"})

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        try:
            value = json.loads(raw).get("max_bytes")
        except (ValueError, AttributeError, RecursionError):
            value = None
        if type(value) is int and not READ_MIN_BYTES <= value <= READ_MAX_BYTES:
            body = dumps({"error": "internal_error", "message": "page size out of bounds"})
            headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
            await Captured(500, headers, body).send_to(send)
            return
        await self.app(scope, replay(raw), send)


class MaxBytesRangeExclusive(Core):
    """The range check leaves out its ends: max_bytes 4096 and 32768 are refused as out of range."""

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("max_bytes") in (READ_MIN_BYTES, READ_MAX_BYTES):
            raise ApiError(
                400,
                "invalid_request",
                f"max_bytes must be greater than {READ_MIN_BYTES} and less than {READ_MAX_BYTES}",
            )
        return super().read(caller, body)


class _LenientTokens(Core):
    """Reads a ref or cursor up to its signature and ignores what follows it; its size check is ``too_long``."""

    def too_long(self, token: str) -> bool:
        raise NotImplementedError

    def _claims(self, kind: str, token: str) -> dict[str, Any]:
        if self.too_long(token):
            raise self._ref_error(400, "knowledge_reference_invalid", f"the {kind} is too long")
        head, dot, mac = token.rpartition(".")
        return super()._claims(kind, head + dot + mac[:_MAC_CHARS])


class TokenSizeInCharacters(_LenientTokens):
    """The 4096 bound of a ref or cursor counts characters, not UTF-8 bytes."""

    def too_long(self, token: str) -> bool:
        return len(token) > MAX_TOKEN_BYTES


class TokenBoundExclusive(_LenientTokens):
    """A ref or cursor of 4096 bytes is already refused as too long (the bound taken as exclusive)."""

    def too_long(self, token: str) -> bool:
        return len(token.encode("utf-8", "surrogatepass")) >= MAX_TOKEN_BYTES


class LongRefs(Core):
    def _ref(self, caller: Caller, run: Run, rev: Revision) -> str:
        claims = self.signer.verify("ref", super()._ref(caller, run, rev))
        return self.signer.sign("ref", {**claims, "pad": "x" * 3200})


class OversizeRefAccepted(BodyRewrite):
    """A ref or cursor over 4096 bytes loses whatever follows its signature, so the rest is read."""

    operations = frozenset({"read"})

    def rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        for field in ("ref", "cursor"):
            token = body.get(field)
            if isinstance(token, str) and len(token.encode("utf-8", "surrogatepass")) > MAX_TOKEN_BYTES:
                head, dot, mac = token.rpartition(".")
                body[field] = head + dot + mac[:_MAC_CHARS]
        return body


class TruncatedLies(Core):
    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        return {**super().read(caller, body), "truncated": False}


class FullBudgetSaidExhausted(Core):
    """A chain whose page fills the budget to the byte says truncated and budget_exhausted, even
    when that byte was the revision's last: a revision of exactly 131072 bytes reads "incomplete"."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        page = super()._page(caller, run, ref, rev, offset, consumed, max_bytes)
        if not page["truncated"] and consumed + len(page["content"].encode("utf-8")) >= self.chain_budget:
            page = {**page, "truncated": True, "budget_exhausted": True}
        return page


class ReadWhileDisabled(Core):
    """Capabilities and search say disabled, but read still serves pages."""

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        self.reading = True
        try:
            return super().read(caller, body)
        finally:
            self.reading = False

    def mode(self, route: str) -> tuple[str, int]:
        mode, status = super().mode(route)
        return ("normal", status) if mode == "disabled" and getattr(self, "reading", False) else (mode, status)


class NoReadBudget(Core):
    chain_budget = math.inf


class ReadBudgetOneShort(Core):
    """The chain budget is one byte short (131071): a revision of exactly 131072 bytes ends budget_exhausted."""

    chain_budget = CHAIN_BUDGET - 1


class ReadBudgetHalved(Core):
    """Chains stop budget_exhausted after 65536 content bytes, while capabilities and pages still
    advertise a read_chain_max_bytes of 131072."""

    chain_budget = CHAIN_BUDGET // 2


class BudgetEndsOnePageLate(Core):
    """The page that exhausts the read budget still hands out a next_cursor; the chain stops one
    request later, with an empty page that says budget_exhausted."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        page = super()._page(caller, run, ref, rev, offset, consumed, max_bytes)
        if page.get("budget_exhausted") is True and page["content"]:
            size = len(page["content"].encode("utf-8"))
            page.update(
                budget_exhausted=False,
                next_cursor=self._cursor(
                    caller, run, ref, offset + len(page["content"]), consumed + size, self.clock.now()
                ),
            )
        return page


class BudgetClaimsComplete(Core):
    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        page = super().read(caller, body)
        if page.get("budget_exhausted"):
            page.update(truncated=False, budget_exhausted=False)
        return page


class WrongTotalBytes(Core):
    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        return {
            **super()._page(caller, run, ref, rev, offset, consumed, max_bytes),
            "total_content_bytes": len(rev.content),
        }


class PageSizedByRawBytes(Core):
    """Page content is sized by its plain UTF-8 bytes, with a third of the room kept for JSON
    escapes: enough for ordinary text, not for text that is mostly escapes."""

    def _fit_content(self, text: str, room: int, remaining: int) -> int:
        return fit_prefix(text, 1 << 40, raw_budget=min(room * 2 // 3, remaining))


class FullWindowSkipsACharacter(Core):
    """A page whose whole window fits its room (one-byte text with nothing to escape, where
    bytes are characters) counts its end inclusively: the next page starts a character late."""

    def _fit_content(self, text: str, room: int, remaining: int) -> int:
        keep = super()._fit_content(text, room, remaining)
        return keep + 1 if keep == len(text) == room else keep


class PagesCutInUtf16Units(Core):
    """Offsets and lengths count UTF-16 code units, as a JavaScript Core's string indexes do: the
    number of characters that fit is taken as a UTF-16 length, so a page can end between the two
    halves of an astral character, each half sent as its JSON escape (as JSON.stringify does)."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        units = rev.content.encode("utf-16-le")
        total = len(units) // 2

        def text(start: int, end: int) -> str:
            return units[2 * start : 2 * end].decode("utf-16-le", "surrogatepass")

        view = _LONE.sub("\ufffd", text(offset, total))  # sized as if a leading lone half were a character
        fitted = super()._page(
            caller, run, ref, replace(rev, content=view), 0, consumed, max_bytes - 8
        )  # room for an escaped half
        end = offset + len(fitted["content"])
        content = text(offset, end)
        page = {**fitted, "content": content, "total_content_bytes": len(rev.content.encode("utf-8"))}
        if page.get("budget_exhausted") is not True:
            at_end = end >= total
            page.update(
                truncated=not at_end,
                next_cursor=None
                if at_end
                else self._cursor(
                    caller, run, ref, end, consumed + len(content.encode("utf-8", "surrogatepass")), self.clock.now()
                ),
            )
        return page


class PagesOverlap(Core):
    """Each next_cursor points one character back (never behind the page's own start)."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        page = super()._page(caller, run, ref, rev, offset, consumed, max_bytes)
        if page["next_cursor"] is not None:
            cursor = self.signer.verify("cursor", page["next_cursor"])
            if cursor["o"] - 1 > offset:
                page["next_cursor"] = self.signer.sign("cursor", {**cursor, "o": cursor["o"] - 1})
        return page


class SplitCharacters(Core):
    """Offsets count bytes and a page takes as many bytes as fit, wherever a character ends;
    the chain budget still counts the content bytes delivered."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        raw = rev.content.encode("utf-8")
        shell = {
            **super()._page(caller, run, ref, replace(rev, content=""), 0, consumed, max_bytes),
            "total_content_bytes": len(raw),
        }
        budget = self.chain_budget - consumed
        size = max(1, int(min(len(raw) - offset, budget, max_bytes)))
        while True:
            end = offset + size
            content = raw[offset:end].decode("utf-8", "replace")
            delivered = len(content.encode("utf-8"))
            at_end = end >= len(raw)
            exhausted = not at_end and budget - delivered < 4  # room for not even one more character
            page = {
                **shell,
                "content": content,
                "truncated": not at_end,
                "budget_exhausted": exhausted,
                "next_cursor": None,
            }
            if not at_end and not exhausted:
                page["next_cursor"] = self._cursor(caller, run, ref, end, consumed + delivered, self.clock.now())
            excess = max(len(dumps(page)) - max_bytes, delivered - budget)
            if excess <= 0 or size == 1:
                return page
            size = max(1, size - int(excess))


MINIATURES: dict[str, Miniature] = {
    "read_default_4096": ReadDefault4096,
    "max_bytes_of_other_type_ignored": MaxBytesOfOtherTypeIgnored,
    "read_missing": ReadMissing,
    "read_new_ref": ReadNewRef,
    "read_default_32k": ReadDefault32k,
    "max_bytes_ignored": MaxBytesIgnored,
    "max_bytes_unchecked": MaxBytesUnchecked,
    "max_bytes_range_exclusive": MaxBytesRangeExclusive,
    "token_size_in_characters": TokenSizeInCharacters,
    "token_bound_exclusive": TokenBoundExclusive,
    "read_budget_one_short": ReadBudgetOneShort,
    "budget_ends_one_page_late": BudgetEndsOnePageLate,
    "page_sized_by_raw_bytes": PageSizedByRawBytes,
    "pages_cut_in_utf16_units": PagesCutInUtf16Units,
    "long_refs": LongRefs,
    "oversize_ref_accepted": OversizeRefAccepted,
    "truncated_lies": TruncatedLies,
    "full_budget_said_exhausted": FullBudgetSaidExhausted,
    "read_while_disabled": ReadWhileDisabled,
    "no_read_budget": NoReadBudget,
    "budget_claims_complete": BudgetClaimsComplete,
    "read_budget_halved": ReadBudgetHalved,
    "max_bytes_out_of_range_crashes": MaxBytesOutOfRangeCrashes,
    "wrong_total_bytes": WrongTotalBytes,
    "pages_overlap": PagesOverlap,
    "split_characters": SplitCharacters,
    "full_window_skips_a_character": FullWindowSkipsACharacter,
}
