"""One scrubber for every secret value a run knows.

Redacting headers is not enough: a Core may echo a token in an error body, a URL
may carry credentials in its user-info or query, a traceback may show a local
variable holding a token, and a hostile Core may echo it encoded (base64 of the
token or of its ``Authorization`` value, at any byte alignment) or cut (any slice).
So every known secret *value* is collected here (configured tokens, the control
credential, tokens minted during the run, URL secrets) with its encodings, and any
run of 8 or more of their consecutive characters is masked wherever it appears, in
everything the suite writes or prints. Scrubbing by value is what schemathesis'
sanitizer does too; one Aho-Corasick automaton finds every window in one pass.

A target chooses the tokens its control extension mints, so a hostile one could mint a word
of the suite's own (``failed``, ``non-conformant``, a requirement ID) and have every report
mask it: a test's outcome, a verdict, a key of results.json. No pattern that lies within one of
the suite's own words is therefore ever masked (:func:`protected`); a token that is such a
word hides nothing by being shown.
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import json
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

import ahocorasick_rs

MASK = "***"
_LONE = re.compile("[\ud800-\udfff]")
MIN_LENGTH = 6  # shorter values are too likely to be ordinary words to mask safely
FRAGMENT = 8  # any run of this many consecutive characters of a secret's spelling is masked on its own
SCHEMES = ("Bearer ", "Basic ", "Token ")
"""What may stand before a token inside an encoded ``Authorization`` value a Core echoes."""


def _stable_base64(data: bytes, before: int, secret_from: int) -> list[str]:
    """The base64 characters that encode ``data`` wherever it sits in a longer byte string:
    ``before`` bytes of unknown content precede it, so the characters touching them are dropped,
    and so are those touching whatever follows. Only characters from the one that carries the
    secret's first bit (``secret_from`` bytes into ``data``) on are kept, so a scheme alone is no
    secret. Standard and URL-safe alphabets, each also URL-encoded."""
    full = base64.b64encode(b"\0" * before + data).decode("ascii")
    bits_end = 8 * (before + len(data))
    first = -(-8 * before // 6)  # the first character with no bit of the unknown prefix
    secret_first = max(first, 8 * (before + secret_from) // 6 - FRAGMENT + 1)
    stable = full[secret_first : bits_end // 6]
    forms = {stable, stable.replace("+", "-").replace("/", "_")}
    return [f for form in forms for f in (form, quote(form, safe=""))]


def spellings(value: str) -> set[str]:
    """Every way the suite may meet ``value`` in a Core's answer: raw, upper-, lower-cased and
    reversed; URL-escaped (also every byte), form-encoded, JSON-escaped (also every character as
    ``\\uXXXX`` text), HTML-escaped (also as numeric character references); hex of UTF-8 and of
    UTF-16; base64 and base64url of it and of it after an auth scheme, at each of the three byte
    alignments a longer encoded text can give it; every one of these forms that is alphanumeric
    (base64, hex, the raw value and its cases and reversal when they are) also percent-encoded
    byte by byte."""
    raw = value.encode("utf-8")
    found = {
        value,
        quote(value, safe=""),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
        html.escape(value, quote=False),
        binascii.hexlify(raw).decode("ascii"),
        binascii.hexlify(raw).decode("ascii").upper(),
        quote_plus(value, safe=""),
        _every_byte(raw, "X"),  # every byte percent-encoded
        _every_byte(raw, "x"),
        "".join(f"&#{ord(c)};" for c in value),  # HTML numeric character references
        "".join(f"&#x{ord(c):x};" for c in value),
        "".join(f"&#x{ord(c):X};" for c in value),
        "".join(f"\\u{ord(c):04x}" for c in value),  # JSON escapes of every character, arriving as text
        "".join(f"\\u{ord(c):04X}" for c in value),  # the same with upper-case hex digits (RFC 8259 allows both)
        value.swapcase(),
        value.upper(),
        value.lower(),
        value[::-1],
        binascii.hexlify(value.encode("utf-16-le")).decode("ascii"),
        binascii.hexlify(value.encode("utf-16-be")).decode("ascii"),
        binascii.hexlify(value.encode("utf-16-le")).decode("ascii").upper(),
        binascii.hexlify(value.encode("utf-16-be")).decode("ascii").upper(),
    }
    for scheme in ("", *SCHEMES):
        prefix = scheme.encode("ascii")
        for before in range(3):
            found.update(_stable_base64(prefix + raw, before, len(prefix)))
    found |= {  # every alphanumeric form, percent-encoded byte by byte: hex so encoded gives the token back too
        form
        for b64 in list(found)
        if _is_base64(b64)
        for form in (_every_byte(b64.encode("ascii"), "X"), _every_byte(b64.encode("ascii"), "x"))
    }
    return {s for s in found if len(s) >= MIN_LENGTH}


_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=")


def _is_base64(text: str) -> bool:
    return bool(text) and set(text) <= _BASE64


def _every_byte(data: bytes, case: str) -> str:
    """Every byte of ``data`` percent-encoded, hex digits in ``case`` (``X`` or ``x``)."""
    if not data:
        return ""
    encoded = "%" + binascii.hexlify(data, "%").decode("ascii")
    return encoded.upper() if case == "X" else encoded


OWN_WORDS = (
    "VERDICT",
    "MUSTs",
    "surfaces",
    "requirements verified",
    "not verified",
    "tests failed",
    "harness errors",
    "knowledge contract verdict",
    "within scope",
)
"""Words of the console's verdict lines that are not in results.json's schema."""


@functools.cache
def protected() -> frozenset[str]:
    """Every piece of the suite's own words a mask pattern could be (``MIN_LENGTH`` to ``FRAGMENT``
    characters, lower-cased): of results.json's keys and fixed values (from its schema), of every
    requirement ID and of :data:`OWN_WORDS`. A pattern among them is not masked."""
    from knowledge_schemas import SCHEMA_DIR, load_catalogue

    words: set[str] = set(OWN_WORDS) | set(load_catalogue().ids)
    _schema_words(json.loads((SCHEMA_DIR / "results.schema.json").read_text("utf-8")), words)
    return frozenset(
        word[i : i + size]
        for word in (w.lower() for w in words)
        for size in range(MIN_LENGTH, FRAGMENT + 1)
        for i in range(len(word) - size + 1)
    )


def _schema_words(node: Any, into: set[str]) -> None:
    """Every property name and every string of an ``enum``, ``const`` or ``required`` in a schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                into.update(value)
            elif key in ("enum", "required") and isinstance(value, list):
                into.update(v for v in value if isinstance(v, str))
            elif key == "const" and isinstance(value, str):
                into.add(value)
            _schema_words(value, into)
    elif isinstance(node, list):
        for value in node:
            _schema_words(value, into)


