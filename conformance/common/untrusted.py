"""Text a target sent, made safe for every place the suite shows it.

A Core, an MCP server or a client harness may be hostile: whatever it answers ends up in a
terminal, a CI log, a pull-request comment, a browser and an XML reader. Each of those gives
some bytes a meaning of their own (ESC starts a terminal command, a line that starts with ``::``
is a GitHub Actions workflow command, ``##vso[`` one of Azure Pipelines', a control byte makes
XML ill-formed), so every such byte or prefix is shown as a visible escape instead: the reader
still sees what the target sent, and nothing it sent can act. Markup (HTML, Markdown) is the
writers' part: they escape or fence this module's output.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from conformance.common.secrets import scrub

# C0 but LF, DEL, C1, line and paragraph separators, the bidirectional controls that reorder what
# a reader sees (Trojan Source), the byte-order mark, lone surrogates and XML's non-characters.
_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff\ufffe\uffff]"
)
_NAMED = {"\t": "\\t", "\r": "\\r"}

# A workflow command of GitHub Actions is a line whose trimmed text starts with ``::``; the older
# ``##[`` form, Azure Pipelines' ``##vso[`` and TeamCity's ``##teamcity[`` act anywhere in a line.
_LINE_COMMAND = re.compile(r"^(\s*):", re.MULTILINE)
_INLINE_COMMAND = re.compile(r"#(?=#(?:vso|teamcity)?\[)", re.IGNORECASE)
_SUSPECT = re.compile(r"^\s*::|##(?:vso|teamcity)?\[", re.MULTILINE | re.IGNORECASE)

CUT_MARK = "… [{} more characters cut]"


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def defang(text: str) -> str:
    """``text`` with every control character shown as an escape and every CI command prefix broken
    (its first character shown as ``\\x3a`` or ``\\x23``); a newline is the only control kept."""
    text = _CONTROL.sub(_escape, text)
    if _SUSPECT.search(text) is None:
        return text
    text = _LINE_COMMAND.sub(lambda m: m.group(1) + "\\x3a", text)
    return _INLINE_COMMAND.sub("\\\\x23", text)


def cut(text: str, limit: int) -> str:
    """At most about ``limit`` characters, with a marker that says how many were left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARK.format(len(text) - limit)


def shown(text: object, limit: int | None = None) -> str:
    """Anything a target sent, ready for any output: secrets masked, controls and CI commands
    defanged, and (with ``limit``) cut with a marker. Scrubbing comes first, before the escapes
    could split a secret, and cutting last, after the masks have shortened the text."""
    clean = defang(scrub(text if isinstance(text, str) else str(text)))
    return clean if limit is None else cut(clean, limit)


ONE_LINE = 600
"""How long a usage or harness line may be: one line saying what to fix, whatever a target put in it."""


def one_line(text: object, limit: int = ONE_LINE) -> str:
    """:func:`shown`, on one line (a newline shown as ``\\n``) and cut: for the single line of an exit 4 or 7."""
    return cut(shown(text).replace("\n", "\\n"), limit)


_SGR = re.compile(r"(\x1b\[[0-9;]*m)")
"""A colour or style change, pytest's own terminal markup: the one escape a guarded stream keeps."""


class GuardedStream:
    """A text stream that defangs whatever reaches it: the last line of defence for text that
    reached the console without :func:`shown` (a library's message, a traceback's locals).
    It keeps colour and style sequences (pytest's markup; they cannot move the cursor, write the
    clipboard or link anywhere) and, on a terminal only, carriage returns (pytest redraws a line
    with them; a CI log, where a CR starts a new line that a runner may read as a command, is no
    terminal)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._tty = bool(getattr(inner, "isatty", lambda: False)())
        self._blank_line = True  # nothing but whitespace written since the last newline

    def write(self, text: str) -> int:
        self.inner.write(self._guard(text))
        return len(text)

    def _guard(self, text: str) -> str:
        parts = _SGR.split(text)
        parts[::2] = [self._plain(p) for p in parts[::2]]
        return "".join(parts)

    def _plain(self, text: str) -> str:
        if not text:
            return text
        escaped = _CONTROL.sub(lambda m: m.group() if self._tty and m.group() == "\r" else _escape(m), text)
        if self._blank_line:
            escaped = re.sub(r"^(\s*):", lambda m: m.group(1) + "\\x3a", escaped)
        escaped = re.sub(r"([\n\r][^\S\n\r]*):", lambda m: m.group(1) + "\\x3a", escaped)
        escaped = _INLINE_COMMAND.sub("\\\\x23", escaped)
        tail = re.split("[\n\r]", escaped)[-1]
        self._blank_line = (self._blank_line or len(tail) < len(escaped)) and not tail.strip()
        return escaped

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def guard_streams() -> None:
    """Put :class:`GuardedStream` in front of ``sys.stdout`` and ``sys.stderr`` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))
