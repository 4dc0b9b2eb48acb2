"""The suite's side of the ``search_knowledge`` tool (seed 003): reading a tool answer (a
result, a refusal with a code, or a protocol error) and the corpus the checks are built on
(the control calls of its states are conformance.common.control.KnowledgeControl).

Nothing here depends on how a server ranks: the corpus makes lexical and semantic evidence
disagree (a document holding the query word once in unrelated text, and one holding only
other forms of it), and the checks compare a server's own orders with each other.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from conformance.common.rules import expect
from conformance.common.secrets import clip
from conformance.mcp.closing import collect_closed
from conformance.mcp.records import NotServing, ToolResult
from conformance.search_knowledge import rules as sk

if TYPE_CHECKING:
    from conformance.mcp.session import McpSession

TOOL = "search_knowledge"
MAIN, OTHER, PRIVATE, ARCHIVED_BASE = "kb-main", "kb-other", "kb-private", "kb-archived"
# Text whose code points, UTF-16 units and UTF-8 bytes all differ: astral characters, combining
# sequences, CJK, escapes.
WINDOW_PIECES = [
    "a",
    "\U0001f600",
    "e\u0301",
    "中",
    "\U0001d11e",
    '"',
    "\\",
    "\n",
    "a\u0308\u0301",
    "€",
    "z",
    "\U00020000",
]


@dataclass(frozen=True)
class Answer:
    """One ``search_knowledge`` call as the suite sees it."""

    ok: bool
    body: dict[str, Any] | None
    codes: frozenset[str]
    is_error: bool
    raw: str

    def hits(self) -> list[dict[str, Any]]:
        found = (self.body or {}).get("results")
        return [h for h in found if isinstance(h, dict)] if isinstance(found, list) else []

    def items(self) -> list[str]:
        return [str(h.get("knowledge_item_id")) for h in self.hits()]

    def has(self, code: str) -> bool:
        return code in self.codes


def _codes(body: Any) -> set[str]:
    """Every error code an answer names: ``error``, ``code``, or either inside ``error`` or ``feedback``."""
    found: set[str] = set()
    if not isinstance(body, dict):
        return found
    for key in ("error", "code", "error_code"):
        if isinstance(body.get(key), str):
            found.add(body[key])
    for key in ("error", "feedback"):
        inner = body.get(key)
        if isinstance(inner, dict):
            found |= {v for k in ("code", "error") if isinstance(v := inner.get(k), str)}
    return found


def call(session: McpSession, arguments: dict[str, Any], *, judge: bool = True) -> Answer:
    """One call, read as an :class:`Answer`. A success is judged here, for every check that asks
    (``judge``; a probe that only asks whether the tool is offered does not): it is JSON text
    (:func:`judge_success`). Checks of one test's own rules come after, on the answer."""
    result = session.call(TOOL, arguments)
    if result.protocol_error is not None:  # e.g. invalid params: a refusal without a tool result
        code = result.protocol_error.removeprefix("JSON-RPC error ").split(":", 1)[0]
        return Answer(False, None, frozenset({f"jsonrpc:{code}"}), True, clip(result.protocol_error, 300))
    body = result.structured if result.has_structured else result.text_json()
    body = body if isinstance(body, dict) else None
    codes = _codes(body)
    good = (
        not result.is_error and body is not None and not codes and body.get("type") in ("knowledge_search", "knowledge")
    )
    raw = clip(str(body if body is not None else list(result.texts)), 400)
    if good and judge:
        assert body is not None
        judge_success(result, body)
    return Answer(good, body, frozenset(codes), result.is_error, raw)


EXCERPT_BOUND = 10_000
"""Characters a query result's excerpt may hold by default: one addressed window (the seed says
"bounded excerpt"; CHOICES.md; strict holds it to 2000). Counted in code points, so a server that
counts UTF-16 units is held to no more than its own count."""


