"""HTTP plumbing shared by the Core and control routes: bounded JSON bodies
validated against the project's schemas, and error envelopes."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol, TypeVar

import anyio.to_thread
import jsonschema_rs
import orjson
from anyio import CapacityLimiter
from starlette.datastructures import State
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from knowledge_schemas import load_registry
from knowledge_schemas.openapi import component_validator
from simulator.errors import ApiError
from simulator.sizing import dumps, has_lone_surrogate

T = TypeVar("T")


async def in_store_thread(state: State, work: Callable[[], T]) -> T:
    """``work`` on one of the app's store threads (``state.store_threads`` of them, the app's
    state, made on first use): off the event loop, and no more threads than are worth having on
    this machine."""
    limiter: CapacityLimiter | None = getattr(state, "store_limiter", None)
    if limiter is None:
        limiter = state.store_limiter = CapacityLimiter(state.store_threads)
    return await anyio.to_thread.run_sync(work, limiter=limiter)


class Validator(Protocol):
    def iter_errors(self, instance: Any) -> Any: ...


def json_response(body: Any, status: int = 200) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json")


def error_response(err: ApiError) -> Response:
    return json_response(err.body(), err.status)


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type; a request without a Content-Type is read as JSON too."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN = b"1" * 19


def _has_long_number(raw: bytes) -> bool:
    """Whether ``raw`` holds a run of 19 ASCII digits (``re``'s ``rb"\\d{19}"``): every digit
    mapped to ``1``, every other byte to ``0``, then one substring search. The regular expression
    tried a match at every digit and took some 3.5 µs of a 400-byte read body, ten times orjson's
    whole parse."""
    return _LONG_RUN in raw.translate(_DIGIT_MAP)


def _loads(raw: bytes) -> Any:
    """The standard library's reading of ``raw``, by orjson where the two agree (a third of the
    time). The standard library's own decides whatever orjson refuses (NaN, lone surrogate escapes,
    UTF-16, a byte order mark, nesting past 1024 levels: it accepts some of it, as before, and
    its messages name the rest) and any run of 19 digits: orjson reads an integer past 64 bits as
    a float, which the schema would then judge as another value than the one sent."""
    return _parsed(raw)[0]


def _parsed(raw: bytes) -> tuple[Any, bool]:
    """``_loads(raw)``, and whether the standard library read it: only its reading can hold a
    lone surrogate (orjson refuses every one)."""
    if not _has_long_number(raw):
        try:
            return orjson.loads(raw), False
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw), True


async def read_json(request: Request, *, max_bytes: int) -> dict[str, Any]:
    """The request's JSON object, or an ApiError: 415 for a body declared as something
    other than JSON (never guessed at), 413 past ``max_bytes``, else 400."""
    headers = request.headers
    return await receive_json(
        request.receive, headers.get("content-type"), headers.get("content-length"), max_bytes=max_bytes
    )


async def receive_json(
    receive: Receive, content_type: str | None, content_length: str | None, *, max_bytes: int
) -> dict[str, Any]:
    """``read_json`` from the ASGI messages themselves and the two headers' values (the Core's
    endpoints make no Starlette request: building one and looking its headers up was a tenth of a
    served read's own work). A disconnect is Starlette's ``ClientDisconnect``, as its request's."""
    if not is_json_media_type(content_type):
        raise ApiError(415, "unsupported_media_type", "send the request body as application/json")
    if content_length is not None and content_length.isdigit() and int(content_length) > max_bytes:
        raise ApiError(413, "payload_too_large", f"request body is over {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > max_bytes:
                    raise ApiError(413, "payload_too_large", f"request body is over {max_bytes} bytes")
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if not raw.strip():
        raise ApiError(400, "invalid_request", "request body is empty; a JSON object is required")
    try:
        body, lenient = _parsed(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(400, "invalid_request", f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    if lenient and has_lone_surrogate(body):
        raise ApiError(400, "invalid_request", "request body contains unpaired surrogate escapes")
    return body


class SchemaCheck:
    """A wire schema's validator with a compiled fast path: jsonschema-rs says "valid" in a few
    microseconds, where the Python validator takes about half a millisecond for a request body.
    Only acceptance is fast: whatever the fast path doubts goes to the Python validator
    (``jsonschema``, the project's reference), which then accepts it or names the first problem,
    so a refusal and its message are always the reference's."""

    def __init__(self, reference: Validator, fast: Any) -> None:
        self.reference = reference
        self.fast = fast

    def iter_errors(self, instance: Any) -> Any:
        accepted = self.fast is not None and self.fast.is_valid(instance)
        return iter(()) if accepted else self.reference.iter_errors(instance)


@cache
def schema_check(stem: str) -> SchemaCheck:
    """The check of a wire schema (``schemas/<stem>.schema.json``), references resolved in the registry."""
    registry = load_registry()
    return SchemaCheck(registry.validator(stem), registry.fast(stem))


@cache
def component_check(document: str, component: str) -> SchemaCheck:
    """The check of one ``components/schemas`` entry of a bundled OpenAPI document (the control's
    bodies: a corpus replaced through control is half a megabyte the Python validator walks)."""
    reference = component_validator(document, component)
    return SchemaCheck(reference, jsonschema_rs.validator_for(reference.schema, validate_formats=True))


def validate(body: dict[str, Any], validator: Validator) -> dict[str, Any]:
    """``body`` itself when it matches the schema, else a 400 naming the first problem."""
    errors = list(validator.iter_errors(body))
    if errors:
        first = min(errors, key=lambda e: list(e.absolute_path))
        where = "/".join(str(p) for p in first.absolute_path) or "(body)"
        raise ApiError(400, "invalid_request", f"{where}: {first.message[:300]}")
    return body
