"""A synchronous MCP client for the suite, on the official ``mcp`` SDK: one event loop in a
helper thread per connection, and raw tool results (the SDK's own client-side validation of
``structuredContent`` is bypassed: judging the result is the suite's job, with a named
requirement, not an exception of the client library).

Every read is bounded (``bounded``: a cap on each message, a deadline on each exchange), and what a
server sends that is not an answer (over the cap, not JSON, a batch, an answer to another id) fails
the rule of its path (MCP-001 for the Agent Session path, MCP-002 for the job path) with one line;
no answer in time, or no server to reach, is a harness error with one line."""

from __future__ import annotations

import json
import shlex
import ssl
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import cache, partial
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conformance.common.outcomes import ContractViolation, HarnessError
from conformance.common.rules import Rule
from conformance.common.untrusted import shown
from conformance.mcp import evidence
from conformance.mcp import rules as mcp
from conformance.mcp.bounded import BoundedClient, Fault, Faults, stdio_streams
from conformance.mcp.closing import collect_closed
from conformance.mcp.records import MESSAGE_CAP, Endpoint, NotServing, ToolResult

GRACE = 5.0
"""What a whole call may take beyond the target's timeout (the SDK's own wait ends at the timeout)."""
PATHS: dict[str, tuple[str, Rule]] = {
    "agent": ("Agent Session", mcp.MCP_001),
    "jobs": ("Fixed Client Token", mcp.MCP_002),
}
"""Each MCP path's name and the rule a server breaks when it does not speak MCP's JSON-RPC on it."""
SDK_READ_FAILURES = (
    "Failed to parse",
    "SSE stream failed",
    "SSE stream ended",
    "server answered a request with 202",
    "Unexpected content type",
)
"""How the SDK words the error it puts in place of an answer it could not read: the server's fault."""

T = TypeVar("T")


MAX_PAGES = 100
"""The most pages of a paginated MCP list the suite reads."""


