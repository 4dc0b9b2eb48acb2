"""Miniatures that only concurrency shows: one client at a time never sees them, so the
sequential suite passes them, and ``knowledge-conformance load`` must catch them.

``read_coalesced_across_identities``: a front end that coalesces identical reads. A read whose
route and body are those of a read still being served waits for that one and gets its answer,
as a request-coalescing cache in front of a slow backend does; the key leaves out the
credential. So when a reference reaches another account (with its run) while its owner reads
it, the stranger gets the owner's page (a broken binding, REF-009), or the owner the stranger's
refusal. A sequential client never has two reads in flight, so nothing is ever coalesced."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Receive, Scope, Send

from simulator.core import Core
from simulator.miniatures._asgi import Captured, Miniature, Wrapper, capture, read_body, replay


class ReadsCoalescedAcrossIdentities(Wrapper):
    operations = frozenset({"read"})
    gather_seconds = 0.005
    """How long the first of identical reads waits for others to join it before it is served."""

    def __init__(self, app: ASGIApp, core: Core) -> None:
        super().__init__(app, core)
        self._in_flight: dict[tuple[str, bytes], asyncio.Future[Captured]] = {}

    async def handle(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        key = (route, raw)  # the bug: no credential in the key
        leader = self._in_flight.get(key)
        if leader is not None:
            answer = await asyncio.shield(leader)
        else:
            future: asyncio.Future[Captured] = asyncio.get_running_loop().create_future()
            self._in_flight[key] = future
            try:
                await asyncio.sleep(self.gather_seconds)
                answer = await capture(self.app, scope, replay(raw))
                future.set_result(answer)
            finally:
                del self._in_flight[key]
                if not future.done():
                    future.cancel()  # the joined reads fail with the one they joined
        await answer.send_to(send)


MINIATURES: dict[str, Miniature] = {
    "read_coalesced_across_identities": ReadsCoalescedAcrossIdentities,
}
