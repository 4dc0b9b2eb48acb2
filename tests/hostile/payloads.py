"""What a hostile server writes into the text the suite shows: markup for report.html and
report.md, CI workflow commands and terminal escapes for logs, characters XML 1.0 forbids.

Every piece carries ``MARKER`` so an output check can tell the server's text from the suite's own.
A script payload marks ``<body>`` with an attribute whose name is built at run time
(``'data-kc-' + 'pwned-img'``), so the name appears in a page only if the script ran, never as the
payload's own (escaped or not) text."""

from __future__ import annotations

MARKER = "kc-hostile"
"""In every payload: server text found outside a code span, a fence or an escape is this marker's."""
PWNED_ATTRIBUTE = "data-kc-pwned"
"""Prefix of the attribute an injected script that ran sets on ``<body>`` (one per payload: the
name, ``data-kc-pwned-<payload>``, is joined at run time, so it never appears in a payload)."""


def _mark(how: str) -> str:
    """A script that records that it ran, and by which injection."""
    return f"document.body.setAttribute('data-kc-'+'pwned-{how}','1')"


HTML = (
    f'<img src=x alt={MARKER}-img onerror="{_mark("img")}">',
    f"</script><script>{_mark('script')}</script>",
    f'<svg onload="{_mark("svg")}"><title>{MARKER}-svg</title></svg>',
    f'"><details open ontoggle="{_mark("details")}"><summary>{MARKER}-details</summary></details>',
    f'</textarea></pre></code><iframe srcdoc="<script>parent.{_mark("iframe")}</script>">{MARKER}</iframe>',
)
"""Script injections in element, attribute, raw-text and srcdoc contexts: each runs if unescaped."""

MARKDOWN = (
    "```",
    f"@{MARKER}-team please look",
    f"[{MARKER}-link](https://{MARKER}.invalid/phish)",
    f"![{MARKER}-image](https://{MARKER}.invalid/track.png)",
    f"<b>{MARKER}-html</b>",
    "",
    f"| {MARKER}-cell | b |",
    "|---|---|",
    "| c | d |",
    "",
    f"# {MARKER}-heading",
    "~~~~",
    "````",
)
"""Lines that close a code fence, then mention, link, image, inline HTML, a table and a heading."""

CI_COMMANDS = (
    f"\r::error file={MARKER}.py,line=1::{MARKER}-error",
    f"::add-mask::{MARKER}",
    f"  ::warning::{MARKER}-indented",
    f"::stop-commands::{MARKER}-resume",
    f"::set-output name=x::{MARKER}",
    f"##vso[task.setvariable variable=KC_HOSTILE]{MARKER}",
    f"##[group]{MARKER}",
    f"##teamcity[message text='{MARKER}']",
)
"""GitHub Actions workflow commands (a bare CR first: the runner splits lines at CR), Azure
Pipelines logging commands and groups, TeamCity service messages."""

TERMINAL = (
    "\x1b[2J\x1b[H",
    f"\x1b]52;c;{'a2MtaG9zdGlsZQ=='}\x07",
    f"\x1b]8;;https://{MARKER}.invalid/\x1b\\{MARKER}-osc8\x1b]8;;\x1b\\",
    f"nul\x00{MARKER}",
    f"bel\x07{MARKER}",
    f"\u009b31m{MARKER}-c1",
    f"\x1bP{MARKER}-dcs\x1b\\",
)
"""Clear screen, OSC 52 clipboard write, OSC 8 link, NUL, BEL, a C1 CSI, a DCS string."""

XML_INVALID = (f"\x01\x02\x0b\x0c\x1f{MARKER}", f"\ufffe\uffff{MARKER}-nonchar")
"""Characters XML 1.0 forbids even as character references."""

LONE_SURROGATE = "\\ud800"
"""A JSON escape for a lone surrogate: valid JSON, yet no UTF-8 writer can encode it."""


def tagged(name: str, text: str) -> str:
    """A payload behind its own tag, so a check can tell which payloads reached an output."""
    return f"{MARKER}:{name}\n{text}"


INLINE = f"`` ` @{MARKER}-inline [{MARKER}-inline-link](https://{MARKER}.invalid/) <b>{MARKER}-inline-html</b> ``"
"""Backtick runs that close an inline code span of one or two backticks, then a mention, a link, HTML."""

GROUPS = {
    "img-script": HTML[0] + HTML[1],
    "svg-details": HTML[2] + HTML[3],
    "iframe": HTML[4],
    "fence": "\n".join(MARKDOWN),
    "inline": INLINE,
    "ci-github": "\n".join(CI_COMMANDS[:5]),
    "ci-others": "\n".join(CI_COMMANDS[5:]),
    "terminal-xml": "".join(TERMINAL) + "".join(XML_INVALID),
}
"""The payloads in groups short enough that an output which cuts server text still shows each whole."""


def everything() -> str:
    """All payload lines."""
    return "\n".join((*HTML, *MARKDOWN, *CI_COMMANDS, *TERMINAL, *XML_INVALID))