def judge_success(result: ToolResult, body: dict[str, Any]) -> None:
    """What every success of the tool holds, whichever check asked for it (seed 003): "Query returns
    JSON text with {"type":"knowledge_search",...}", "Addressed read returns JSON text with
    type='knowledge'". A text block's text is a JSON object of the answer's type, the same JSON value
    as ``structuredContent`` when that is there too; a query result's excerpts are bounded."""
    kind = str(body.get("type"))
    requirement = sk.SK_017 if kind == "knowledge_search" else sk.SK_018
    objects = [value for text in result.texts if isinstance(value := _json_object(text), dict)]
    expect(
        result.texts,
        requirement,
        f"a successful {kind} answer has no text content block: the seed's result is JSON text",
    )
    expect(
        objects,
        requirement,
        lambda: f"the text of a successful {kind} answer is not a JSON object: {clip(result.texts[0], 200)!r}",
    )
    if result.has_structured:
        expect(
            any(_same_json(value, body) for value in objects),
            requirement,
            lambda: (
                f"the text of a successful {kind} answer is not the same JSON as its structuredContent: the text "
                f"says {clip(json.dumps(objects[0], ensure_ascii=False), 200)!r}, structuredContent "
                f"{clip(json.dumps(body, ensure_ascii=False), 200)!r}"
            ),
        )
    if kind != "knowledge_search":
        return
    found = body.get("results")
    for hit in found if isinstance(found, list) else ():
        excerpt = hit.get("excerpt") if isinstance(hit, dict) else None
        if isinstance(excerpt, str):
            expect(len(excerpt) <= EXCERPT_BOUND, sk.SK_017, partial(_long_excerpt, hit, excerpt))


def _long_excerpt(hit: dict[str, Any], excerpt: str) -> str:
    return (
        f"the result for {clip(str(hit.get('knowledge_item_id')), 80)!r} has an excerpt of {len(excerpt)} "
        f"characters; a bounded excerpt runs to one addressed window ({EXCERPT_BOUND}) at most: "
        f"{clip(excerpt, 120)!r}"
    )


