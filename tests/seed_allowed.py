"""Cores that behave in ways the seed allows and the simulator does not.

Each wrapper is ASGI middleware around ``simulator.create_app(...)`` that changes
one habit (ranking order, title wording, how a request outside the project's
choices is handled). The suite must pass every one of them unless the user asks
for strict codes, so the project's tests run the suite against them over loopback.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from conformance.common.open import serve_over_loopback
from simulator import create_app
from simulator.core import Caller, Core
from simulator.errors import ApiError
from simulator.miniatures.search import FillsTheBound
from simulator.store import Revision, Run
from tests.suite_command import warm_suite

CONTROL_TOKEN = "seed-allowed-control"
CONTROL = "/_control/"
Reply = tuple[int, dict[str, Any]]


class Wrapper:
    """ASGI middleware that may change one request and its response (buffered whole)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def applies(self, path: str) -> bool:
        return not path.startswith(CONTROL)

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        return headers, body, None

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        """A changed status and JSON body, or None to pass the response on byte for byte."""
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.applies(scope["path"]):
            await self.app(scope, receive, send)
            return
        raw, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            raw += message.get("body", b"")
            more = message.get("more_body", False)
        headers, raw, reply = self.request(scope["path"], list(scope["headers"]), raw)
        if reply is not None:
            await _send(send, reply[0], json.dumps(reply[1]).encode(), [(b"content-type", b"application/json")])
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return dict(await receive())

        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            status, content = start["status"], b"".join(chunks)
            parsed = _json(content)
            if not isinstance(parsed, dict):
                await _send(send, status, content, start.get("headers", []))
                return
            changed = self.response(scope["path"], status, parsed)
            if changed is None:
                await _send(send, status, content, start.get("headers", []))
                return
            encoded = json.dumps(changed[1], ensure_ascii=False, separators=(",", ":")).encode()
            await _send(send, changed[0], encoded, start.get("headers", []))

        await self.app({**scope, "headers": headers}, replay, capture)


