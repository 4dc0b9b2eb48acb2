"""Every spelling of a secret a server can echo, and the needles an output check searches for.

A scrubber that knows only the raw value misses a token sent back URL-, JSON- or HTML-escaped,
hex-encoded or base64-encoded (alone or as ``Bearer <token>``, after 0, 1 or 2 bytes of prefix,
which shifts every base64 character), or cut to a slice. The needles are the full spellings, every
8-character window of the token, of its hex and of each base64 alignment's token-only part."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

import ahocorasick_rs

WINDOW = 8
"""Characters of a secret (or of one of its encodings) that count as a leak."""
SCHEME = "Bearer "
PREFIXES = (b"", b"x", b"xy")
"""Bytes before the secret when it is base64-encoded: every alignment of its characters."""
SLICE = 44
"""Characters of the middle slice a server echoes (a scrubber that masks only a secret's ends misses it)."""

Encoder = Callable[[bytes], bytes]
ALPHABETS: Mapping[str, Encoder] = {"base64": base64.b64encode, "base64url": base64.urlsafe_b64encode}


def middle(token: str) -> str:
    """A slice of ``SLICE`` characters from the token's middle (all of it when shorter)."""
    start = max(0, (len(token) - SLICE) // 2)
    return token[start : start + SLICE]


CHARACTERS: Mapping[str, Callable[[str], str]] = {
    "raw": lambda c: c,
    "url-escaped": lambda c: quote(c, safe=""),
    "url-escaped (every byte)": lambda c: "".join(f"%{b:02X}" for b in c.encode()),
    "form-escaped": quote_plus,
    "JSON-escaped": lambda c: json.dumps(c)[1:-1],
    "JSON \\u-escaped": lambda c: f"\\u{ord(c):04x}",
    "HTML-escaped": lambda c: html.escape(c, quote=True),
    "HTML entities": lambda c: f"&#{ord(c)};",
    "HTML hex entities": lambda c: f"&#x{ord(c):x};",
    "hex": lambda c: c.encode().hex(),
}
"""Spellings made character by character: any run of 8 characters of the token has a spelling too."""


def echoes(token: str) -> dict[str, str]:
    """What a hostile server sends back for one token: each spelling by name."""
    out = {name: "".join(map(spell, token)) for name, spell in CHARACTERS.items()}
    out[f"middle {SLICE} characters"] = middle(token)
    for alphabet, encode in ALPHABETS.items():
        for scheme in ("", SCHEME):
            for prefix in PREFIXES:
                name = f"{alphabet} of {'Bearer <token>' if scheme else 'the token'} after {len(prefix)} byte(s)"
                out[name] = encode(prefix + (scheme + token).encode()).decode()
    return out


def _windows(text: str, width: int = WINDOW) -> Iterable[tuple[int, str]]:
    return ((i, text[i : i + width]) for i in range(max(1, len(text) - width + 1)))


def aligned_cores(token: str) -> dict[str, str]:
    """Per alphabet and alignment, the base64 characters that depend on the token's bytes alone:
    what any base64 text holding the token at that alignment contains, whatever surrounds it."""
    raw = token.encode()
    cores: dict[str, str] = {}
    for alphabet, encode in ALPHABETS.items():
        for lead in range(3):
            skip = (3 - lead) % 3  # token bytes completing the group begun by the surrounding text
            usable = (len(raw) - skip) // 3 * 3
            cores[f"{alphabet}, token at byte {lead} of a group"] = encode(raw[skip : skip + usable]).decode()
    return cores


@dataclass(frozen=True)
class Needle:
    """One searched string and what it is, without the secret itself."""

    text: str
    token: int
    what: str


def needles(tokens: Sequence[str]) -> list[Needle]:
    """Every full spelling of every token, and every window of 8 characters of the token in each
    character-by-character spelling and in each base64 alignment."""
    found: dict[str, Needle] = {}
    for n, token in enumerate(tokens):
        for what, text in echoes(token).items():
            found.setdefault(text, Needle(text, n, what))
        for what, spell in CHARACTERS.items():
            pieces = [spell(c) for c in token]
            for i in range(max(1, len(token) - WINDOW + 1)):
                text = "".join(pieces[i : i + WINDOW])
                found.setdefault(text, Needle(text, n, f"{what}, {WINDOW} characters at {i}"))
        for what, core in aligned_cores(token).items():
            for i, window in _windows(core):
                found.setdefault(window, Needle(window, n, f"{what}, {WINDOW} characters at {i}"))
    return list(found.values())


class Finder:
    """All needles of a run's secrets, found in one pass over a text."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.needles = needles([t for t in tokens if len(t) >= WINDOW])
        self._ac = ahocorasick_rs.AhoCorasick([n.text for n in self.needles]) if self.needles else None

    def hits(self, text: str) -> list[tuple[int, int, Needle]]:
        """(start, end, needle) of every needle in the text, overlaps included."""
        if self._ac is None:
            return []
        matches = self._ac.find_matches_as_indexes(text, overlapping=True)
        return [(start, end, self.needles[i]) for i, start, end in matches]

    def mask(self, text: str) -> str:
        """The text with every character of a hit replaced: what a failure message may show."""
        chars = list(text)
        for start, end, _ in self.hits(text):
            chars[start:end] = "*" * (end - start)
        return "".join(chars)
