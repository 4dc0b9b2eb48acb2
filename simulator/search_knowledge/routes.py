"""HTTP wiring of the ``search_knowledge`` tool (seed 003).

- ``POST {BASE}/knowledge/tools/search_knowledge``: the tool's arguments as the JSON body, the
  Agent Session token as the bearer. It is the Knowledge service the MCP path calls (over
  stdio or streamable HTTP, in-process or over a network), so both transports reach the same
  store, states and clock. 200 with the result; a refusal with the tool's error body.
- Control (``/_control/v1/workspaces/{route}/knowledge/...``, schemas/control-openapi.yaml):
  publish a revision, archive or reactivate an item or a base, unpublish an item, switch the
  runtime, set an account's scopes, and show the audit log of these service operations.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from simulator.errors import ApiError
from simulator.http import component_check, error_response, in_store_thread, json_response, read_json, validate
from simulator.search_knowledge.tool import Context, SearchKnowledge, SkError

if TYPE_CHECKING:
    from simulator.core import Core

TOOL_PATH = "/agent-api/v1/workspaces/{route}/knowledge/tools/search_knowledge"
Endpoint = Callable[[Request], Awaitable[Response]]


def tool_route(core: Core, tool: SearchKnowledge) -> Route:
    async def endpoint(request: Request) -> Response:
        try:
            caller = core.authenticate(
                request.headers.get("authorization"), request.path_params["route"], knowledge_op=False
            )
            arguments = await read_json(request, max_bytes=core.config.max_body_bytes)
        except ApiError as err:
            return error_response(err)

        def call() -> Response:
            try:
                return json_response(
                    tool.call(Context(caller.route, caller.identity.account), arguments, core.clock.now())
                )
            except SkError as err:
                return json_response(err.body(), err.status)

        if not core.store.concurrent:
            return call()

        def in_snapshot() -> Response:  # a served simulator: off the event loop, from one state of the store
            with core.store.snapshot():
                return call()

        return await in_store_thread(request.app.state, in_snapshot)

    return Route(TOOL_PATH, endpoint, methods=["POST"])


def control_routes(core: Core, tool: SearchKnowledge) -> list[Route]:
    state = tool.state

    def guarded(handler: Endpoint) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), core.config.control_token.encode()
            ):
                return error_response(ApiError(401, "unauthorized", "the control extension needs its own credential"))
            route = str(request.path_params["route"])
            if core.store.workspace(route) is None:
                return error_response(ApiError(404, "route_unavailable", f"no workspace {route!r}"))
            try:
                return await handler(request)
            except ApiError as err:
                return error_response(err)

        return endpoint

    async def body_of(request: Request, component: str) -> dict[str, Any]:
        return validate(
            await read_json(request, max_bytes=64 << 20), component_check("control-openapi.yaml", component)
        )

    async def publish(request: Request) -> Response:
        route, item_id = request.path_params["route"], request.path_params["item_id"]
        body = await body_of(request, "KnowledgeRevisionInput")
        previous = core.store.current_revision(route, item_id)
        now = core.clock.now()
        rev = core.store.publish_revision(route, item_id, body["content"], body.get("title"), None, now)
        if rev is None or previous is None:
            raise ApiError(404, "item_not_found", f"no item {item_id!r} in {route!r}")
        state.published(route, item_id, previous.revision_id, rev, now)
        return json_response({"item_id": item_id, "revision_id": rev}, 201)

    async def item_state(request: Request) -> Response:
        route, item_id = request.path_params["route"], request.path_params["item_id"]
        body = await body_of(request, "KnowledgeItemState")
        if core.store.current_revision(route, item_id) is None:
            raise ApiError(404, "item_not_found", f"no item {item_id!r} in {route!r}")
        state.set_item(route, item_id, active=body.get("active"), published=body.get("published"), at=core.clock.now())
        return Response(status_code=204)

    async def base_state(request: Request) -> Response:
        route, base_id = request.path_params["route"], request.path_params["base_id"]
        body = await body_of(request, "KnowledgeBaseState")
        if base_id not in core.store.base_ids(route):
            raise ApiError(404, "base_not_found", f"no base {base_id!r} in {route!r}")
        state.set_base(route, base_id, active=body["active"], at=core.clock.now())
        return Response(status_code=204)

    async def runtime(request: Request) -> Response:
        body = await body_of(request, "KnowledgeRuntime")
        state.set_runtime(request.path_params["route"], body["enabled"], core.clock.now())
        return json_response({"enabled": body["enabled"]})

    async def scopes(request: Request) -> Response:
        body = await body_of(request, "KnowledgeScopes")
        state.set_scopes(request.path_params["route"], request.path_params["account"], body["scopes"])
        return json_response({"scopes": sorted(body["scopes"])})

    async def audit(request: Request) -> Response:
        return json_response({"events": list(state.of(request.path_params["route"]).audit)})

    base = "/_control/v1/workspaces/{route}/knowledge"
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/items/{item_id}/revisions", publish, ["POST"]),
        ("/items/{item_id}/state", item_state, ["PUT"]),
        ("/bases/{base_id}/state", base_state, ["PUT"]),
        ("/runtime", runtime, ["PUT"]),
        ("/scopes/{account}", scopes, ["PUT"]),
        ("/audit", audit, ["GET"]),
    ]
    return [Route(base + path, guarded(handler), methods=methods) for path, handler, methods in table]
