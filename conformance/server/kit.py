"""The conformance corpus kit: the suite's own test documents (``corpus.build``) as plain files
and a manifest, for a Core that has no test-control extension.

An implementer ingests the kit once into a staging workspace through their own tooling, byte
for byte (each file's UTF-8 content is one item; its title and summary are in the manifest), and
names that workspace in the target configuration (``[target] kit_route``). The suite then finds
each document by its probe phrase, a word only that document contains, searching with the
primary identity, and runs the checks it runs on a corpus seeded through control."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from conformance.common import contract as C
from conformance.common.rules import Rule
from conformance.server import corpus
from conformance.server import rules as server

MANIFEST = "manifest.json"
KIT_SCHEMA = "knowledge-conformance.corpus-kit.v1"

_BUDGET = f"past the {C.READ_CHAIN_MAX_BYTES}-byte read-chain budget"
PURPOSES: dict[str, tuple[str, tuple[Rule, ...]]] = {
    "alpha": (
        "a plain document that 'binding' finds; the probe of reads and references",
        (server.READ_001, server.REF_011),
    ),
    "second": ("a document of a second knowledge base (scope changes need control)", (server.REF_007,)),
    "unicode": (
        "about 60 KB of multibyte, astral, escaped and control characters: default and sized pages, a cursor at 4096",
        (server.READ_004, server.READ_005, server.READ_009, server.READ_014, server.READ_015, server.READ_016),
    ),
    "big": (
        f"a long document far {_BUDGET}: the chain stops budget_exhausted",
        (server.READ_010, server.READ_011, server.READ_020),
    ),
    "longtitle": (
        "a title and summary of long multibyte and escape-heavy text, far past the 4096-byte search bound",
        (server.SRCH_008,),
    ),
    "cuts": (
        "every page cut falls next to an escape, an astral character or a combining sequence",
        (server.READ_009, server.READ_015, server.READ_016),
    ),
    "nospace": (
        "multibyte characters and no whitespace: every page cut falls between two multibyte characters",
        (server.READ_009, server.READ_015, server.READ_016),
    ),
    "ascii": (
        "about 24 KB of one-byte characters and nothing JSON escapes: a page's window fits its room exactly",
        (server.READ_009, server.READ_015, server.READ_016),
    ),
    "exact": (f"exactly {C.READ_CHAIN_MAX_BYTES} content bytes: reads completely", (server.READ_009, server.READ_020)),
    "over": (
        f"{C.READ_CHAIN_MAX_BYTES + 1} content bytes, its last character straddling the budget",
        (server.READ_010, server.READ_011, server.READ_020),
    ),
}
PURPOSES[corpus.SUMMARISED] = (
    "a short document whose summary is its whole content: no hint, of a search or a turn, may carry it whole",
    (server.SRCH_006, server.TURN_007),
)
for _i in range(4):
    PURPOSES[f"filler{_i}"] = (
        "a near-duplicate of the other binding notes: ranking must not matter",
        (server.SRCH_003,),
    )
for _key in corpus.WORST_KEYS:
    PURPOSES[_key] = (
        f"one of three documents found together by {corpus.WORST_WORD!r}, title and summary escape-heavy worst cases",
        (server.SRCH_008, server.TURN_007),
    )

README = """Conformance corpus kit

Ingest every document listed in {manifest} into one workspace of your staging Core, through
your own tooling: one knowledge item per entry, its content exactly the UTF-8 bytes of its file
(no trimming, no newline or Unicode normalization, no added heading), its title and summary
exactly the manifest's strings, in the knowledge base the entry names. Then name that workspace
in the target configuration:

    [target]
    route = "the workspace"          # the primary identity's route
    kit_route = "the workspace"

The suite finds each document by its probe phrase (a word only that document contains),
searching with the primary identity. A document it does not find leaves the rules that need it
not verified ("kit document KEY not found on route ROUTE"); it never fails the run.
"""


def manifest(docs: dict[str, corpus.Doc] | None = None) -> dict[str, Any]:
    """What each kit document is for and how the suite finds it."""
    docs = docs if docs is not None else corpus.build()
    entries = []
    for doc in docs.values():
        purpose, rules = PURPOSES.get(doc.key, ("a document of the suite's corpus", ()))
        data = doc.content.encode("utf-8")
        entry: dict[str, Any] = {
            "key": doc.key,
            "file": f"documents/{doc.base}/{doc.key}.txt",
            "base": doc.base,
            "item_id": doc.item_id,
            "title": doc.stored_title,
            "probe": doc.token,
            "content_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "purpose": purpose,
            "rules": list(rules),
        }
        if doc.summary is not None:
            entry["summary"] = doc.summary
        entries.append(entry)
    return {"schema": KIT_SCHEMA, "read_chain_max_bytes": C.READ_CHAIN_MAX_BYTES, "documents": entries}


def export(folder: Path) -> dict[str, Any]:
    """Write the kit into ``folder`` (created if needed): the documents, the manifest and a README."""
    docs = corpus.build()
    data = manifest(docs)
    for entry in data["documents"]:
        path = folder / entry["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(docs[entry["key"]].content.encode("utf-8"))
    (folder / MANIFEST).write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", "utf-8")
    (folder / "README.txt").write_text(README.format(manifest=MANIFEST), "utf-8")
    return data