def _json_object(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON value: a number is a number whatever its
    spelling (1 and 1.0), but true is not 1 (Python's ``==`` says it is)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def open_sessions(
    stack: ExitStack, cfg: Any, target: Any, chosen: str | None, who: Mapping[str, tuple[str, str]]
) -> tuple[dict[str, McpSession], bool]:
    """One Agent Session MCP session per identity (name -> token, route), streamable HTTP where
    there is one, kept open by ``stack``. An MCP target fixed to one identity (its own token) gets
    one session, named by the first identity, and ``True``: it is not the identity the suite
    minted, so only checks that need no provisioned world can use it."""
    from conformance.mcp.endpoints import agent_endpoints

    sessions: dict[str, McpSession] = {}
    fixed = False
    stack.callback(collect_closed)  # runs after every session below has closed: one collection, not one each
    for position, (name, (token, route)) in enumerate(who.items()):
        endpoint = (found := agent_endpoints(cfg, target, chosen, token, route)).get("http") or found.get("stdio")
        if endpoint is None:
            continue
        if token not in (endpoint.token, *dict(endpoint.env).values()):
            if position:
                continue
            fixed = True
        from conformance.mcp.session import connect

        try:
            sessions[name] = stack.enter_context(connect(endpoint, cfg.timeout_seconds, collect=False))
        except NotServing as exc:  # the tool's server, not the harness: search_knowledge is not callable there
            sk.SK_009.fail(f"the Agent Session MCP server that serves search_knowledge {exc}")
    return sessions, fixed


def envelope_types(answer: Answer) -> set[str]:
    """Every key and string value of the answer's top level and of its ``error`` object (where a
    ``knowledge_unavailable`` envelope can be named)."""
    body = answer.body or {}
    values = {v for v in body.values() if isinstance(v, str)} | set(body)
    inner = body.get("error")
    if isinstance(inner, dict):
        values |= {v for v in inner.values() if isinstance(v, str)}
    return values


def message_of(answer: Answer) -> str:
    """The human-readable message of a refusal (top level, or inside ``error`` or ``feedback``)."""
    body = answer.body or {}
    for holder in (body, body.get("error"), body.get("feedback")):
        if isinstance(holder, dict) and isinstance(holder.get("message"), str):
            return str(holder["message"])
    return answer.raw if answer.body is None else ""


# ----------------------------------------------------------------- corpus
@dataclass
class Corpus:
    """The documents of the search_knowledge world, each findable by its unique token."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    texts: dict[str, str] = field(default_factory=dict)  # item -> content of its first revision
    titles: dict[str, str] = field(default_factory=dict)  # item -> title of its first revision
    bases: dict[str, str] = field(default_factory=dict)  # item -> base

    def token(self, name: str) -> str:
        return f"kc{name}{self.tag}"

    @property
    def direction_query(self) -> str:
        return "deploying " + self.token("dir")

    @property
    def evidence_query(self) -> str:
        """A query whose rare term only ``sk-exact`` holds, and whose other word no document holds
        whole: ``sk-meaning`` holds only other forms of it (a stem and character n-grams shared)."""
        return "photography " + self.token("exact")

    def build(self) -> list[dict[str, Any]]:
        dir_token = self.token("dir")
        filler = " ".join(
            [
                "catering",
                "menu",
                "soup",
                "bread",
                "salad",
                "coffee",
                "invoice",
                "parking",
                "garden",
                "lamp",
                "window",
                "chair",
                "ticket",
                "orange",
                "violin",
                "harbour",
                "meadow",
                "pencil",
            ]
            * 3
        )
        items: dict[str, tuple[str, str, str]] = {
            # lexical evidence only: the query words once, in a long unrelated text
            "sk-lexical": (MAIN, "Catering notes", f"{filler} deploying {dir_token} {filler}"),
            # semantic evidence only: other forms of the query word, not the word itself
            "sk-semantic": (
                MAIN,
                "Deployments",
                "deploy deployed deployment deployments deploys redeploy redeployed deployer deployable",
            ),
            "sk-both": (MAIN, "Deploying guide", f"deploying {dir_token} deployment deploy deployed steps and checks"),
            # evidence of one kind only, for the evidence query: an exact rare term in unrelated text,
            # and meaning without a shared whole word (forms of the query's word, sharing its stem)
            "sk-exact": (MAIN, "Parking rota", f"{filler} {self.token('exact')} {filler}"),
            "sk-meaning": (
                MAIN,
                "Studio portfolio",
                "photographer photographic photographed photographs photograph photographers photographing",
            ),
            "sk-window": (MAIN, "Window text", "".join(WINDOW_PIECES * 24)),
            # longer than one addressed window (EXCERPT_BOUND) in code points and in UTF-16 units, and
            # found by its token: a query result's excerpt of it must be cut
            "sk-long": (MAIN, "Long text", f"{self.token('long')} " + "".join(WINDOW_PIECES * 700)),
            "sk-evolving": (MAIN, "Evolving", f"first revision {self.token('first')} of an item that changes"),
            "sk-archived": (MAIN, "Archived", f"archived item {self.token('hidden')}"),
            "sk-unpublished": (MAIN, "Unpublished", f"unpublished item {self.token('hidden')}"),
            "sk-other": (OTHER, "Other base", f"narrowing {self.token('shared')} in the other base"),
            "sk-main-shared": (MAIN, "Main shared", f"narrowing {self.token('shared')} in the main base"),
            "sk-private": (PRIVATE, "Private", f"private item {self.token('hidden')} {self.token('private')}"),
            "sk-in-archived-base": (ARCHIVED_BASE, "In an archived base", f"base archived {self.token('hidden')}"),
        }
        for i in range(12):
            items[f"sk-filler-{i:02d}"] = (
                MAIN,
                f"Filler {i}",
                f"{self.token('many')} filler document {i} " + "word " * i,
            )
        for item, (base, title, content) in items.items():
            self.texts[item], self.titles[item], self.bases[item] = content, title, base
        bases: dict[str, list[dict[str, Any]]] = {}
        for item, (base, title, content) in items.items():
            bases.setdefault(base, []).append({"id": item, "title": title, "content": content})
        return [{"id": b, "name": b, "items": found} for b, found in bases.items()]


def utf16_slice(text: str, start: int, count: int) -> str:
    """``count`` UTF-16 code units from ``start`` (a cut pair gives a lone surrogate, as JSON carries it)."""
    units = text.encode("utf-16-le", "surrogatepass")
    return units[2 * start : 2 * (start + count)].decode("utf-16-le", "surrogatepass")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def pairs(ordered: list[str]) -> Iterator[tuple[str, str]]:
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            yield a, b


NOT_OFFERED_CODES = frozenset({"jsonrpc:-32601", "jsonrpc:-32602"})  # method not found; invalid params (unknown tool)


def not_offered(probe: Answer) -> bool:
    """Whether a failed plain query says the server has no search_knowledge tool (not offered: not
    verified), rather than a tool that is there and breaks (an internal error: the checks then run
    and fail the rules it breaks, instead of a skip that would hide it)."""
    if probe.ok:
        return False
    text = probe.raw.lower()
    return bool(probe.codes & NOT_OFFERED_CODES) or "unknown" in text or "not found" in text
