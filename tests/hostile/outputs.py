"""Checks of every output a suite run leaves, each returning what it found wrong (empty: safe).

A problem names the output, where in it, and a short excerpt with control characters shown as
escapes and every secret masked, so a failure message is itself safe to log."""

from __future__ import annotations

import errno
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.browser import OFFLINE_FLAGS
from tests.hostile.forms import Finder
from tests.hostile.payloads import MARKER, PWNED_ATTRIBUTE

CHROMIUM_FLAGS = ("--headless", *OFFLINE_FLAGS, "--virtual-time-budget=3000")
"""Headless, offline, and with virtual time so timers and load events fire before the DOM is dumped."""
CI_PREFIXES = ("##vso[", "##[", "##teamcity[")
"""Command prefixes of Azure Pipelines and TeamCity, anywhere in a line (GitHub's ``::`` starts one)."""
ALLOWED_CONTROLS = frozenset("\n\t")
SHOWN = 100
MOST = 6
"""Problems listed per output; the rest are counted."""
CODE_TOKENS = frozenset({"code_inline", "fence", "code_block"})


def shown(text: str, finder: Finder | None = None, at: int = 0) -> str:
    """An excerpt around ``at``: secrets masked (in a wider span first, so no secret is cut into
    an unmasked piece), controls as escapes, clipped."""
    begin = max(0, at - 10 * SHOWN)
    wide = text[begin : at + 10 * SHOWN]
    masked = finder.mask(wide) if finder else wide
    return ascii(masked[max(0, at - begin - 30) : at - begin + SHOWN])[:SHOWN]


def quoted(text: str) -> str:
    """Several lines of a run's output, each behind ``| `` with its control characters as escapes:
    no line of it can start a CI command or move a terminal."""
    return "\n".join("  | " + ascii(line)[1:-1] for line in re.split(r"\r\n|\r|\n", text))


def _capped(output: str, problems: list[str]) -> list[str]:
    if len(problems) <= MOST:
        return [f"{output}: {p}" for p in problems]
    return [f"{output}: {p}" for p in problems[:MOST]] + [f"{output}: ... and {len(problems) - MOST} more"]


# ---------------------------------------------------------------------------------- report.html


def dump_dom(chromium: str, page: Path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium serializes it."""
    with tempfile.TemporaryDirectory(prefix="kc-profile-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except OSError as exc:
            if exc.errno != errno.EFAULT:
                raise
            # Seen once in a loaded full run, never alone: execve of the browser failed (EFAULT),
            # so it never ran and nothing of the page was judged. Started once more, not skipped.
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def pwned(dom: str) -> list[str]:
    """The injections whose script ran: the values of the marker attribute on ``<body>``."""
    body = re.search(r"<body\b[^>]*>", dom, re.IGNORECASE)
    return re.findall(rf"{PWNED_ATTRIBUTE}-([a-z]+)=", body.group(0)) if body else []


CANARY = f"<html><body><img src=x onerror=\"document.body.setAttribute('{PWNED_ATTRIBUTE}-canary','1')\"></body></html>"


def chromium_runs_scripts(chromium: str, folder: Path) -> bool:
    """Whether this browser, with these flags, runs an injected script at all (else no check proves anything)."""
    page = folder / "canary.html"
    page.write_text(CANARY, "utf-8")
    return pwned(dump_dom(chromium, page)) == ["canary"]


def html_problems(dom: str) -> list[str]:
    """Scripts a server injected that ran when report.html was opened (``dom``: as Chromium left it)."""
    ran = pwned(dom)
    return [
        f"report.html: an injected script ran in Chromium (payload: {how}); <body> got {PWNED_ATTRIBUTE}-{how}"
        for how in ran
    ]


# ------------------------------------------------------------------------------------ junit.xml


def junit_problems(path: Path) -> list[str]:
    """junit.xml must be well-formed XML 1.0, or test reporters drop the run."""
    try:
        ET.parse(path)
    except ET.ParseError as exc:
        line, column = exc.position
        text = path.read_bytes().decode("utf-8", "replace").splitlines()
        context = text[line - 1][max(0, column - 40) : column + 40] if 0 < line <= len(text) else ""
        return [f"junit.xml: not well-formed XML ({exc}); near {ascii(context)[:SHOWN]}"]
    return []


# ------------------------------------------------------------------------------- logs and files


def _control(char: str) -> bool:
    code = ord(char)
    return char not in ALLOWED_CONTROLS and (code < 0x20 or 0x7F <= code <= 0x9F)


def log_problems(output: str, data: bytes, finder: Finder | None = None) -> list[str]:
    """Lines a CI runner would take as a command, and control characters a terminal would obey.
    Lines are split at CR as well as LF: a runner (and a terminal) starts a new line at a bare CR."""
    text = data.decode("utf-8", "replace")
    problems = []
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        if line.strip().startswith("::"):
            problems.append(f"line {number} is a workflow command: {shown(line.strip(), finder)}")
        for prefix in CI_PREFIXES:
            if prefix in line:
                problems.append(f"line {number} holds {prefix!r}: {shown(line, finder, line.index(prefix))}")
    controls = [(i, c) for i, c in enumerate(text) if c == "\r" or _control(c)]
    for i, char in controls[:MOST]:
        problems.append(f"control character {char!r} at offset {i}: {shown(text, finder, i)}")
    if len(controls) > MOST:
        problems.append(f"{len(controls)} control characters in all")
    return _capped(output, problems)


# ------------------------------------------------------------------------------------ report.md


def _outside_code(tokens: Iterable[Token]) -> Iterable[tuple[str, str]]:
    """(token type, text) of everything a Markdown renderer shows as something other than code."""
    for token in tokens:
        if token.type in CODE_TOKENS:
            continue
        if token.children:
            yield from _outside_code(token.children)
        elif token.content and token.type != "inline":
            yield token.type, token.content
        for name, value in (token.attrs or {}).items():
            yield f"{token.type} {name}", str(value)


def markdown_problems(path: Path, finder: Finder | None = None) -> list[str]:
    """Server text rendered as Markdown (mention, link, image, HTML, table, heading) rather than
    kept in a code span or fence: the payloads' marker outside every code token."""
    renderer = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    found = []
    for kind, text in _outside_code(renderer.parse(path.read_text("utf-8", "replace"))):
        if MARKER in text:
            found.append(f"server text rendered as {kind}: {shown(text, finder, text.index(MARKER))}")
    return _capped("report.md", found)


# ---------------------------------------------------------------------------------------- secrets


def secret_problems(outputs: Mapping[str, bytes], finder: Finder) -> list[str]:
    """Every spelling and window of every secret, in every output; a hit names the token by its
    number and the spelling, never the value."""
    problems = []
    for output, data in outputs.items():
        text = data.decode("utf-8", "replace")
        hits = finder.hits(text)
        spellings = sorted({f"token #{n.token} {n.what}" for _, _, n in hits})
        if hits:
            start = hits[0][0]
            problems.append(
                f"{output}: {len(hits)} hit(s): {', '.join(spellings[:4])}"
                + (f" (+{len(spellings) - 4} spellings)" if len(spellings) > 4 else "")
                + f"; first at offset {start}: {shown(text, finder, start)}"
            )
    return problems


def every_output(stdout: bytes, stderr: bytes, reports: Path) -> dict[str, bytes]:
    """stdout, stderr and every file of the reports folder, by name."""
    found = {"stdout": stdout, "stderr": stderr}
    if reports.is_dir():
        for path in sorted(p for p in reports.rglob("*") if p.is_file()):
            found[str(path.relative_to(reports))] = path.read_bytes()
    return found
