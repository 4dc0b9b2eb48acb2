"""One scrubber for every secret value a run knows.

Redacting headers is not enough: a Core may echo a token in an error body, a URL
may carry credentials in its user-info or query, and a traceback may show a
local variable holding a token. So every known secret *value* is collected here
(configured tokens, the control credential, tokens minted during the run, URL
secrets) and replaced wherever it appears, in everything the suite writes or
prints. Scrubbing by value is what schemathesis' sanitizer does too.
"""

from __future__ import annotations

import html
import json
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

MASK = "***"
MIN_LENGTH = 6  # shorter values are too likely to be ordinary words to mask safely


class Scrubber:
    """The set of secret values known to this process, and their replacement."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, value: object) -> None:
        """Remember a secret; also its URL-encoded and JSON-escaped spellings."""
        if not isinstance(value, str) or len(value) < MIN_LENGTH:
            return
        spellings = {value, quote(value, safe=""), json.dumps(value)[1:-1], html.escape(value), html.escape(value, quote=False)}
        with self._lock:
            self._values.update(s for s in spellings if len(s) >= MIN_LENGTH)

    def add_url(self, url: str | None) -> None:
        """The user-info password and every query value of a URL are secrets."""
        if not url:
            return
        parts = urlsplit(url)
        if parts.password:
            self.add(parts.password)
            self.add(unquote(parts.password))
        if parts.username and parts.password:
            self.add(f"{parts.username}:{parts.password}")
        for _, value in parse_qsl(parts.query, keep_blank_values=False):
            self.add(value)

    @property
    def values(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._values)

    def text(self, text: str) -> str:
        # Longest first, so a value never leaves a tail of a longer one behind.
        for value in sorted(self.values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, MASK)
        return text

    def data(self, node: Any) -> Any:
        """A copy of a JSON-like value with every string scrubbed."""
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {self.text(str(k)): self.data(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.data(v) for v in node]
        return node


SECRETS = Scrubber()
"""The process-wide scrubber: the target configuration, the control wire and the
target loader add to it; the reports, the console and the recorder read it."""


def scrub(text: str) -> str:
    return SECRETS.text(text)
