"""The test-control extension (schemas/control-openapi.yaml): drive state and time."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from simulator.core import Canned
from simulator.errors import ApiError
from simulator.http import component_check, error_response, json_response, read_json, validate
from simulator.store import ItemInput

if TYPE_CHECKING:
    from simulator.core import Core
    from simulator.transcript import Transcript

Endpoint = Callable[[Request], Awaitable[Response]]


RELEASE = "1.2.0"  # of schemas/control-openapi.yaml
FEATURES = (
    "clock.routes",
    "faults.lost",
    "faults.respond_next",
    "faults.respond_next.after",
    "faults.respond_next.text",
    "transcript",
    "transcript.since",
    "knowledge",
)
"""Every optional feature of the control contract: the simulator offers them all."""


def control_routes(
    core: Core, transcript: Transcript, *, on_corpus: Callable[[str | None], None] = lambda route: None
) -> list[Route]:
    """``on_corpus(route)`` hears that a workspace's corpus went (``None``: every workspace's)."""

    async def body_of(request: Request, component: str) -> dict[str, Any]:
        return validate(
            await read_json(request, max_bytes=64 << 20), component_check("control-openapi.yaml", component)
        )

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), core.config.control_token.encode()
            ):
                return error_response(ApiError(401, "unauthorized", "the control extension needs its own credential"))
            try:
                return await handler(request)
            except ApiError as err:
                return error_response(err)
            except ValueError as err:
                return error_response(ApiError(400, "invalid_request", str(err)))

        return endpoint

    def workspace(request: Request) -> str:
        route = str(request.path_params["route"])
        if core.store.workspace(route) is None:
            raise ApiError(404, "route_unavailable", f"no workspace {route!r}")
        return route

    async def reset(request: Request) -> Response:
        core.store.reset()
        on_corpus(None)
        core.faults.clear()
        core.canned.clear()
        core.withheld.clear()
        transcript.clear()
        if core.config.clock_start is not None:
            core.clock.set(core.config.clock_start)
        return Response(status_code=204)

    async def create_workspace(request: Request) -> Response:
        body = await body_of(request, "Workspace")
        if not core.store.create_workspace(body["route"], body.get("mode", "normal")):
            raise ApiError(409, "workspace_exists", f"workspace {body['route']!r} already exists")
        return json_response({"route": body["route"], "mode": body.get("mode", "normal")}, 201)

    async def delete_workspace(request: Request) -> Response:
        route = workspace(request)
        core.store.delete_workspace(route)
        on_corpus(route)
        core.withheld[:] = [w for w in core.withheld if w[0] != route]
        return Response(status_code=204)

    async def replace_corpus(request: Request) -> Response:
        route = workspace(request)
        body = await body_of(request, "Corpus")
        bases = [
            (
                b["id"],
                b.get("name", b["id"]),
                [ItemInput(i["id"], i["title"], i["content"], i.get("summary")) for i in b["items"]],
            )
            for b in body["bases"]
        ]
        replaced = core.store.replace_corpus(route, bases, core.clock.now())
        on_corpus(route)
        return json_response({"items": replaced})

    async def publish(request: Request) -> Response:
        route = workspace(request)
        body = await body_of(request, "RevisionInput")
        item_id = request.path_params["item_id"]
        rev = core.store.publish_revision(
            route, item_id, body["content"], body.get("title"), body.get("summary"), core.clock.now()
        )
        if rev is None:
            raise ApiError(404, "item_not_found", f"no item {item_id!r} in {route!r}")
        return json_response({"item_id": item_id, "revision_id": rev}, 201)

    async def set_scope(request: Request) -> Response:
        route = workspace(request)
        body = await body_of(request, "Scope")
        scope = core.store.set_scope(route, request.path_params["account"], body["bases"])
        return json_response({"bases": list(scope.bases or ()), "version": scope.version})

    async def set_mode(request: Request) -> Response:
        route = workspace(request)
        body = await body_of(request, "Mode")
        core.store.set_mode(route, body["mode"], body.get("legacy_status"))
        mode, status = core.mode(route)
        return json_response({"mode": mode, "legacy_status": status})

    async def clock(request: Request) -> Response:
        if request.method == "PUT":
            core.clock.set((await body_of(request, "Clock"))["now"])
        return json_response({"now": core.clock.now()})

    async def advance(request: Request) -> Response:
        body = await body_of(request, "ClockAdvance")
        return json_response({"now": core.clock.advance(float(body["seconds"]), body.get("routes"))})

    async def mint(request: Request) -> Response:
        body = await body_of(request, "IdentityInput")
        if core.store.workspace(body["route"]) is None:
            raise ApiError(404, "route_unavailable", f"no workspace {body['route']!r}")
        ident = core.store.mint_identity(
            body["account"], body["route"], body.get("hub", core.config.hub), body.get("session_id")
        )
        return json_response(ident.__dict__, 201)

    async def fault(request: Request) -> Response:
        body = await body_of(request, "Fault")
        if body["kind"] == "respond_next":
            answer = Canned(body["status"], body.get("body"), body.get("text"))
            core.canned.append([body["endpoint"], body.get("route"), int(body.get("after", 0)), answer])
        else:
            core.faults.append((body["kind"], body.get("route")))
        return json_response(body, 201)

    async def lost(request: Request) -> Response:
        """Each withheld response as it would have gone out: with the app's wire member names."""
        route = request.query_params.get("route")
        names = request.app.state.wire_names
        withheld = [
            {"route": r, "status": status, "body": json.loads(names.turn(body.encode("utf-8")))}
            for r, status, body in core.withheld
            if route in (None, r)
        ]
        return json_response({"responses": withheld})

    async def get_transcript(request: Request) -> Response:
        since = request.query_params.get("since", "0")
        if not since.isascii() or not since.isdigit():
            raise ApiError(400, "invalid_request", "since must be a whole number of requests (0 or more)")
        return json_response(
            {"requests": transcript.since(int(since)), "next": transcript.recorded, "epoch": transcript.epoch}
        )

    async def extension(request: Request) -> Response:
        return json_response({"version": RELEASE, "features": list(FEATURES)})

    table: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
        ("/", extension, ["GET"]),
        ("/reset", reset, ["POST"]),
        ("/workspaces", create_workspace, ["POST"]),
        ("/workspaces/{route}", delete_workspace, ["DELETE"]),
        ("/workspaces/{route}/corpus", replace_corpus, ["PUT"]),
        ("/workspaces/{route}/items/{item_id}/revisions", publish, ["POST"]),
        ("/workspaces/{route}/scopes/{account}", set_scope, ["PUT"]),
        ("/workspaces/{route}/mode", set_mode, ["PUT"]),
        ("/clock", clock, ["GET", "PUT"]),
        ("/clock/advance", advance, ["POST"]),
        ("/identities", mint, ["POST"]),
        ("/faults", fault, ["POST"]),
        ("/faults/lost", lost, ["GET"]),
        ("/transcript", get_transcript, ["GET"]),
    ]
    return [Route(path, guarded(handler), methods=methods) for path, handler, methods in table]
