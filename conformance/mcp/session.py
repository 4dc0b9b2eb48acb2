"""A synchronous MCP client for the suite, on the official ``mcp`` SDK: one event loop in a
helper thread per connection, and raw tool results (the SDK's own client-side validation of
``structuredContent`` is bypassed: judging the result is the suite's job, with a named
requirement, not an exception of the client library)."""

from __future__ import annotations

import gc
import json
import shlex
import ssl
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import anyio.from_thread
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conformance.mcp import evidence


@dataclass(frozen=True)
class Endpoint:
    """Where an MCP path is: a command to spawn (stdio) or a streamable-HTTP URL with its bearer token."""

    transport: str  # "stdio" or "http"
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    token: str = ""

    def describe(self) -> str:
        return (
            f"stdio: {self.argv[0].rsplit('/', 1)[-1]} …"
            if self.transport == "stdio"
            else f"streamable HTTP: {self.url}"
        )


@dataclass(frozen=True)
class ToolResult:
    """A tools/call result as the server sent it."""

    is_error: bool
    structured: Any  # None when the result carries no structuredContent
    has_structured: bool
    texts: tuple[str, ...]
    protocol_error: str | None = None  # a JSON-RPC error instead of a tool result: the server's answer, judged as such

    def text_json(self) -> Any:
        """The first text block parsed as JSON, or None when there is none or it is not JSON."""
        for text in self.texts:
            try:
                return json.loads(text)
            except ValueError:
                continue
        return None


class McpSession:
    """One connected MCP client session."""

    def __init__(self, portal: Any, client: Client, endpoint: Endpoint | None = None) -> None:
        self.portal, self.client, self.endpoint = portal, client, endpoint

    def tools(self) -> list[types.Tool]:
        result = self.portal.call(self.client.session.list_tools)
        return list(result.tools)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        try:
            raw = self.portal.call(self.client.session.send_request, request, types.CallToolResult)
        except MCPError as exc:  # the server answered, with an error instead of a result: not the suite breaking
            result = ToolResult(False, None, False, (), protocol_error=f"JSON-RPC error {exc.code}: {exc.message}")
        else:
            texts = tuple(block.text for block in raw.content if isinstance(block, types.TextContent))
            present = "structured_content" in raw.model_fields_set and raw.structured_content is not None
            result = ToolResult(bool(raw.is_error), raw.structured_content, present, texts)
        self._record(name, arguments, result)
        return result

    def _record(self, name: str, arguments: dict[str, Any], result: ToolResult) -> None:
        endpoint = self.endpoint
        where = (
            "" if endpoint is None else (shlex.join(endpoint.argv) if endpoint.transport == "stdio" else endpoint.url)
        )
        text = result.texts[0] if result.texts else json.dumps(result.structured, ensure_ascii=False)
        evidence.record(
            endpoint.transport if endpoint else "",
            where,
            name,
            arguments,
            {"is_error": result.is_error, "protocol_error": result.protocol_error, "text": text},
        )


class NotServing(Exception):
    """The server under test did not answer ``initialize``: it exited, closed the stream, refused
    the session or timed out. That is the implementation's failure, judged against the rule of
    its path (not a harness error); a command that cannot be started at all (not found, not
    executable) or a URL nothing listens on is a configuration error, raised as it is."""


def _answered(exc: BaseException) -> MCPError | None:
    """The MCP error inside what entering a session raised, if the server (not the network) caused it."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _answered(inner)) is not None:
                return found
    return None


@cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every HTTP session of the run: each new one reads the CA
    bundle again (some 50 ms), and a run opens a session per test; a context is safe to share."""
    return httpx2.create_ssl_context()


@contextmanager
def connect(endpoint: Endpoint, timeout: float = 30.0, *, collect: bool = True) -> Iterator[McpSession]:
    """A session on ``endpoint`` for the duration of the block.

    On leaving, the session's garbage is collected at once: left to a later automatic
    collection, its finalisers can run inside a compile (pytest rewriting a module a test
    imports), where CPython 3.11.7 raises ``SystemError: AST constructor recursion depth
    mismatch``. ``collect=False`` leaves that to the caller, who closes several sessions and
    then collects once (a full collection of the suite's heap takes a tenth of a second or more)."""
    try:
        with ExitStack() as stack:
            portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
            if endpoint.transport == "stdio":
                params = StdioServerParameters(
                    command=endpoint.argv[0], args=list(endpoint.argv[1:]), env=dict(endpoint.env) or None
                )
                client = Client(params, read_timeout_seconds=timeout, cache=None)
            else:
                headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
                http = httpx2.AsyncClient(headers=headers, timeout=timeout, verify=_tls())
                client = Client(
                    streamable_http_client(endpoint.url, http_client=http), read_timeout_seconds=timeout, cache=None
                )
            try:
                stack.enter_context(portal.wrap_async_context_manager(client))
            except Exception as exc:
                error = _answered(exc)
                if error is None:
                    raise
                raise NotServing(f"{endpoint.describe()} did not answer initialize: {error.message}") from exc
            yield McpSession(portal, client, endpoint)
    finally:
        if collect:
            gc.collect()


@contextmanager
def connect_all(endpoints: Sequence[Endpoint], timeout: float = 30.0) -> Iterator[list[McpSession]]:
    """Sessions on several endpoints at once, started side by side: a stdio server is a process
    that takes a second or two to start, and a test of two sessions need not wait for both in
    turn. Each is closed on leaving (the last opened first), then the garbage is collected once.
    The first failure to start is raised once the others are closed."""
    with connect_each(endpoints, timeout) as sessions:
        failed = next((s for s in sessions if isinstance(s, BaseException)), None)
        if failed is not None:
            raise failed
        yield [s for s in sessions if isinstance(s, McpSession)]


@contextmanager
def connect_each(endpoints: Sequence[Endpoint], timeout: float = 30.0) -> Iterator[list[McpSession | NotServing]]:
    """Like :func:`connect_all`, but a server that does not answer ``initialize`` takes its place
    in the list as its :class:`NotServing`, so the others still serve; any other failure to
    start is raised once the started sessions are closed."""
    managers = [connect(endpoint, timeout, collect=False) for endpoint in endpoints]
    try:
        with ExitStack() as stack:
            with ThreadPoolExecutor(max_workers=max(1, len(managers))) as pool:
                entered = [pool.submit(manager.__enter__) for manager in managers]
                sessions: list[McpSession | NotServing] = []
                for manager, future in zip(managers, entered, strict=True):
                    error = future.exception()
                    if error is None:
                        sessions.append(future.result())
                        stack.push(manager.__exit__)
                    elif isinstance(error, NotServing):
                        sessions.append(error)
            failed = next((e for f in entered if (e := f.exception()) and not isinstance(e, NotServing)), None)
            if failed is not None:
                raise failed
            yield sessions
    finally:
        gc.collect()