class McpSession:
    """One connected MCP client session; every request is bounded (see :meth:`_ask`)."""

    def __init__(
        self,
        portal: Any,
        client: Client,
        endpoint: Endpoint | None = None,
        faults: Faults | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.portal, self.client, self.endpoint = portal, client, endpoint
        self.faults, self.timeout = faults or Faults(), timeout

    def tools(self) -> list[types.Tool]:
        """Every tool the server lists, following ``nextCursor`` through every page (MCP pagination:
        a server may list one tool a page). A cursor seen before, or more than ``MAX_PAGES`` pages,
        ends the walk: a server that pages forever must not hold the run."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            result = self._ask("tools/list", partial(self.client.session.list_tools, params=params))
            tools += result.tools
            cursor = result.next_cursor
            if not cursor or cursor in seen:
                break
            seen.add(cursor)
        return tools

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        try:
            raw = self._ask(f"tools/call {name}", self.client.session.send_request, request, types.CallToolResult)
        except MCPError as exc:  # the server answered, with an error instead of a result: not the suite breaking
            result = ToolResult(False, None, False, (), protocol_error=f"JSON-RPC error {exc.code}: {exc.message}")
        else:
            texts = tuple(block.text for block in raw.content if isinstance(block, types.TextContent))
            present = "structured_content" in raw.model_fields_set and raw.structured_content is not None
            result = ToolResult(bool(raw.is_error), raw.structured_content, present, texts)
        self._record(name, arguments, result)
        return result

    def _ask(self, what: str, request: Callable[..., Awaitable[T]], *args: Any) -> T:
        """One request under a whole-call deadline; a fault the transport noted, or an error the SDK
        put in place of an unreadable answer, becomes the outcome it is (:func:`judged`)."""
        deadline = self.timeout + GRACE
        try:
            answer: T = self.portal.call(_within, deadline, request, *args)
        except MCPError as exc:
            self._judge(what, _sdk_fault(exc, self.timeout))
            raise
        except TimeoutError:
            self._judge(what, Fault("timeout", f"no answer within {deadline:g} s"))
            raise
        self._judge(what, None)
        return answer

    def _judge(self, what: str, otherwise: Fault | None) -> None:
        fault = self.faults.take() or otherwise
        if fault is not None:
            raise judged(self.endpoint, what, fault)

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


async def _within(seconds: float, request: Callable[..., Awaitable[T]], *args: Any) -> T:
    with anyio.fail_after(seconds):
        return await request(*args)


def judged(endpoint: Endpoint | None, what: str, fault: Fault) -> Exception:
    """What a fault reading ``what`` is: a server that broke JSON-RPC fails its path's rule; no
    answer in time, or no server to reach, is a harness error. One line either way."""
    where = f"the {PATHS[endpoint.path][0]} MCP server ({endpoint.describe()})" if endpoint else "the MCP server"
    if fault.kind == "malformed":
        rule = PATHS[endpoint.path][1] if endpoint else mcp.MCP_001
        return rule.violated(f"{where} broke JSON-RPC answering {what}: {fault.reason}")
    return HarnessError(f"{where}, asked {what}: {fault.reason}")


def _sdk_fault(exc: MCPError, timeout: float) -> Fault | None:
    """The fault behind an error the SDK made itself (no answer in time, an answer it could not
    read), or None for an error the server sent."""
    if exc.code == types.REQUEST_TIMEOUT:
        return Fault("timeout", f"no answer within {timeout:g} s")
    if exc.message.startswith(SDK_READ_FAILURES):
        return Fault("malformed", shown(exc.message.splitlines()[0], 300))
    return None


def _answered(exc: BaseException) -> MCPError | None:
    """The MCP error inside what entering a session raised, if the server (not the network) caused it."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _answered(inner)) is not None:
                return found
    return None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


CLOSED_STREAMS = (anyio.BrokenResourceError, anyio.ClosedResourceError)
"""What the SDK's tasks raise when a session's streams were closed under them."""


def _unwrapped(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a group from a session's task groups stands for: its one exception (a check that failed
    in the block, a fault), else the first outcome among them, else a harness error on one line."""
    leaves = _leaves(group)
    if len(leaves) == 1:
        return leaves[0]
    chosen = next((e for e in leaves if isinstance(e, ContractViolation | HarnessError)), None)
    if chosen is not None:
        return chosen
    return HarnessError(f"the MCP session failed: {type(leaves[0]).__name__}: {shown(leaves[0], 300)}")


def _not_served(endpoint: Endpoint, faults: Faults, exc: Exception, timeout: float) -> Exception | None:
    """What a failure to open a session is (None: raise it as it is, a command that cannot start)."""
    error, leaf = _answered(exc), _leaves(exc)[0]
    fault = faults.take() or (None if error is None else _sdk_fault(error, timeout) or Fault("refused", error.message))
    if fault is not None and fault.kind == "unreachable":
        return HarnessError(f"{endpoint.describe()} cannot be reached: {fault.reason}")
    if fault is not None:
        said = faults.stderr_tail()
        tail = f" (its stderr ends: {said})" if said else ""
        return NotServing(f"{endpoint.describe()} did not answer initialize: {shown(fault.reason, 300)}{tail}")
    if isinstance(leaf, OSError) and endpoint.transport == "stdio":
        return None
    return HarnessError(f"{endpoint.describe()}: no MCP session: {type(leaf).__name__}: {shown(leaf, 300)}")


@cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every MCP session of the run: each new one reads the CA
    bundle again (some 50 ms). The MCP client library's own default, which may be the operating
    system's trust store, so a Core behind a private CA the machine trusts is reached as the SDK
    reaches it; a context is safe to share."""
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
            faults = Faults()
            client, http = _client(endpoint, timeout, faults)
            if http is not None:  # the SDK leaves a client it was given open: closed after the session ends
                stack.callback(portal.call, http.aclose)
            try:
                stack.enter_context(portal.wrap_async_context_manager(client))
            except Exception as exc:
                problem = _not_served(endpoint, faults, exc, timeout)
                if problem is None:
                    raise
                raise problem from exc
            yield McpSession(portal, client, endpoint, faults, timeout)
    except BaseExceptionGroup as group:  # the session's task groups wrap what the block raised
        if all(isinstance(e, CLOSED_STREAMS) for e in _leaves(group)) and isinstance(group.__context__, Exception):
            # The block failed (a call past its deadline) and the SDK's reader then tripped on the
            # streams closed for it: the block's failure is the outcome, not the reader's.
            raise group.__context__ from None
        raise _unwrapped(group) from None
    finally:
        if collect:
            collect_closed()


def _client(endpoint: Endpoint, timeout: float, faults: Faults) -> tuple[Client, BoundedClient | None]:
    """An SDK client on ``endpoint`` whose reads are bounded (``bounded``), noting faults in
    ``faults``; and its HTTP client, which the caller closes."""
    if endpoint.transport == "stdio":
        streams = stdio_streams(endpoint.argv, dict(endpoint.env), faults)
        return Client(streams, read_timeout_seconds=timeout, cache=None), None
    headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
    http = BoundedClient(faults, timeout, headers=headers, timeout=timeout + GRACE, verify=_tls())
    transport = streamable_http_client(endpoint.url, http_client=http, max_sse_event_size=MESSAGE_CAP)
    return Client(transport, read_timeout_seconds=timeout, cache=None), http


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
        collect_closed()
