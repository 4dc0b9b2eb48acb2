"""One exchange as observe saw it: only what a rule needs, bounded, and no secret.

A body is kept up to a cap (a page is at most 32768 bytes, a search 4096: anything far larger is
judged by its size alone), the credential only as a digest, and a few response headers. What
arrives on the wire is hostile: nothing here interprets it beyond counting bytes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from conformance.common.transport import decode_body  # the suite's bounded Content-Encoding decoder

REQUEST_KEEP = 96 * 1024
"""Bytes of a request body kept: a turn's user_input is at most 64000 characters."""
RESPONSE_KEEP = 64 * 1024
"""Bytes of a response body kept (after decoding): twice the largest page the contract allows."""
KEPT_HEADERS = frozenset({"content-type", "content-encoding", "cache-control"})


def digest(secret: str) -> str:
    """A stable name for a credential, reference or cursor that is not the value itself."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass
class BodyCapture:
    """The first ``keep`` bytes of a body and its whole size, filled chunk by chunk as it streams."""

    keep: int
    data: bytearray = field(default_factory=bytearray)
    size: int = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    def body(self, coding: str = "") -> Body:
        """The captured body as it came (decoded later, by the judge: never on the forwarding path)."""
        return Body(bytes(self.data), self.size, self.size == len(self.data), None, coding.strip())


@dataclass(frozen=True)
class Body:
    data: bytes
    size: int  # bytes of the whole body (decoded, once ``decoded``); -1 when unknown
    complete: bool  # ``data`` is the whole body
    broken: str | None = None  # why the body could not be decoded
    coding: str = ""  # its Content-Encoding, until decoded

    def decoded(self, keep: int = RESPONSE_KEEP) -> Body:
        """The body with its content coding undone within ``keep`` bytes."""
        if not self.coding or self.coding.lower() == "identity":
            return self
        if not self.complete:
            return Body(b"", -1, False)  # a coded body cut short cannot be decoded, nor its size known
        decoded, broken, _over = decode_body(self.data, self.coding, keep)
        if broken is not None:
            return Body(b"", -1, False, broken)
        return Body(decoded, len(decoded), True)


EMPTY = Body(b"", 0, True)


@dataclass(frozen=True)
class Seen:
    """One request and its answer, in the order observe saw them.

    ``sent`` and ``answered`` are on the judge's clock (injected; a recording's own times);
    ``credential`` is the digest of the bearer token, never the token; ``status`` 0 means the
    upstream gave no answer (the proxy answered 502 itself)."""

    number: int
    sent: float
    answered: float
    method: str
    path: str
    query: str
    credential: str | None
    request: Body
    status: int
    response: Body
    headers: tuple[tuple[str, str], ...] = ()
    headers_known: bool = True  # a recording without the answer's headers (the suite's transcript) says so

    def decoded(self) -> Seen:
        """This exchange with both bodies' content codings undone (the judge's first step)."""
        request, response = self.request.decoded(REQUEST_KEEP), self.response.decoded(RESPONSE_KEEP)
        if request is self.request and response is self.response:
            return self
        return replace(self, request=request, response=response)

    def header(self, name: str) -> str | None:
        found = [v for k, v in self.headers if k == name]
        return ", ".join(found) if found else None
