"""A proxy that frames a Core's answers wrongly: each response's Content-Length counts the body's
UTF-16 code units instead of its bytes (a JavaScript ``body.length``), so a body with multibyte
characters is cut short and its rest spills into the next answer on the kept-alive connection."""

from __future__ import annotations

import asyncio
import contextlib
import threading


def utf16_units(body: bytes) -> int:
    return len(body.decode("utf-8", "replace").encode("utf-16-le")) // 2


async def _message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 message with a Content-Length body: (head, body), or None at the end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head, await reader.readexactly(length) if length else b""


def _miscounted(head: bytes, body: bytes) -> bytes:
    lines = [
        b"content-length: %d" % utf16_units(body) if line.lower().startswith(b"content-length:") else line
        for line in head.split(b"\r\n")
    ]
    return b"\r\n".join(lines)


class Utf16FramingProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream_port``, one upstream connection per client connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Utf16FramingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the framing proxy did not start")
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
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while (request := await _message(reader)) is not None:
                up_writer.write(request[0] + request[1])
                await up_writer.drain()
                answer = await _message(up_reader)
                if answer is None:
                    break
                writer.write(_miscounted(*answer) + answer[1])
                await writer.drain()
        writer.close()
        up_writer.close()
