"""The suite's own test corpus: small, deterministic, and hostile where it matters
(multi-byte and escaped characters, a document past the read budget, a title and
summary far past the search bound), and built for the contract's byte bounds:
three documents whose titles and summaries are worst cases for the search bound
when found together, one whose every page cut falls next to an escape, an astral
character or a combining sequence, and two sized to the read-chain budget.

Each document keeps its unique token (``Doc.token``), so a test finds it by its
content; nothing here depends on ranking or on how a Core words titles."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from random import Random
from typing import Any

from conformance.common import contract as C

MAIN_BASE, SECOND_BASE = "kb-main", "kb-second"
WORST_WORD = "worstcase"  # the one word the three worst-case search documents share, and no other document has
WORST_KEYS = ("worst1", "worst2", "worst3")
SUMMARISED = "summarised"  # the document whose seeded summary is its whole content
# Each costs more UTF-8 bytes in JSON than a character count says: escapes (2 or 6 bytes
# for one character), control characters, line and paragraph separators (which some
# encoders escape), astral characters (4 bytes, two UTF-16 units), CJK, combining marks.
_WORST = [
    '"',
    "\\",
    "\u0001",
    "\u001f",
    "\n",
    "\t",
    "\u2028",
    "\u2029",
    "\U0001f600",
    "\U0001d11e",
    "\U00020000",
    "中",
    "é",
    "e\u0301",
    "€",
    "</",
    "\u007f",
]
# No cut of a document made of these falls after whitespace or ASCII: a Core that prefers to cut
# at a space must cut next to a multibyte character (two, three and four bytes, and combining).
_NO_SPACE = [
    "\u4e2d",
    "\u6587",
    "\u20ac",
    "\u0800",
    "\uffe5",
    "\U0001f600",
    "\U0001d11e",
    "\U00020000",
    "\u00e9",
    "e\u0301",
]
# Page cuts: every cut of a document made of these falls next to one of them.
_CUTS = [
    "\U0001f600",
    "\U0001d11e",
    "\U00020000",
    "\u0001",
    "\u0002",
    "\u0010",
    "\u001e",
    "\u001f",
    '"',
    "\\",
    "\n",
    "e\u0301",
    "a\u0308\u0301",
    "\u2028",
    "中",
    "€",
    "é",
]
_ODD = ["é", "€", "😀", "ß", '"', "\\", "\n", "\t", "\u0001", "中文", "𝄞", " ", "a", "Z", "0", "<", "&", "\u2028"]


@dataclass(frozen=True)
class Doc:
    key: str
    item_id: str
    base: str
    title: str
    content: str
    summary: str | None = None

    @property
    def token(self) -> str:
        """A word only this document contains, to find it by search and to recognise
        it: its content starts with it and its stored title names it."""
        return f"{self.key}doc"

    @property
    def stored_title(self) -> str:
        """The title as seeded: the token first, so a Core that trims or decorates titles
        still shows which document a hint is (an out-of-scope leak is visible without a read)."""
        return f"{self.token} {self.title}"

    def as_item(self) -> dict[str, Any]:
        item = {"id": self.item_id, "title": self.stored_title, "content": self.content}
        if self.summary is not None:
            item["summary"] = self.summary
        return item


def _odd_text(rng: Random, chars: int) -> str:
    return "".join(rng.choice(_ODD) for _ in range(chars))


def _units(rng: Random, units: list[str], count: int) -> str:
    return "".join(rng.choice(units) for _ in range(count))


def _sized(token: str, size: int, last: str) -> str:
    """Content of exactly ``size`` UTF-8 bytes ending with ``last``: the token, then lines
    with multi-byte and escaped characters, then ASCII up to the size."""
    room = size - C.utf8_size(last)
    parts = [f"{token} "]
    used = C.utf8_size(parts[0])
    i = 0
    while True:
        line = f'budget line {i:06d} with é, 😀 and "quotes"\n'
        size_of_line = C.utf8_size(line)
        if used + size_of_line > room:
            break
        parts.append(line)
        used += size_of_line
        i += 1
    return "".join(parts) + "." * (room - used) + last


def build(seed: int = 7, *, large: bool = True) -> dict[str, Doc]:
    """The suite's documents by key: a dict of its own for each caller, the documents (frozen, and
    the same for a seed) built once a process, as every world of a run provisions them."""
    return dict(_built(seed, large))


@lru_cache(maxsize=4)
def _built(seed: int, large: bool) -> dict[str, Doc]:
    rng = Random(seed)
    docs = [
        Doc(
            "alpha",
            "item-alpha",
            MAIN_BASE,
            "Homepage binding",
            "alphadoc binding. " + "The homepage is bound to one published site. " * 20,
        ),
        Doc(
            "second",
            "item-second",
            SECOND_BASE,
            "Second base note",
            "seconddoc binding. " + "Kept in the second knowledge base. " * 10,
        ),
    ]
    docs += [
        Doc(
            f"filler{i}",
            f"item-filler{i}",
            MAIN_BASE,
            f"Binding note {i}",
            f"filler{i}doc binding binding notes " * (5 + i),
        )
        for i in range(4)
    ]
    if large:
        docs.append(
            Doc("unicode", "item-unicode", MAIN_BASE, "Unicode handbook", "unicodedoc " + _odd_text(rng, 24_000))
        )
        big = "bigdoc " + "".join(f'line {i:06d} of the archive with é and 😀 and "quotes"\n' for i in range(3600))
        docs.append(Doc("big", "item-big", MAIN_BASE, "Big archive", big))
        docs.append(
            Doc(
                "longtitle",
                "item-longtitle",
                MAIN_BASE,
                "Ü€😀" * 700 + " longtitle",
                "longtitledoc binding " * 40,
                summary='数据"\\' * 3000,
            )
        )
        for n, key in enumerate(WORST_KEYS):  # found together by WORST_WORD: three hints at once, each a worst case
            # The content is a worst case from its third word on too, so a summary a Core derives
            # from it (not the seeded one) costs as many bytes a character (its own generator, so
            # the documents after these stay as they were).
            opening = _units(Random(seed * 1000 + n), _WORST, 1200)
            docs.append(
                Doc(
                    key,
                    f"item-{key}",
                    MAIN_BASE,
                    _units(rng, _WORST, 900),
                    f"{key}doc {WORST_WORD} {opening} "
                    + "A document whose title and summary are built to overflow a miscounted search bound. " * 8,
                    summary=_units(rng, _WORST, 3000),
                )
            )
        docs.append(Doc("cuts", "item-cuts", MAIN_BASE, "Page cuts", "cutsdoc " + _units(rng, _CUTS, 30_000)))
        # Its own generator, so the documents after it stay as they were.
        spaceless = _units(Random(seed * 1000 + 77), _NO_SPACE, 12_000)
        docs.append(Doc("nospace", "item-nospace", MAIN_BASE, "Multibyte without spaces", "nospacedoc " + spaceless))
        # The read-chain budget: exactly 131072 content bytes (reads completely), and one byte more,
        # whose last character straddles the budget (the chain stops before it, budget exhausted).
        docs.append(
            Doc("exact", "item-exact", MAIN_BASE, "Budget sized", _sized("exactdoc", C.READ_CHAIN_MAX_BYTES, "😀"))
        )
        docs.append(
            Doc("over", "item-over", MAIN_BASE, "Budget plus one", _sized("overdoc", C.READ_CHAIN_MAX_BYTES + 1, "😀"))
        )
        # An author summary that is the whole document: a hint may quote it, never carry all of it.
        whole = "summariseddoc " + "A short note whose author pasted the whole text as its summary. " * 3
        docs.append(Doc(SUMMARISED, f"item-{SUMMARISED}", MAIN_BASE, "Summary is the text", whole, summary=whole))
        # One byte a character and nothing JSON escapes: a page's content bytes are its length, so
        # a window of the page's room fits it exactly (where an off-by-one of a byte count shows).
        plain = "asciidoc " + "".join(
            f"Plain words {i:05d} of one byte each and nothing to escape. " for i in range(400)
        )
        docs.append(Doc("ascii", "item-ascii", MAIN_BASE, "Plain one-byte text", plain))
    out = {d.key: d for d in docs}
    if large:
        assert C.utf8_size(out["big"].content) > C.READ_CHAIN_MAX_BYTES + C.READ_MAX_MAX_BYTES
        assert C.utf8_size(out["exact"].content) == C.READ_CHAIN_MAX_BYTES
        assert C.utf8_size(out["over"].content) == C.READ_CHAIN_MAX_BYTES + 1
    return out


def bases(docs: dict[str, Doc]) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for doc in docs.values():
        grouped.setdefault(doc.base, []).append(doc.as_item())
    return [{"id": base, "name": base, "items": items} for base, items in sorted(grouped.items())]
