"""Named checks. Each failure names the one requirement it violates, so the
report can say exactly which clause a server broke."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from conformance.common import contract as C
from conformance.common.config import TargetConfig
from conformance.common.names import WireNames
from conformance.common.outcomes import ContractViolation, NotVerified
from conformance.common.rules import Rule, expect
from conformance.common.secrets import clip
from conformance.common.transport import MalformedJSON, broken, judged, strict_json, too_large
from conformance.common.untrusted import shown
from conformance.server import rules as server
from conformance.server.leaks import DocumentText
from knowledge_schemas import load_registry


def read(response: httpx.Response, requirement: Rule, *, bound: Rule | None = None) -> None:
    """A check reads ``response``: if it fails, the report shows this exchange. An answer the suite
    could not take in (a body over the cap or not in its coding, a header block too large) breaks
    ``requirement`` here, or ``bound`` (the rule on the answer's size) when its body was too large."""
    judged(response)
    why = broken(response)
    if why is not None:
        status = f"HTTP {response.status_code}" if response.status_code else "the answer"
        raise ContractViolation(bound if bound is not None and too_large(response) else requirement, f"{status}: {why}")


def body_of(response: httpx.Response, requirement: Rule) -> Any:
    """The answer's JSON, read strictly (no member twice, no deep nesting, no NaN): else ``requirement`` is broken."""
    read(response, requirement)
    try:
        return strict_json(response.content)
    except MalformedJSON as exc:
        raise ContractViolation(
            requirement, f"HTTP {response.status_code} body is not JSON the suite can judge: {exc}"
        ) from None
    except ValueError:
        raise ContractViolation(
            requirement, f"HTTP {response.status_code} body is not JSON: {shown(response.text, 200)!r}"
        ) from None


@contextmanager
def shaped(stem: str, body: Any) -> Iterator[None]:
    """Reading the members of ``body``, an answer that should match ``stem``'s schema: a member of
    the wrong type (a TypeError, KeyError, AttributeError or IndexError on the way) is WIRE-002's
    failure, named by the schema, not a crash of the check. An answer that matches its schema and
    still fails so is the suite's own fault, raised as it is."""
    try:
        yield
    except (TypeError, KeyError, AttributeError, IndexError):
        errors = load_registry().errors(stem, body)
        if not errors:
            raise
        server.WIRE_002.fail(f"response does not match {stem}.schema.json: {shown('; '.join(errors[:3]), 300)}")


def schema(stem: str, body: Any, requirement: Rule = server.WIRE_002, *, names: WireNames | None = None) -> None:
    """``body`` against its schema; with ``names``, after mapping the configured member names back to the canonical ones."""
    errors = load_registry().errors(stem, names.to_canonical(stem, body) if names is not None else body)
    expect(not errors, requirement, f"response does not match {stem}.schema.json: {'; '.join(errors[:3])}")


def ok(response: httpx.Response, requirement: Rule, what: str) -> Any:
    read(response, requirement)
    expect(
        response.status_code == 200,
        requirement,
        lambda: f"{what} answered HTTP {response.status_code}, expected 200: {clip(response.text, 300)}",
    )
    return body_of(response, requirement)


def error_envelope(
    response: httpx.Response,
    requirement: Rule = server.WIRE_001,
    *,
    statuses: range = range(400, 500),
    strict: bool = False,
) -> dict[str, Any]:
    """A 4xx with the error envelope. The seed names only the error code; ``strict``
    (codes.strict) also demands the vendor's human-readable ``message``."""
    read(response, requirement)
    expect(
        response.status_code in statuses,
        requirement,
        lambda: (
            f"expected a {statuses.start}-{statuses.stop - 1} error, got HTTP {response.status_code}: {clip(response.text, 200)}"
        ),
    )
    body = body_of(response, requirement)
    errors = load_registry().errors("error", body)
    expect(not errors, requirement, f"the error body is not the error envelope: {'; '.join(errors[:3])}")
    if strict:
        expect(
            isinstance(body.get("message"), str),
            requirement,
            f"strict: the error body has no message: {describe(body)}",
        )
    return dict(body)


SEARCH_RULES = (
    server.SRCH_003,
    server.SRCH_004,
    server.SRCH_005,
    server.SRCH_006,
    server.SRCH_007,
    server.SRCH_008,
    server.READ_007,
)
"""What :func:`search_body` judges of a search answer, wherever it is read (the Core's, one relayed
over MCP, one under load): a test claims them where it wants them verified (``@R(*checks.SEARCH_RULES)``)."""

CHAIN_RULES = (
    server.READ_004,
    server.READ_005,
    server.READ_009,
    server.READ_010,
    server.READ_011,
    server.READ_014,
    server.READ_016,
)
"""What every check of a whole read chain judges of its pages, wherever the chain is read (a test, the
stateful walk, a load run): each page within its bound, truncation and the chain budget honest,
the numeric fields correct, no character split."""


def reference_only(body: dict[str, Any], requirement: Rule, *, relayed: bool = False) -> None:
    """``trust`` is ``reference_only`` (search and read answers alike); a tool relaying the answer
    (``relayed``) may leave the member out, but not say anything else."""
    if not relayed or "trust" in body:
        expect(
            body.get("trust") == "reference_only",
            requirement,
            f"trust is {body.get('trust')!r}, expected 'reference_only'",
        )


def search_response(response: httpx.Response, *, what: str = "search") -> dict[str, Any]:
    """Shape rules first (the most specific violation is reported), then the byte bound."""
    read(response, server.SRCH_001, bound=server.SRCH_008)
    body = ok(response, server.SRCH_001, what)
    search_body(body, len(response.content))
    schema("search-response", body)
    return dict(body)


def search_body(body: Any, size: int, *, relayed: bool = False) -> None:
    """The search rules on one answer's JSON of ``size`` bytes. ``relayed``: as a tool relays the
    Core's answer (MCP), where the seed names only hints and a status, so ``trust`` is judged when
    it is there."""
    with shaped("search-response", body):
        hints = body.get("hints")
        if not isinstance(hints, list):  # the hint rules are verified by the hints themselves, below
            raise server.SRCH_004.violated("search response has no hints array")
        expect(
            len(hints) <= C.SEARCH_MAX_HINTS,
            server.SRCH_003,
            f"search returned {len(hints)} hints, at most {C.SEARCH_MAX_HINTS} allowed",
        )
        for i, hint in enumerate(hints):
            missing = {"title", "summary", "ref"} - set(hint if isinstance(hint, dict) else {})
            expect(not missing, server.SRCH_004, f"hint {i} lacks {sorted(missing)}")
            expect(not ({"content", "body", "text"} & set(hint)), server.SRCH_006, f"hint {i} carries a body field")
            expect(
                C.utf8_size(hint["ref"]) <= C.REFERENCE_MAX_BYTES,
                server.READ_007,
                f"hint {i} ref is {C.utf8_size(hint['ref'])} bytes",
            )
        expect(
            body.get("status") in C.SEARCH_STATUSES,
            server.SRCH_005,
            f"status {body.get('status')!r} is not one of {sorted(C.SEARCH_STATUSES)}",
        )
        reference_only(body, server.SRCH_007, relayed=relayed)
        expect(size <= C.SEARCH_MAX_BYTES, server.SRCH_008, f"search JSON is {size} bytes, over {C.SEARCH_MAX_BYTES}")


def page(
    response: httpx.Response,
    *,
    ref: str,
    max_bytes: int | None,
    requirement_bound: Rule,
    accepted: Rule = server.READ_001,
    strict: bool = False,
) -> dict[str, Any]:
    """One read page: fields, trust, byte bound on the raw response, honest flags.

    ``accepted`` is the rule a refusal breaks (READ-001 for a plain read; a test that
    knows the read itself works names the rule of what it varied, e.g. READ-005).
    ``strict`` (codes.strict) also holds the page to this project's choices: a string revision."""
    read(response, accepted, bound=requirement_bound)
    if response.status_code == 200:
        try:
            response.content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ContractViolation(
                server.READ_016,
                f"the page is not valid UTF-8 ({exc.reason} at byte {exc.start}): "
                "a character was cut between its bytes",
            ) from None
    body = ok(response, accepted, "read")
    page_body(
        body, len(response.content), ref=ref, max_bytes=max_bytes, requirement_bound=requirement_bound, strict=strict
    )
    schema("read-response", body)
    return dict(body)


def page_body(
    body: Any,
    size: int,
    *,
    ref: str,
    max_bytes: int | None,
    requirement_bound: Rule,
    strict: bool = False,
    relayed: bool = False,
) -> None:
    """The page rules on one page's JSON of ``size`` bytes. ``relayed``: as a tool relays the
    Core's page (MCP), where ``trust`` is judged when it is there."""
    with shaped("read-response", body):
        limit = max_bytes or C.READ_DEFAULT_MAX_BYTES
        expect(size <= limit, requirement_bound, f"read JSON is {size} bytes, over max_bytes {limit}")
        required = {"ref", "revision", "content", "next_cursor"} | ({"truncated"} if strict else set())
        missing = required - set(body)
        expect(
            not missing,
            server.READ_002,
            f"page lacks {sorted(missing)}{' (strict: truncated, CHOICES.md)' if strict else ''}",
        )
        expect(body["ref"] == ref, server.READ_002, "page ref is not the original ref")
        if strict:
            expect(
                isinstance(body["revision"], str),
                server.READ_002,
                f"strict: revision {body['revision']!r} is not a string (CHOICES.md)",
            )
        reference_only(body, server.READ_003, relayed=relayed)
        content = body.get("content")
        if isinstance(content, str):  # what shows a split without knowing the document: half of an astral character
            lone = next((ch for ch in content if "\ud800" <= ch <= "\udfff"), None)
            if lone is not None:  # raised, never recorded: a page of ASCII shows nothing of how characters are cut
                server.READ_016.fail(f"the page has a lone surrogate U+{ord(lone):04X}: half of an astral character")
        cursor = body["next_cursor"]
        if cursor is not None:
            expect(
                body.get("truncated", True) is True, server.READ_009, "a page with a next_cursor says truncated false"
            )
            expect(
                C.utf8_size(cursor) <= C.REFERENCE_MAX_BYTES,
                server.READ_007,
                f"next_cursor is {C.utf8_size(cursor)} bytes",
            )
        if body.get("budget_exhausted") is True:
            expect(
                body.get("truncated", True) is True and cursor is None,
                server.READ_011,
                "budget_exhausted needs truncated true (or no truncated member) and next_cursor null",
            )
        for name in ("total_content_bytes", "read_chain_max_bytes"):
            if name in body:
                value = body[name]
                expect(
                    isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= C.SAFE_INTEGER_MAX,
                    server.READ_014,
                    f"{name} {value!r} is not a safe non-negative integer",
                )
        if "read_chain_max_bytes" in body:
            expect(
                body["read_chain_max_bytes"] <= C.READ_CHAIN_MAX_BYTES,
                server.READ_014,
                f"read_chain_max_bytes {body['read_chain_max_bytes']} exceeds {C.READ_CHAIN_MAX_BYTES}",
            )


def says_complete(page: dict[str, Any]) -> bool:
    """A page that ends the revision says so: ``truncated`` false, or no ``truncated`` member (the
    seed lists it among no page's members; "``truncated: true`` means incomplete")."""
    return page.get("truncated", False) is False


_REFERENCE_KINDS = {
    "reference_invalid": "invalid",
    "reference_expired": "expired",
    "reference_mismatch": "bound to another context",
    "scope_changed": "out of date with the scope",
    "revision_changed": "out of date with the revision",
}


def reference_error(
    response: httpx.Response,
    cfg: TargetConfig,
    kind: str | Collection[str],
    *,
    requirement: Rule,
    secret: str | None = None,
    text: DocumentText | None = None,
) -> dict[str, Any]:
    """A changed/invalid/expired reference: 4xx, the seed's code family, next_action search_knowledge, no content.

    ``kind`` names the cause (``reference_expired``, ``scope_changed``, ...), or
    several when more than one holds at once: the seed does not say which wins,
    so under strict codes any of their configured code/status pairs passes.
    ``requirement`` is the rule being exercised (e.g. REF-001): if the server
    accepted the reference, that is the rule it broke.
    """
    read(response, requirement)
    kinds = sorted({kind} if isinstance(kind, str) else set(kind))
    if not kinds:
        raise ValueError("reference_error needs at least one kind")
    what = " or ".join(_REFERENCE_KINDS.get(k, k.replace("_", " ")) for k in kinds)
    expect(
        response.status_code != 200, requirement, f"the server accepted a reference that is {what}, and answered 200"
    )
    expect(
        400 <= response.status_code < 500,
        requirement,
        f"expected a 4xx for a reference that is {what}, got HTTP {response.status_code}",
    )
    body = body_of(response, server.REF_011)
    with shaped("error", body):
        code = body.get("error") if isinstance(body, dict) else None
        expect(
            C.is_reference_error_code(code),
            server.REF_011,
            f"error code {code!r} is not knowledge_reference_* / knowledge_*changed",
        )
        if cfg.strict_codes:
            pairs = {(cfg.code(k), cfg.status(k)) for k in kinds}
            codes = sorted({c for c, _ in pairs})
            expect(
                code in codes,
                server.REF_011,
                f"error code {code!r} for a {what} reference, configured strict code(s) {codes}",
            )
            statuses = sorted(s for c, s in pairs if c == code)
            expect(
                response.status_code in statuses,
                server.REF_011,
                f"status {response.status_code} with code {code!r}, configured {statuses}",
            )
            expect(
                isinstance(body.get("message"), str),
                server.WIRE_001,
                f"strict: the error body has no message: {describe(body)}",
            )
        actions = [
            a for a in (C.json_pointer(body, p) for p in cfg.wire["feedback"]["next_action_pointers"]) if a is not None
        ]
        if (
            actions or cfg.strict_codes
        ):  # the feedback object is the SDK's to build from the code; strict: the Core's body
            expect(
                actions and all(a == "search_knowledge" for a in actions),
                server.REF_012,
                f"next_action is {actions[0] if actions else None!r}, expected 'search_knowledge'"
                + ("" if actions else " (strict: the Core's error body carries it, CHOICES.md)"),
            )
        else:
            server.REF_012.held()  # nothing points elsewhere: the SDK's feedback says search_knowledge (REF-013)
        expect(
            not ({"content", "hints", "knowledge"} & set(body)),
            server.REF_014,
            f"the error carries a knowledge member: {describe(body)}",
        )
        known = text if text is not None else DocumentText()
        if secret:
            known.add([secret])
        leaked = known.leaked(body)
        expect(leaked is None, server.REF_014, f"the error carries document text: {leaked!r}")
        return dict(body)


def split_in(piece: str, expected: str) -> str | None:
    """Why ``piece`` (page content) shows a split character where the revision has
    ``expected``: a lone UTF-16 surrogate (sent as a JSON escape) or a U+FFFD the
    revision does not have there. None when it shows none (it may still differ)."""
    lone = next((ch for ch in piece if "\ud800" <= ch <= "\udfff"), None)
    if lone is not None:
        return f"a lone surrogate U+{ord(lone):04X} (half of an astral character)"
    if piece.count("\ufffd") > expected.count("\ufffd"):
        return "a U+FFFD replacement character the revision does not have"
    return None


def describe(body: Any) -> str:
    return clip(json.dumps(body, ensure_ascii=False), 300)


def advertises_on_demand(world: Any) -> bool:
    """The route's capabilities offer the on_demand mode: 200, enabled true, on_demand among the
    delivery modes. What a negotiating client sends on_demand on (seed: "capabilities.supported ?
    { knowledgeDelivery: 'on_demand' } : {}")."""
    member = world.cfg.names.capabilities
    response = world.core.capabilities(world.primary.token, world.route)
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:
        return False
    if not isinstance(body, dict):
        return False
    modes = body.get(member["delivery_modes"])
    return body.get(member["enabled"]) is True and isinstance(modes, list) and "on_demand" in modes


def on_demand_answer(world: Any, context: dict[str, Any]) -> None:
    """An on_demand turn's answer is judged as one when it carries ``context.knowledge_delivery`` ("An
    explicit context.knowledge_delivery response must match..."), or when the route's capabilities
    offer the on_demand mode (a Core that advertises the mode answers in it: TURN-003). Without
    either, it is a legacy-shaped answer the seed allows ("A legacy response's inline body is
    retained"): not verified here. Strict demands the object on every on_demand turn (CHOICES.md)."""
    field = world.cfg.names.turn_context["knowledge_delivery"]
    sent = context.get(field)
    if sent is not None or world.cfg.strict_codes:
        expect(isinstance(sent, dict), server.TURN_003, f"an on_demand turn has no context.{field}")
        return
    if advertises_on_demand(world):
        server.TURN_003.fail(
            f"the route's capabilities offer the on_demand mode, yet an on_demand turn came back without context.{field}"
        )
    raise NotVerified(
        f"not verified: the on_demand turn came back without context.{field} on a route whose capabilities do not "
        "offer the on_demand mode (a legacy-shaped answer the seed allows)"
    )


def bounded_delivery(world: Any, body: dict[str, Any], context: dict[str, Any]) -> None:
    """The checks of an on_demand turn's delivery object (also run under load, conformance.load)."""
    names = world.cfg.names
    field = names.turn_context["knowledge_delivery"]
    on_demand_answer(world, context)
    sent = context.get(field)
    delivery = names.delivery(context)
    hints = delivery.get("hints", [])
    # TURN-007 is judged on every turn but counts only for a turn that had hints to bound.
    bounded = isinstance(hints, list) and bool(hints)
    if not (isinstance(hints, list) and len(hints) <= C.SEARCH_MAX_HINTS):
        server.TURN_007.fail(f"{len(hints)} hints in context.{field}")
    if len(C.canonical(sent).encode()) > C.SEARCH_MAX_BYTES:
        server.TURN_007.fail(f"context.{field} is larger than a search response may be")
    known = set(load_registry().contents["knowledge-delivery.schema.json"]["properties"])
    extras = {name: value for name, value in delivery.items() if name not in known}
    whole = world.document_text().whole(extras)
    if whole is not None:
        server.TURN_007.fail(
            f"context.{field} carries a whole document ({len(whole)} characters) outside its hints, in {sorted(extras)}"
        )
    if bounded:
        server.TURN_007.held()
    errors = load_registry().errors("knowledge-delivery", delivery)
    expect(not errors, server.TURN_006, f"context.{field} does not match the delivery schema: {'; '.join(errors[:3])}")
    if world.cfg.strict_codes:
        expect(
            not extras,
            server.TURN_006,
            f"strict: context.{field} has members the delivery schema does not name: {sorted(extras)}",
        )
    schema("turn-response", body, names=names)


def empty_knowledge(world: Any, context: dict[str, Any]) -> None:
    """context.knowledge and knowledge_refs present and empty in on_demand mode (also run under load).
    Judged first wherever the answer is an on_demand one (TURN-003's failure, judged after it, must
    not hide this one); a legacy-shaped answer the seed allows is left to ``on_demand_answer``."""
    member = world.cfg.names.turn_context
    knowledge, refs = member["knowledge"], member["knowledge_refs"]
    if context.get(member["knowledge_delivery"]) is not None or world.cfg.strict_codes or advertises_on_demand(world):
        expect(
            context.get(knowledge) == [] and context.get(refs) == [],
            server.TURN_008,
            lambda: (
                f"{knowledge}/{refs} must be present and empty: {knowledge}={clip(str(context.get(knowledge)), 120)} {refs}={clip(str(context.get(refs)), 120)}"
            ),
        )
    on_demand_answer(world, context)


def binding_refused(world: Any, response: Any, rule: Rule, what: str, *, known: list[str]) -> None:
    """The read under a foreign context must fail with a 4xx envelope that carries no document text."""
    read(response, rule)
    expect(response.status_code != 200, rule, f"a {what} was accepted under a context that differs from its binding")
    body = error_envelope(response, rule)
    text = world.document_text()
    text.add(known)
    leaked = text.leaked(body)
    expect(leaked is None, server.REF_014, f"the refusal carries document text: {leaked!r}")
    code = body.get("error")
    cfg = world.cfg
    if C.is_reference_error_code(code):
        reference_error(response, cfg, "reference_mismatch", requirement=rule, text=text)
    elif cfg.strict_codes:
        expect(
            code == cfg.code("run_not_found") and response.status_code == cfg.status("run_not_found"),
            server.REF_011,
            f"refused with {response.status_code} {code!r}; strict expects {cfg.code('reference_mismatch')!r} or {cfg.code('run_not_found')!r}",
        )


# ------------------------------------------------ read chains against the stored revision (shared by the read areas)
def joined(pages: list[dict[str, Any]]) -> str:
    """A chain's text: its pages' content, in order."""
    return "".join(p["content"] for p in pages)


def continues_at(doc: str, position: int, piece: str, i: int) -> int:
    """Page ``i`` continues the document at character ``position``; a difference that shows a
    split character is READ-016's, any other READ-015's. Returns where the next page starts."""
    expected = doc[position : position + len(piece)]
    if piece != expected:
        split = split_in(piece, expected)
        expect(split is None, server.READ_016, f"page {i} splits a character near character {position}: {split}")
        server.READ_015.fail(f"page {i} does not continue the document at character {position}")
    server.READ_015.held()  # the page is the document's next characters, so no character was split either
    server.READ_016.held()
    return position + len(piece)


def rebuilds(world: Any, doc: str, pages: list[dict[str, Any]]) -> None:
    """A chain the budget did not stop concatenates to exactly the revision (READ-015): judged
    whole first, since the page-by-page continuity names the first split character READ-016's
    and would leave a Core whose cuts split characters never judged on the text it rebuilds."""
    if not (pages[-1].get("budget_exhausted") is True and C.utf8_size(doc) > world.chain_budget(pages)):
        expect(joined(pages) == doc, server.READ_015, "the pages do not concatenate to the stored revision")


def read_to_the_end(world: Any, doc: str, pages: list[dict[str, Any]], position: int) -> bool:
    """The chain read the whole revision (True), unless it stopped budget_exhausted on a revision larger
    than the budget the Core advertises (False: where it stopped is READ-011's and READ-020's to judge)."""
    if pages[-1].get("budget_exhausted") is True and C.utf8_size(doc) > world.chain_budget(pages):
        return False
    expect(position == len(doc), server.READ_015, f"the chain ended after {position} of {len(doc)} characters")
    return True


def continues(doc: str, pages: list[dict[str, Any]]) -> int:
    """Every page continues the document; returns the characters read."""
    position = 0
    for i, page in enumerate(pages):
        position = continues_at(doc, position, page["content"], i)
    return position


def flags(page: dict[str, Any]) -> str:
    """A page's end-of-chain members, as a failure message shows them."""
    return describe({k: page.get(k) for k in ("truncated", "next_cursor", "budget_exhausted")})
