"""Which client and host rules a harness can show, and an honest reason for those it cannot."""

from __future__ import annotations

from conformance.clients import rules as clients
from knowledge_schemas import Catalogue

UNSHOWABLE: dict[str, str] = {
    clients.DSH_002: "not shown by a harness: which documents a host confirms as read lives in its context-delivery "
    "confirmation, and no harness command exposes that confirmation",
    clients.DSH_004: "not shown by a harness: what a host puts in its conversation is not part of the harness protocol "
    "(a harness answers what the SDK returned, not the text the host shows a model)",
    clients.MCP_007: "not shown by a harness: the harness protocol has no MCP tool listing; `knowledge-conformance run` "
    "checks on the Core side that the tools stay visible whatever the Core supports",
}


def gate(catalogue: Catalogue, surfaces: list[str]) -> list[str]:
    """The MUSTs a client run must verify to be conformant: those of the surfaces the harness
    declares that some wire shows, less the ones no harness can show."""
    return sorted(
        r.id
        for r in catalogue
        if r.surface in surfaces and r.level == "MUST" and r.via != "none" and r.id not in UNSHOWABLE
    )
