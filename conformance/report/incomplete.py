"""Why a run is incomplete: each MUST the verdict counts that no check verified, why, and what
would verify it (a table of the target configuration, a flag) or the declared scope that the run
as it stands would pass. A reader of "INCOMPLETE: 49 of 61" needs the twelve, not the count."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.common.scope import Scope
from knowledge_schemas.catalogue import Catalogue, Requirement

REMEDIES = {
    "control": "the Core's test-control extension (a [control] table)",
    "clock": "the control clock ([control]) or --realtime, which waits the 300 s out",
    "second_identity": "the missing identity's token ([identities.NAME], see the reason)",
    "documents": "the suite's corpus: `knowledge-conformance corpus export`, ingest it, then [target] kit_route",
    "workspace_states": "a workspace kept in that state ([target.workspaces])",
    "legacy_target": "a Core in legacy mode ([target.workspaces] legacy)",
}
"""What provides each need of the catalogue (``observe.needs``), as a user of the suite gives it."""

CANDIDATE_SCOPES = (
    Scope(("server",), ("no-control", "realtime")),
    Scope(("server",), ("no-control",)),
)


SAID = (
    ("test-control extension", "control"),
    ("control clock", "clock"),
    ("--realtime", "clock"),
    ("corpus", "documents"),
    ("identit", "second_identity"),
)
"""Needs a check's own reason names, for a requirement whose catalogue entry lists none (what its
checks need then depends on the run: the suite's documents, say)."""


def remedy(requirement: Requirement, reason: str = "") -> str:
    """What a run must have to verify ``requirement``, from the catalogue and the reason it was not."""
    said = first_reason(reason)
    needs = list(requirement.needs) or list(dict.fromkeys(need for words, need in SAID if words in said))
    if "clock" in needs and "control" in needs:
        needs.remove("clock")  # control drives the clock too
    found = [REMEDIES[n] for n in needs if n in REMEDIES]
    return "; ".join(found) or "nothing more: its checks ran and did not reach it (see the reason)"


def first_reason(reason: str) -> str:
    """The first of a requirement's reasons (its tests' skips are joined with '; not verified:')."""
    return reason.split("; not verified:")[0]


def explain(rows: Iterable[Any], catalogue: Catalogue) -> list[dict[str, str]]:
    """``rows`` are the gating MUSTs' results: those not verified, each with its reason and remedy."""
    return [
        {"id": r.id, "title": r.title, "reason": r.reason, "to_verify": remedy(catalogue[r.id], r.reason)}
        for r in rows
        if r.status == "not_verified"
    ]


def passing_scope(verified: set[str], catalogue: Catalogue) -> str | None:
    """The widest declared scope whose every MUST this run verified: what ``--scope`` would pass."""
    for scope in CANDIDATE_SCOPES:
        members = scope.members(catalogue)
        if members and set(members) <= verified:
            return scope.label
    return None
