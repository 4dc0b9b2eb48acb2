"""HAR 1.2: the recording format of browsers and API gateways, read and written.

Reading (``observe --har FILE``): each entry becomes an exchange as the proxy would have seen it,
with the recording's own times (``startedDateTime``, ``time``), so expiry is judged from when the
gateway saw each request. The file is hostile too: its size is capped before it is parsed, each
body is cut to the proxy's caps, and its credentials are digested and scrubbed as the proxy's are.

Writing (``observe --record-har FILE``): what the proxy kept of each exchange, in the order it
saw them, as one HAR a later ``observe --har`` judges the same way. No secret is written: the
credential is replaced by its digest (``Bearer observed-<digest>``, which the reader maps back to
the same identity) and every body is scrubbed."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from conformance import __version__
from conformance.common.secrets import SECRETS
from conformance.observe.credentials import PSEUDONYM, Credentials
from conformance.observe.seen import KEPT_HEADERS, REQUEST_KEEP, RESPONSE_KEEP, Body, BodyCapture, Seen

MAX_HAR_BYTES = 512 * 1024 * 1024
"""The largest recording read: a HAR is parsed whole, so its size bounds the memory it takes."""


class HarError(ValueError):
    """A file that is not a HAR observe can read: a usage error, named with what is wrong."""


def _capture(text: str, encoding: str | None, keep: int) -> Body:
    if encoding == "base64":
        try:
            raw = base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError):
            raw = b""
    else:
        raw = text.encode("utf-8", "surrogatepass")
    capture = BodyCapture(keep)
    capture.add(raw)
    return capture.body()


def _when(entry: dict[str, Any]) -> tuple[float, float]:
    started = str(entry.get("startedDateTime", ""))
    try:
        sent = dt.datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise HarError(f"an entry's startedDateTime {started[:40]!r} is not an ISO 8601 date-time") from None
    took = entry.get("time", 0)
    return sent, sent + (float(took) / 1000.0 if isinstance(took, (int, float)) and took >= 0 else 0.0)


def _headers(message: dict[str, Any]) -> list[tuple[str, str]]:
    found = message.get("headers", [])
    if not isinstance(found, list):
        return []
    return [(str(h.get("name", "")).lower(), str(h.get("value", ""))) for h in found if isinstance(h, dict)]


def read_har(path: str | Path, credentials: Credentials, auth_header: str = "Authorization") -> Iterator[Seen]:
    """The exchanges of a HAR file in their recorded order."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_HAR_BYTES:
            raise HarError(f"{file}: {size} bytes, over the {MAX_HAR_BYTES} a recording may have")
        data = json.loads(file.read_text("utf-8", errors="surrogateescape"))
    except OSError as exc:
        raise HarError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise HarError(f"{file}: not JSON ({str(exc)[:120]})") from None
    entries = data.get("log", {}).get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise HarError(f"{file}: not a HAR (no log.entries array)")
    timed = sorted(
        ((_when(e), i, e) for i, e in enumerate(entries) if isinstance(e, dict)), key=lambda x: (x[0][0], x[1])
    )
    name = auth_header.lower()
    for number, ((sent, answered), _i, entry) in enumerate(timed, start=1):
        request, response = entry.get("request") or {}, entry.get("response") or {}
        url = urlsplit(str(request.get("url", "")))
        request_headers, response_headers = _headers(request), _headers(response)
        post = request.get("postData") or {}
        content = response.get("content") or {}
        status = response.get("status", 0)
        yield Seen(
            number,
            sent,
            answered,
            str(request.get("method", "GET")).upper(),
            url.path,
            url.query,
            credentials.seen(next((v for k, v in request_headers if k == name), None)),
            _capture(str(post.get("text", "")), post.get("encoding"), REQUEST_KEEP),
            int(status) if isinstance(status, int) and 100 <= status < 600 else 0,
            _capture(str(content.get("text", "")), content.get("encoding"), RESPONSE_KEEP),
            tuple((k, v) for k, v in response_headers if k in KEPT_HEADERS and k != "content-encoding"),
        )


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _text(body: Body) -> str:
    """A recorded body: scrubbed text (a body kept only in part says so in the HAR's comment)."""
    return SECRETS.text(body.data.decode("utf-8", "replace"))


class HarRecorder:
    """Writes each exchange as the proxy kept it, as it is judged (the judge's thread), to one HAR
    file written beside its final name and renamed over it when closed."""

    def __init__(
        self, path: str | Path, base_url: str, auth_header: str = "Authorization", scheme: str = "Bearer"
    ) -> None:
        self.path = Path(path)
        self.base_url = base_url.rstrip("/")
        self.auth_header = auth_header
        self.scheme = scheme
        self._partial = self.path.with_name(f".{self.path.name}.partial")
        self._out: IO[str] | None = self._partial.open("w", encoding="utf-8")
        self._out.write(
            '{"log": {"version": "1.2", "creator": {"name": "knowledge-conformance observe", "version": '
            f'{json.dumps(__version__)}}}, "entries": [\n'
        )
        self._first = True
        self._lock = threading.Lock()

    def add(self, seen: Seen) -> None:
        headers = [{"name": "Content-Type", "value": "application/json"}]
        if seen.credential is not None:
            headers.append({"name": self.auth_header, "value": f"{self.scheme} {PSEUDONYM}{seen.credential}".strip()})
        url = self.base_url + seen.path  # never the query: no request of the contract has one, a secret may
        entry: dict[str, Any] = {
            "startedDateTime": _iso(seen.sent),
            "time": round(max(0.0, seen.answered - seen.sent) * 1000.0, 3),
            "request": {
                "method": seen.method,
                "url": SECRETS.text(url),
                "httpVersion": "HTTP/1.1",
                "headers": headers,
                "queryString": [],
                "cookies": [],
                "headersSize": -1,
                "bodySize": seen.request.size,
                **(
                    {"postData": {"mimeType": "application/json", "text": _text(seen.request)}}
                    if seen.request.size
                    else {}
                ),
            },
            "response": {
                "status": seen.status,
                "statusText": "",
                "httpVersion": "HTTP/1.1",
                "headers": [{"name": k, "value": SECRETS.text(v)} for k, v in seen.headers if k != "content-encoding"],
                "cookies": [],
                "content": {
                    "size": seen.response.size,
                    "mimeType": seen.header("content-type") or "",
                    "text": _text(seen.response),
                },
                "redirectURL": "",
                "headersSize": -1,
                "bodySize": seen.response.size,
            },
            "cache": {},
            "timings": {"send": 0, "wait": round(max(0.0, seen.answered - seen.sent) * 1000.0, 3), "receive": 0},
        }
        if not (seen.request.complete and seen.response.complete):
            entry["comment"] = "a body was kept in part only (observe's caps)"
        with self._lock:
            if self._out is None:
                return
            self._out.write(("" if self._first else ",\n") + json.dumps(entry, ensure_ascii=False))
            self._first = False

    def close(self) -> None:
        with self._lock:
            if self._out is None:
                return
            self._out.write("\n]}}\n")
            self._out.close()
            self._out = None
        os.replace(self._partial, self.path)
