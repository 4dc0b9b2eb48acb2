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
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

MASK = "***"
MIN_LENGTH = 6  # shorter values are too likely to be ordinary words to mask safely
FRAGMENT = 8  # a secret's first or last characters, at least this many, are masked on their own too


class Scrubber:
    """The set of secret values known to this process, and their replacement."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._size = 0  # how many values there are: values are only ever added, so it names the set's state
        self._sweep: tuple[int, list[str], re.Pattern[str] | None, int] | None = None

    def add(self, value: object) -> None:
        """Remember a secret; also its URL-encoded and JSON-escaped spellings."""
        if not isinstance(value, str) or len(value) < MIN_LENGTH:
            return
        spellings = {
            value,
            quote(value, safe=""),
            json.dumps(value)[1:-1],
            html.escape(value),
            html.escape(value, quote=False),
        }
        with self._lock:
            self._values.update(s for s in spellings if len(s) >= MIN_LENGTH)
            self._size = len(self._values)

    def add_url(self, url: str | None) -> None:
        """The user-info password and every query value of a URL are secrets."""
        if not url:
            return
        try:
            parts = urlsplit(url)
        except ValueError:  # e.g. an unclosed IPv6 bracket: take the user-info by hand
            netloc = url.partition("//")[2].split("/", 1)[0]
            userinfo = netloc.rpartition("@")[0]
            self.add(userinfo.partition(":")[2])
            self.add(unquote(userinfo.partition(":")[2]))
            self.add(userinfo)
            return
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

    def reach(self) -> int:
        """How far from its first character a mask can reach: the longest value and a fragment."""
        return self._prepared()[2]

    def _prepared(self) -> tuple[list[str], re.Pattern[str] | None, int]:
        """The values longest first, one pattern that matches wherever any of them or a fragment
        of one could be, and the reach: a run scrubs some ten thousand texts, nearly all of them
        clean, so one search decides most of them (rebuilt only when a value was added)."""
        sweep = self._sweep
        if sweep is None or sweep[0] != self._size:
            with self._lock:
                size, values = self._size, sorted(self._values, key=len, reverse=True)
            # Every whole value longer than a fragment starts with its head, so heads, tails and
            # the short values themselves are all a clean text must lack.
            marks = {part for v in values for part in ((v[:FRAGMENT], v[-FRAGMENT:]) if len(v) > FRAGMENT else (v,))}
            pattern = re.compile("|".join(map(re.escape, sorted(marks)))) if marks else None
            reach = (len(values[0]) if values else 0) + FRAGMENT
            sweep = self._sweep = (size, values, pattern, reach)
        return sweep[1], sweep[2], sweep[3]

    def text(self, text: str) -> str:
        values, pattern, _ = self._prepared()
        if pattern is None or pattern.search(text) is None:
            return text
        return _mask(text, values)

    def data(self, node: Any) -> Any:
        """A copy of a JSON-like value with every string scrubbed."""
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {self.text(str(k)): self.data(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.data(v) for v in node]
        return node


def _mask(text: str, values: list[str]) -> str:
    """Every value (longest first) and every fragment of one in ``text`` replaced by the mask."""
    # Longest first, so a value never leaves a tail of a longer one behind.
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    for value in values:
        if len(value) > FRAGMENT:
            text = _mask_fragments(text, value)
    return text


def _mask_fragments(text: str, value: str) -> str:
    """Mask what a cut left of ``value``: a run of its first characters (the text was cut
    after them) or of its last ones (cut before them). :func:`clip` cuts after scrubbing,
    so this is the safety net for a cut made anywhere else, a Core's own included."""
    head, tail = value[:FRAGMENT], value[-FRAGMENT:]
    start = 0
    while (i := text.find(head, start)) != -1:
        end, k = i + FRAGMENT, FRAGMENT
        while end < len(text) and k < len(value) and text[end] == value[k]:
            end, k = end + 1, k + 1
        text, start = text[:i] + MASK + text[end:], i + len(MASK)
    start = len(text)
    while (i := text.rfind(tail, 0, start)) != -1:
        begin, k = i, len(value) - FRAGMENT
        while begin > 0 and k > 0 and text[begin - 1] == value[k - 1]:
            begin, k = begin - 1, k - 1
        text, start = text[:begin] + MASK + text[i + FRAGMENT :], begin
    return text


SECRETS = Scrubber()
"""The process-wide scrubber: the target configuration, the control wire and the
target loader add to it; the reports, the console and the recorder read it."""


def scrub(text: str) -> str:
    return SECRETS.text(text)


def clip(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` (negative: the last), scrubbed before the cut so
    that no part of a secret survives it.

    Only a window of the text is scrubbed when it holds nothing to mask: the kept characters plus
    the reach of a secret (its length, and a fragment more for a tail matched across the window's
    edge), which is all a mask over the kept part could start from. A window with something to
    mask scrubs the whole text, since masks shift what follows them."""
    size = abs(limit) + SECRETS.reach()
    if len(text) > size:
        window = text[:size] if limit >= 0 else text[-size:]
        clean = scrub(window)
        if clean == window:
            return clean[limit:] if limit < 0 else clean[:limit]
    clean = scrub(text)
    return clean[limit:] if limit < 0 else clean[:limit]
