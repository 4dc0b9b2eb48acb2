"""A proxy on 127.0.0.1 in front of a server of the project's own, run on an event loop in a thread
of its own: the base of the proxies that put a Core far away or make it misframe its answers."""

from __future__ import annotations

import asyncio
import threading


class LoopbackProxy:
    """Listens on a free loopback port and hands each client connection to :meth:`_client`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoopbackProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the {type(self).__name__} did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