def _windows(spelling: str) -> set[str]:
    """The patterns that mask ``spelling`` and any run of ``FRAGMENT`` or more of its characters."""
    if len(spelling) <= FRAGMENT:
        return {spelling}
    return {spelling[i : i + FRAGMENT] for i in range(len(spelling) - FRAGMENT + 1)}


_NULS = re.compile(r"\x00|\\x00|\\u0000")
"""A NUL: raw, as the escape a ``repr`` or :func:`~conformance.common.untrusted.defang` shows, or JSON's."""


def _without_nuls(text: str) -> tuple[str, list[int]]:
    """``text`` with its NULs (raw or escaped) taken out, and where each kept character stood: JSON
    may come in UTF-16 or UTF-32, and read as bytes or as UTF-8 a token stands there beside NULs
    (``k\\x00c\\x00...``), which no window of its spellings matches."""
    kept: list[str] = []
    where: list[int] = []
    position = 0
    for nul in _NULS.finditer(text):
        kept.append(text[position : nul.start()])
        where.extend(range(position, nul.start()))
        position = nul.end()
    kept.append(text[position:])
    where.extend(range(position, len(text)))
    return "".join(kept), where


class Scrubber:
    """The set of secret values known to this process, and their replacement."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._patterns: set[str] = set()  # every window of every value
        self._pending: list[str] = []  # the windows added since the automata were last built
        self._levels: list[tuple[ahocorasick_rs.AhoCorasick, list[str]]] = []  # largest first
        self._longest = 0
        self._lock = threading.Lock()
        self._size = 0  # how many values there are: values are only ever added, so it names the set's state
        self._sweep: tuple[int, tuple[ahocorasick_rs.AhoCorasick, ...], int] | None = None

    def add(self, value: object) -> None:
        """Remember a secret with all its spellings (:func:`spellings`)."""
        if not isinstance(value, str) or len(value) < MIN_LENGTH:
            return
        found = spellings(value)
        with self._lock:
            new = found - self._values
            if not new:
                return
            self._values.update(new)
            own = protected()
            windows = {w for v in new for w in _windows(v) if w.lower() not in own} - self._patterns
            self._patterns.update(windows)
            self._pending.extend(windows)
            self._longest = max(self._longest, *(len(v) for v in new))
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

    def __bool__(self) -> bool:
        """Whether any secret is known: asked for every test report, so no copy of the values."""
        return self._size > 0

    @property
    def values(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._values)

    def reach(self) -> int:
        """How far from its first character a mask can reach: the longest value and a fragment."""
        return self._prepared()[1]

    def _prepared(self) -> tuple[tuple[ahocorasick_rs.AhoCorasick, ...], int]:
        """The automata of every window of every spelling, and the reach: a run scrubs some ten
        thousand texts, nearly all of them clean, so one pass of each automaton decides each.
        Secrets arrive one at a time between scrubs (each minted token), so the windows added
        since the last scrub get an automaton of their own, merged with the newest one while that
        is no more than twice its size (a binary counter's carry): a window is built into an
        automaton some log2(secrets) times, and a scrub runs that many automata at most."""
        sweep = self._sweep
        if sweep is not None and sweep[0] == self._size:
            return sweep[1], sweep[2]
        with self._lock:
            size = self._size
            if self._pending:
                level, self._pending = sorted(self._pending), []  # sorted, a trie builds faster
                while self._levels and len(self._levels[-1][1]) <= 2 * len(level):
                    level = sorted(self._levels.pop()[1] + level)  # two sorted runs: one merge
                self._levels.append((ahocorasick_rs.AhoCorasick(level), level))
            automata = tuple(automaton for automaton, _ in self._levels)
            reach = self._longest + FRAGMENT
        self._sweep = (size, automata, reach)
        return automata, reach

    def text(self, text: str) -> str:
        automata, _ = self._prepared()
        if not automata:
            return text
        return _mask(text, automata)

    def data(self, node: Any) -> Any:
        """A JSON-like value with every string scrubbed: a copy, or the value itself when none of
        its strings holds anything to mask. Every test's record is scrubbed, some hundreds of
        strings, nearly always clean: one pass over them all decides that, where a pass per
        string and automaton cost a few milliseconds a test."""
        automata, _ = self._prepared()
        if not automata:
            return node
        strings: list[str] = []
        if _gathered(node, strings) and not _found("\0".join(strings), automata):
            return node  # a window across the separator only sends it down the slow path
        return self._copy(node)

    def _copy(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, dict):
            return {self.text(str(k)): self._copy(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self._copy(v) for v in node]
        return node


def _gathered(node: Any, into: list[str]) -> bool:
    """Every string of ``node`` (keys too) into ``into``; False if the copy would change more than
    its strings (a key that is no plain string, a tuple, a subclass of str, dict or list, whose
    ``str()`` or copy may differ), so that only a copy will do."""
    kind = type(node)
    if kind is str:
        into.append(node)
    elif kind is dict:
        for key, value in node.items():
            if type(key) is not str or not _gathered(value, into):
                return False
            into.append(key)
    elif kind is list:
        return all(_gathered(value, into) for value in node)
    elif isinstance(node, (str, dict, list, tuple)):
        return False
    return True


def _found(text: str, automata: tuple[ahocorasick_rs.AhoCorasick, ...]) -> bool:
    """Whether any window of a secret occurs in ``text``, or in it without its NULs."""
    try:
        if any(automaton.find_matches_as_indexes(text) for automaton in automata):
            return True
    except UnicodeEncodeError:  # a lone surrogate: searched as U+FFFD, as _mask does
        return _found(_LONE.sub("\ufffd", text), automata)
    return _NULS.search(text) is not None and _found(_without_nuls(text)[0], automata)


def _spans(text: str, automata: tuple[ahocorasick_rs.AhoCorasick, ...]) -> list[tuple[int, int]]:
    """Where a window of a secret occurs in ``text``, overlaps included."""
    found: list[tuple[int, int, int]] = []
    for automaton in automata:
        try:
            found += automaton.find_matches_as_indexes(text, overlapping=True)
        except UnicodeEncodeError:  # a lone surrogate (a target's invalid UTF-16): searched as U+FFFD, one for one
            found += automaton.find_matches_as_indexes(_LONE.sub("\ufffd", text), overlapping=True)
    return [(start, end) for _, start, end in found]


def _mask(text: str, automata: tuple[ahocorasick_rs.AhoCorasick, ...]) -> str:
    """Every stretch of ``text`` covered by overlapping windows of a secret replaced by one mask."""
    spans = sorted(_spans(text, automata))
    if _NULS.search(text) is not None:  # a token sent in UTF-16 or UTF-32: masked from its first character to its last
        bare, where = _without_nuls(text)
        if bare != text:
            spans = sorted(spans + [(where[start], where[end - 1] + 1) for start, end in _spans(bare, automata)])
    if not spans:
        return text
    kept: list[str] = []
    position, run_start, run_end = 0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start <= run_end:
            run_end = max(run_end, end)
            continue
        kept += [text[position:run_start], MASK]
        position, run_start, run_end = run_end, start, end
    kept += [text[position:run_start], MASK, text[run_end:]]
    return "".join(kept)


class RunSecrets(Scrubber):
    """The run's secrets. Every one masks a target's text wherever it goes; only those the run was
    given (configured tokens, the control credential, URL secrets, the bundled simulator's) also
    mask the suite's own text: the last pass over each report file and the console's verdict
    lines. A target chooses the tokens its control extension mints, and one spanning the suite's
    words (``VERDICT: NON-``, ``" failures="``) must not rewrite a verdict line or a junit
    attribute; the text it could echo them in is masked before it reaches a report."""

    def __init__(self) -> None:
        super().__init__()
        self.configured = Scrubber()

    def add(self, value: object, *, minted: bool = False) -> None:
        """Remember a secret; ``minted``: one the target chose (a control extension's identity)."""
        super().add(value)
        if not minted:
            self.configured.add(value)


SECRETS = RunSecrets()
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
