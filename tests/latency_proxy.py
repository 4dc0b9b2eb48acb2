"""A TCP proxy on loopback that delays every chunk by a fixed time each way: a Core that far
away, as the suite meets one behind a load balancer, in another region or over a VPN."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from tests.loopback_proxy import LoopbackProxy


class LatencyProxy(LoopbackProxy):
    """Forwards to ``upstream_port`` with ``delay`` seconds added in each direction (order kept:
    each chunk leaves ``delay`` after it arrived, not after the one before it left)."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        super().__init__(upstream_port)
        self.delay = delay

    async def _client(self, down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            down_writer.close()
            return
        await asyncio.gather(self._pipe(down_reader, up_writer), self._pipe(up_reader, down_writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                arrived, data = await queue.get()
                wait = arrived + self.delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    with contextlib.suppress(OSError):
                        writer.close()
                    return
                writer.write(data)
                with contextlib.suppress(OSError):
                    await writer.drain()

        sender = asyncio.ensure_future(send())
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                queue.put_nowait((time.monotonic(), data))
        queue.put_nowait((time.monotonic(), b""))
        await sender


@contextlib.contextmanager
def cpu_load(processes: int = 2) -> Iterator[None]:
    """Every core busy with a spinning process of its own, as on a loaded CI runner."""
    import subprocess
    import sys

    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL) for _ in range(processes)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)
