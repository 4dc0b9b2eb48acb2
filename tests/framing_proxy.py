"""A proxy that frames a Core's answers wrongly: each response's Content-Length counts the body's
UTF-16 code units instead of its bytes (a JavaScript ``body.length``), so a body with multibyte
characters is cut short and its rest spills into the next answer on the kept-alive connection."""

from __future__ import annotations

import asyncio
import contextlib

from tests.loopback_proxy import LoopbackProxy


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


class Utf16FramingProxy(LoopbackProxy):
    """Forwards to ``upstream_port``, one upstream connection per client connection, every answer's
    Content-Length miscounted."""

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
