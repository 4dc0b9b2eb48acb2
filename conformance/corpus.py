"""The suite's own test corpus: small, deterministic, and hostile where it matters
(multi-byte and escaped characters, a document past the read budget, a title and
summary far past the search bound)."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

from conformance import contract as C

MAIN_BASE, SECOND_BASE = "kb-main", "kb-second"
_ODD = ["é", "€", "😀", "ß", "\"", "\\", "\n", "\t", "\u0001", "中文", "𝄞", " ", "a", "Z", "0", "<", "&", "\u2028"]


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


def build(seed: int = 7, *, large: bool = True) -> dict[str, Doc]:
    rng = Random(seed)
    docs = [
        Doc("alpha", "item-alpha", MAIN_BASE, "Homepage binding", "alphadoc binding. " + "The homepage is bound to one published site. " * 20),
        Doc("second", "item-second", SECOND_BASE, "Second base note", "seconddoc binding. " + "Kept in the second knowledge base. " * 10),
    ]
    docs += [Doc(f"filler{i}", f"item-filler{i}", MAIN_BASE, f"Binding note {i}", f"filler{i}doc binding binding notes " * (5 + i)) for i in range(4)]
    if large:
        docs.append(Doc("unicode", "item-unicode", MAIN_BASE, "Unicode handbook", "unicodedoc " + _odd_text(rng, 24_000)))
        big = "bigdoc " + "".join(f"line {i:06d} of the archive with é and 😀 and \"quotes\"\n" for i in range(3600))
        docs.append(Doc("big", "item-big", MAIN_BASE, "Big archive", big))
        docs.append(Doc("longtitle", "item-longtitle", MAIN_BASE, "Ü€😀" * 700 + " longtitle", "longtitledoc binding " * 40, summary="数据\"\\" * 3000))
    out = {d.key: d for d in docs}
    if large:
        assert C.utf8_size(out["big"].content) > C.READ_CHAIN_MAX_BYTES + C.READ_MAX_MAX_BYTES
    return out


def bases(docs: dict[str, Doc]) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for doc in docs.values():
        grouped.setdefault(doc.base, []).append(doc.as_item())
    return [{"id": base, "name": base, "items": items} for base, items in sorted(grouped.items())]
