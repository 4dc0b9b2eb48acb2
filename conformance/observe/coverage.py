"""The rules observe judges, and the traffic that shows each: what a report says of a rule the
traffic never exercised ("not observed"), so nobody reads silence as conformance.

Every other rule of the Core, client and host surfaces is outside what passive observation can
judge (it needs a state only control drives, a document's ground truth, or what a client does
with an answer off the wire): listed in the report, never counted."""

from __future__ import annotations

from conformance.clients import rules as clients
from conformance.mcp import rules as mcp
from conformance.server import rules as server

JUDGED: dict[str, str] = {
    server.CAP_001: "a capabilities answer, or an old endpoint's status on a route whose search or read works",
    server.CAP_002: "a 200 capabilities answer",
    server.CAP_003: "a 200 capabilities answer",
    server.CAP_004: "a 200 capabilities answer",
    server.CAP_005: "a 200 capabilities answer",
    server.CAP_006: "a read on a route after its capabilities said enabled false",
    server.CAP_007: "a capabilities request without a credential",
    server.TURN_003: "an on_demand turn on a route whose capabilities the traffic showed",
    server.TURN_004: "a turn identity sent again with the same payload",
    server.TURN_006: "an on_demand turn answered with context.knowledge_delivery",
    server.TURN_007: "an on_demand turn answered with hints",
    server.TURN_008: "an on_demand turn answered in the on_demand mode",
    server.TURN_011: "a turn identity sent again with another payload",
    server.SRCH_001: "a search answer, or an old endpoint's status on a route whose capabilities or read work",
    server.SRCH_002: "searches in two runs that find the same document",
    server.SRCH_003: "a 200 search answer",
    server.SRCH_004: "a 200 search answer with hints",
    server.SRCH_005: "a 200 search answer",
    server.SRCH_006: "a 200 search answer with hints; a one-page read of a hint's reference",
    server.SRCH_007: "a 200 search answer",
    server.SRCH_008: "a 200 search answer",
    server.SRCH_009: "a search on a route after its capabilities said enabled false",
    server.SRCH_010: "a search and an on_demand turn on one route within a minute while knowledge is unavailable",
    server.READ_001: "a read answer, or an old endpoint's status on a route whose capabilities or search work",
    server.READ_002: "a 200 read answer",
    server.READ_003: "a 200 read answer",
    server.READ_004: "a read without max_bytes",
    server.READ_005: "a read with max_bytes from 4096 to 32768",
    server.READ_006: "a read with max_bytes outside 4096..32768",
    server.READ_007: "a search hint or a page with a next_cursor",
    server.READ_008: "a reference or cursor over 4096 bytes presented",
    server.READ_009: "a read chain followed from its first page to its end, with total_content_bytes",
    server.READ_010: "a read chain followed from its first page past 131072 content bytes",
    server.READ_011: "a read chain followed from its first page that the budget stops",
    server.READ_014: "a page with total_content_bytes or read_chain_max_bytes; a chain followed to its end",
    server.READ_015: "a read chain followed from its first page to its end, with total_content_bytes",
    server.READ_016: "a 200 read answer",
    server.READ_020: "a read chain the budget stops, followed from its first page",
    server.REF_001: (
        "a reference (or its cursor) presented more than 300 s after its search was answered (over HTTP, or "
        "by an MCP read tool after an MCP search)"
    ),
    server.REF_002: "a reference presented within 300 s of its search",
    server.REF_003: "a reference presented by another Hub's identity (identities configured with their Hub)",
    server.REF_004: "a reference presented by another Agent Session (identities configured with their session)",
    server.REF_005: "a reference presented on another route",
    server.REF_006: "a reference presented under another run",
    server.REF_008: "a reference read again from its start, or a chain's pages, after its revision changed",
    server.REF_009: "a reference presented by another account (identities configured with their account)",
    server.REF_011: "a read refused with a reference error",
    server.REF_012: "a read refused with a reference error",
    server.REF_014: "a read refused with a reference error",
    server.AUTH_003: "a search or read under a run of another route or identity",
    server.WIRE_001: "an error answer, or a 500",
    server.WIRE_002: "a 200 capabilities, search, read or on_demand turn answer",
    server.WIRE_003: "any answer of the four endpoints",
    # what an MCP path relays: the Core's search and read rules above, judged on its tools' results too
    mcp.MCP_011: "a read_business_knowledge result over streamable HTTP (its page within the asked max_bytes)",
    # the client's side
    clients.NEG_004: "an on_demand turn (judged only with --client-negotiates: an explicit on_demand host option needs no capabilities)",
    clients.TURN_005: "a turn identity sent again (a retry)",
    clients.READ_018: "a search or read request",
    clients.REF_010: "a reference presented by another account than it was issued to (identities configured with their account)",
    clients.REF_013: "a request after a reference error",
    clients.HOST_005: "a search or read naming a run the traffic saw started",
}
"""Each rule observe judges, and the traffic that would show it."""

CLIENT_SIDE = frozenset(
    {clients.NEG_004, clients.TURN_005, clients.READ_018, clients.REF_010, clients.REF_013, clients.HOST_005}
)
