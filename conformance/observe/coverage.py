"""The rules observe judges, and the traffic that shows each: what a report says of a rule the
traffic never exercised ("not observed"), so nobody reads silence as conformance.

Every other rule of the Core, client and host surfaces is outside what passive observation can
judge (it needs a state only control drives, a document's ground truth, or what a client does
with an answer off the wire): listed in the report, never counted."""

from __future__ import annotations

JUDGED: dict[str, str] = {
    "CAP-001": "a capabilities answer, or an old endpoint's status on a route whose search or read works",
    "CAP-002": "a 200 capabilities answer",
    "CAP-003": "a 200 capabilities answer",
    "CAP-004": "a 200 capabilities answer",
    "CAP-005": "a 200 capabilities answer",
    "CAP-006": "a read on a route after its capabilities said enabled false",
    "CAP-007": "a capabilities request without a credential",
    "TURN-003": "an on_demand turn on a route whose capabilities the traffic showed",
    "TURN-004": "a turn identity sent again with the same payload",
    "TURN-006": "an on_demand turn answered with context.knowledge_delivery",
    "TURN-007": "an on_demand turn answered with hints",
    "TURN-008": "an on_demand turn answered in the on_demand mode",
    "TURN-011": "a turn identity sent again with another payload",
    "SRCH-001": "a search answer, or an old endpoint's status on a route whose capabilities or read work",
    "SRCH-002": "searches in two runs that find the same document",
    "SRCH-003": "a 200 search answer",
    "SRCH-004": "a 200 search answer with hints",
    "SRCH-005": "a 200 search answer",
    "SRCH-006": "a 200 search answer with hints; a one-page read of a hint's reference",
    "SRCH-007": "a 200 search answer",
    "SRCH-008": "a 200 search answer",
    "SRCH-009": "a search on a route after its capabilities said enabled false",
    "SRCH-010": "a search and an on_demand turn on one route within a minute while knowledge is unavailable",
    "READ-001": "a read answer, or an old endpoint's status on a route whose capabilities or search work",
    "READ-002": "a 200 read answer",
    "READ-003": "a 200 read answer",
    "READ-004": "a read without max_bytes",
    "READ-005": "a read with max_bytes from 4096 to 32768",
    "READ-006": "a read with max_bytes outside 4096..32768",
    "READ-007": "a search hint or a page with a next_cursor",
    "READ-008": "a reference or cursor over 4096 bytes presented",
    "READ-009": "a read chain followed from its first page to its end, with total_content_bytes",
    "READ-010": "a read chain followed from its first page past 131072 content bytes",
    "READ-011": "a read chain followed from its first page that the budget stops",
    "READ-014": "a page with total_content_bytes or read_chain_max_bytes; a chain followed to its end",
    "READ-015": "a read chain followed from its first page to its end, with total_content_bytes",
    "READ-016": "a 200 read answer",
    "READ-020": "a read chain the budget stops, followed from its first page",
    "REF-001": "a reference (or its cursor) presented more than 300 s after its search was answered",
    "REF-002": "a reference presented within 300 s of its search",
    "REF-003": "a reference presented by another Hub's identity (identities configured with their Hub)",
    "REF-004": "a reference presented by another Agent Session (identities configured with their session)",
    "REF-005": "a reference presented on another route",
    "REF-006": "a reference presented under another run",
    "REF-008": "a reference read again from its start, or a chain's pages, after its revision changed",
    "REF-009": "a reference presented by another account (identities configured with their account)",
    "REF-011": "a read refused with a reference error",
    "REF-012": "a read refused with a reference error",
    "REF-014": "a read refused with a reference error",
    "AUTH-003": "a search or read under a run of another route or identity",
    "WIRE-001": "an error answer, or a 500",
    "WIRE-002": "a 200 capabilities, search, read or on_demand turn answer",
    "WIRE-003": "any answer of the four endpoints",
    # the client's side
    "NEG-004": "an on_demand turn (judged only with --client-negotiates: an explicit on_demand host option needs no capabilities)",
    "TURN-005": "a turn identity sent again (a retry)",
    "READ-018": "a search or read request",
    "REF-010": "a reference presented by another account than it was issued to (identities configured with their account)",
    "REF-013": "a request after a reference error",
    "HOST-005": "a search or read naming a run the traffic saw started",
}
"""Each rule observe judges, and the traffic that would show it."""

CLIENT_SIDE = frozenset({"NEG-004", "TURN-005", "READ-018", "REF-010", "REF-013", "HOST-005"})