async def _send(send: Any, status: int, content: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*kept, (b"content-length", str(len(content)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": content})


def _json(body: bytes) -> Any:
    """The body as JSON, or None when it is not (a wrapper leaves such bodies to the Core)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _refusal(message: str) -> Reply:
    return 400, {"error": "invalid_request", "message": message}


# ------------------------------------------------------------ the wrappers
class DecoratedTitles(Wrapper):
    """Semantic-style ranking and decorated titles: every hint title gets a prefix, hints come in reverse order."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/knowledge/search") and status == 200 and isinstance(body.get("hints"), list):
            return status, {**body, "hints": [{**h, "title": "Doc: " + h["title"]} for h in reversed(body["hints"])]}
        return None


class OneHint(Wrapper):
    """Returns only the best hint: "at most three" allows one."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/knowledge/search") and status == 200 and isinstance(body.get("hints"), list):
            return status, {**body, "hints": body["hints"][:1]}
        return None


class RefusesLargeLimit(Wrapper):
    """Refuses a search ``limit`` above three with 400 instead of clamping it."""

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        if (
            path.endswith("/knowledge/search")
            and isinstance(parsed, dict)
            and isinstance(parsed.get("limit"), int)
            and parsed["limit"] > 3
        ):
            return headers, body, _refusal("limit must be 1..3")
        return headers, body, None


class ClampsMaxBytes(Wrapper):
    """Clamps a read ``max_bytes`` outside 4096..32768 into the range instead of refusing it."""

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        value = parsed.get("max_bytes") if isinstance(parsed, dict) else None
        if path.endswith("/knowledge/read") and isinstance(value, int) and not isinstance(value, bool):
            parsed["max_bytes"] = min(max(value, 4096), 32768)
            body = json.dumps(parsed).encode()
        return headers, body, None


class ErrorsWithoutMessage(Wrapper):
    """Error bodies carry only ``error`` (and the feedback fields): no ``message``."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if status >= 400 and "message" in body:
            return status, {k: v for k, v in body.items() if k != "message"}
        return None


class IgnoresContentType(Wrapper):
    """Reads every request body as JSON whatever its Content-Type says."""

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        return (
            [(k, v) for k, v in headers if k.lower() != b"content-type"] + [(b"content-type", b"application/json")],
            body,
            None,
        )


class LenientSearch(Wrapper):
    """Repairs a search body it could read (types, lengths, limit, unknown fields) instead of refusing it."""

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        if path.endswith("/knowledge/search") and isinstance(parsed, dict) and "run_id" in parsed:
            query = str(parsed.get("query") or "binding")[:1000]
            body = json.dumps({"query": query, "run_id": parsed["run_id"]}).encode()
        return headers, body, None


class TurnsOfAnotherSchema(Wrapper):
    """Turn responses name another schema_version: a WIRE-002 violation only a schema check sees."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/turns") and status == 200:
            return status, {**body, "schema_version": "bailing.agent-turn.v0"}
        return None


class ControlWithoutLegacyStatus(Wrapper):
    """A control extension that offers legacy mode but not the optional ``legacy_status`` knob."""

    def applies(self, path: str) -> bool:
        return path.startswith(CONTROL) and path.endswith("/mode")

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        if isinstance(parsed, dict) and "legacy_status" in parsed:
            return headers, body, _refusal("legacy_status: unknown field")
        return headers, body, None


class ControlWithoutLostReadback(Wrapper):
    """A control extension whose lose fault works but that cannot say what it withheld (no GET /faults/lost)."""

    def applies(self, path: str) -> bool:
        return path.startswith(CONTROL) and path.endswith("/faults/lost")

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        return headers, body, (404, {"error": "not_found", "message": "unknown path"})


class ControlAtFirstRelease(Wrapper):
    """A control extension frozen at release 1.0.0 of control-openapi.yaml: no ``GET /`` to list
    features, a clock advance that refuses the later ``routes`` member, and none of the later
    endpoints (lost-response read-back, transcript, the search_knowledge states, respond_next)."""

    def applies(self, path: str) -> bool:
        return path.startswith(CONTROL)

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        gone = (404, {"error": "not_found", "message": "unknown path"})
        if (
            path.rstrip("/") == CONTROL + "v1"
            or path.endswith(("/faults/lost", "/transcript"))
            or "/knowledge/" in path
        ):
            return headers, body, gone
        if path.endswith("/clock/advance") and isinstance(parsed, dict) and set(parsed) - {"seconds"}:
            return headers, body, _refusal(f"unknown field(s) {sorted(set(parsed) - {'seconds'})}")
        if path.endswith("/faults") and isinstance(parsed, dict) and parsed.get("kind") == "respond_next":
            return headers, body, _refusal("kind: not one of the 1.0.0 faults")
        return headers, body, None


class CoreSwap(Wrapper):
    """Not a rewrite on the way: the wrapped app's own Core becomes ``core_class`` (a subclass of
    the clean Core that changes one habit), so its cursors, expiry and binding stay its own."""

    core_class: ClassVar[type[Core]] = Core

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        inner = app
        while not hasattr(inner, "state"):
            inner = inner.app
        inner.state.core.__class__ = self.core_class

    def applies(self, path: str) -> bool:
        return False


class _SmallPagesCore(Core):
    """The clean Core, but every page is at most ``SmallPages.PAGE_BYTES`` of JSON, whatever was asked."""

    def _page(
        self, caller: Caller, run: Run, ref: str, rev: Revision, offset: int, consumed: int, max_bytes: int
    ) -> dict[str, Any]:
        return super()._page(caller, run, ref, rev, offset, consumed, min(max_bytes, SmallPages.PAGE_BYTES))


class SmallPages(CoreSwap):
    """Answers every read with pages far smaller than asked (the seed bounds a page from above only):
    a budget-sized chain takes a few hundred pages. Not a rewrite on the way: the Core itself pages
    small, so its cursors, expiry and binding stay its own (the wrapped app's Core becomes one that does)."""

    PAGE_BYTES = 1400  # complete JSON of a page: a few hundred content bytes next to the ref and cursor

    core_class = _SmallPagesCore


class _SmallerBudgetCore(Core):
    chain_budget = 65536  # the clean Core's pages, but its chains stop here


class SmallerChainBudget(CoreSwap):
    """A Core whose read chains stop after 65536 content bytes and that says so (capabilities and pages
    advertise ``read_chain_max_bytes: 65536``): the seed fixes only "at most 131072"."""

    BUDGET = 65536
    core_class = _SmallerBudgetCore

    def applies(self, path: str) -> bool:
        return not path.startswith(CONTROL)

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        limits = body.get("limits")
        if path.endswith("/knowledge/capabilities") and isinstance(limits, dict):
            return status, {**body, "limits": {**limits, "read_chain_max_bytes": self.BUDGET}}
        if path.endswith("/knowledge/read") and "read_chain_max_bytes" in body:
            return status, {**body, "read_chain_max_bytes": self.BUDGET}
        return None


class _NoMeaning:
    """An embedding model that relates nothing to anything above its similarity threshold."""

    def embed(self, text: str) -> list[float]:
        return [0.0] * 8


class SemanticFindsNothing(CoreSwap):
    """A search_knowledge whose semantic model finds nothing for the suite's queries (a thresholded
    model, or one trained on other text): the seed does not define semantic similarity, so that is
    "not verified" for SK-029, never a failure, and hybrid and rrf stand on the lexical list alone."""

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        inner = app
        while not hasattr(inner, "state"):
            inner = inner.app
        inner.state.search_knowledge.state.embedder = _NoMeaning()


class _OwnHintsToTheByteCore(FillsTheBound):
    """Hints worded by the Core: a summary of its own, taken from the content whatever summary was
    seeded, and titles and summaries filled up to the 4096 bytes of the whole JSON, to the byte."""

    def _hint(self, caller: Caller, run: Run, rev: Revision) -> dict[str, Any]:
        own = rev.content[: min(600, len(rev.content) // 2)]  # never the whole document (SRCH-006)
        return {**super()._hint(caller, run, rev), "summary": own}


class OwnHintsToTheByte(CoreSwap):
    """Derives its own summaries from the content and fills search (and on_demand turn) hints up to
    the 4096-byte bound exactly, with no ellipsis and nothing spare: the seed asks only "at most"."""

    core_class = _OwnHintsToTheByteCore


class NoTruncatedMember(Wrapper):
    """Read pages leave ``truncated`` out: the seed lists a page's members as ref, revision, content and
    next_cursor; a cursor (or budget_exhausted) says the read is incomplete."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/knowledge/read") and status == 200 and "truncated" in body:
            return status, {k: v for k, v in body.items() if k != "truncated"}
        return None


class _MemberOrderCore(Core):
    """The clean Core, but a turn's payload is compared as sent: its members in another order are another payload."""

    def start_turn(self, caller: Caller, body: dict[str, Any]) -> tuple[int, bytes]:
        orders: dict[tuple[str, str, str], list[str]] = self.__dict__.setdefault("_member_orders", {})
        key = (caller.identity.session_id, caller.route, str(body.get("client_turn_id")))
        if orders.setdefault(key, list(body)) != list(body):
            raise ApiError(409, "turn_conflict", "this turn identity was already used with another payload")
        return super().start_turn(caller, body)


class MemberOrderMatters(CoreSwap):
    """Refuses the replay of a turn whose JSON members come in another order (409 turn_conflict): the
    run stays pinned, which is all the seed asks; strict expects the replay (JSON members are unordered)."""

    core_class = _MemberOrderCore


def _map_refs(value: Any, change: Any) -> Any:
    """``value`` with every ``ref`` member (at any depth) passed through ``change``."""
    if isinstance(value, dict):
        return {k: (change(v) if k == "ref" and isinstance(v, str) else _map_refs(v, change)) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_refs(v, change) for v in value]
    return value


class PaddedBase64Refs(Wrapper):
    """References are standard base64, with padding, of a 16-byte opaque ID (one with '+' or '/'),
    decoded as Python's default ``b64decode`` does: whatever follows the padding is ignored, so
    the reference with text appended after its padding is the same reference."""

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.ids: dict[str, bytes] = {}
        self.refs: dict[bytes, str] = {}
        self.rng = random.Random(1)

    def _opaque(self, ref: str) -> str:
        if ref not in self.ids:
            raw = self.rng.randbytes(16)
            while not set(base64.b64encode(raw).decode()) & set("+/"):
                raw = self.rng.randbytes(16)
            self.ids[ref], self.refs[raw] = raw, ref
        return base64.b64encode(self.ids[ref]).decode()

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        if path.endswith("/knowledge/read") and isinstance(parsed, dict) and isinstance(parsed.get("ref"), str):
            try:
                parsed["ref"] = self.refs.get(base64.b64decode(parsed["ref"]), "unknown-reference")
            except ValueError:
                parsed["ref"] = "undecodable"
            body = json.dumps(parsed).encode()
        return headers, body, None

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        return (status, _map_refs(body, self._opaque)) if status == 200 else None


class CursorNamesItsChain(Wrapper):
    """A cursor is self-contained: it names the chain it continues, and the ref sent beside it
    is not consulted (the cursor stays bound to its run, context, scope and revision)."""

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.owners: dict[str, str] = {}

    def request(
        self, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, Reply | None]:
        parsed = _json(body)
        if path.endswith("/knowledge/read") and isinstance(parsed, dict) and parsed.get("cursor") in self.owners:
            parsed["ref"] = self.owners[parsed["cursor"]]
            body = json.dumps(parsed).encode()
        return headers, body, None

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/knowledge/read") and status == 200 and isinstance(body.get("next_cursor"), str):
            self.owners[body["next_cursor"]] = str(body["ref"])
        return None


class ForbiddenWithoutToken(Wrapper):
    """A missing or unknown token gets 403 instead of 401: the seed says only "authenticated"."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        return (403, body) if status == 401 else None


class IntegerRevisions(Wrapper):
    """Read pages name their revision by a number, not a string: the seed does not say which."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if path.endswith("/knowledge/read") and status == 200 and isinstance(body.get("revision"), str):
            return status, {**body, "revision": int(hashlib.sha256(body["revision"].encode()).hexdigest()[:12], 16)}
        return None


class FeedbackNextActionOnly(Wrapper):
    """Error bodies carry next_action inside a feedback object that has nothing else (CHOICES.md accepts it)."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        if status >= 400 and "next_action" in body:
            rest = {k: v for k, v in body.items() if k != "next_action"}
            return status, {**rest, "feedback": {"next_action": body["next_action"]}}
        return None


class DeliveryExtraMember(Wrapper):
    """An on_demand turn's knowledge_delivery object carries a member the delivery schema does not name."""

    def response(self, path: str, status: int, body: dict[str, Any]) -> tuple[int, Any] | None:
        context = body.get("context")
        if (
            path.endswith("/turns")
            and status == 200
            and isinstance(context, dict)
            and isinstance(context.get("knowledge_delivery"), dict)
        ):
            delivery = {**context["knowledge_delivery"], "generated_by": "hint index v2"}
            return status, {**body, "context": {**context, "knowledge_delivery": delivery}}
        return None


# Where OtherPaths serves search, read and turns (capabilities stays where the seed puts it).
OTHER_PATHS = {"search": "/kapi/{route}/find", "read": "/kapi/{route}/page", "turns": "/kapi/{route}/turn"}
_DEFAULT_TAILS = {"search": "/knowledge/search", "read": "/knowledge/read", "turns": "/turns"}


class OtherPaths(Wrapper):
    """Serves search, read and turns at other paths (a target configuration's ``[paths]`` says where) and
    answers the default ones 404. Every request that still reaches a default path is kept in ``strays``."""

    strays: ClassVar[list[str]] = []

    def applies(self, path: str) -> bool:
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        for name, template in OTHER_PATHS.items():
            found = re.fullmatch(re.escape(template).replace(re.escape("{route}"), "(?P<route>[^/]+)"), path)
            if found:
                moved = f"/agent-api/v1/workspaces/{found['route']}{_DEFAULT_TAILS[name]}"
                await self.app({**scope, "path": moved, "raw_path": moved.encode()}, receive, send)
                return
        if path.startswith("/agent-api/") and path.endswith(tuple(_DEFAULT_TAILS.values())):
            self.strays.append(f"{scope['method']} {path}")
            await _send(
                send, 404, b'{"error":"not_found","message":"unknown path"}', [(b"content-type", b"application/json")]
            )
            return
        await self.app(scope, receive, send)


def core(*wrappers: type[Wrapper]) -> Any:
    """The simulator (clean, with control) inside the given wrappers, the first outermost."""
    app: Any = create_app(seed=0, control_token=CONTROL_TOKEN, demo=False)
    for wrapper in reversed(wrappers):
        app = wrapper(app)
    return app


# ------------------------------------------------------------ running the suite
@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve ``app`` on loopback for the length of the block."""
    url, stop = serve_over_loopback(app)
    try:
        yield url
    finally:
        stop()


def run_suite(
    app: Any, reports: Path, *args: str, strict: bool = False, config: str = ""
) -> tuple[int, dict[str, Any], str]:
    """Run the suite against ``app`` as a live Core with control; returns exit code, results and output.
    ``config`` is more of the target configuration (TOML tables after [control] and [wire]); ``{url}``
    in an argument is the served app's URL (e.g. its MCP endpoint for ``--mcp-target``)."""
    reports.mkdir(parents=True, exist_ok=True)
    with served(app) as url:
        target = reports / "target.toml"
        target.write_text(
            f'[control]\nurl = "{url}/_control/v1"\ntoken = {{env = "KC_SEED_ALLOWED_CONTROL"}}\n'
            + ("[wire]\ncodes = {strict = true}\n" if strict else "")
            + config,
            "utf-8",
        )
        cmd = [
            *warm_suite(),
            "--no-shrink",
            "--target",
            url,
            "--target-config",
            str(target),
            "--report-dir",
            str(reports),
            *(a.replace("{url}", url) for a in args),
        ]
        env = {**os.environ, "KC_SEED_ALLOWED_CONTROL": CONTROL_TOKEN}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    results = json.loads((reports / "results.json").read_text("utf-8"))
    return proc.returncode, results, proc.stdout


def statuses(results: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["status"] for r in results["requirements"]}


def failures(results: dict[str, Any]) -> dict[str, str]:
    """Failed requirement ID -> the reason the report gives."""
    return {r["id"]: r["reason"] for r in results["requirements"] if r["status"] == "failed"}


def only(*ids: str) -> list[str]:
    return [a for rid in ids for a in ("--requirement", rid)]
