"""Named, deliberate deviations from the contract, chosen at start.

Each quirk names the requirement IDs it violates. The conformance suite's own
tests run against every quirk and must fail a test tagged with one of them:
that is how the suite proves it catches real deviations.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quirk:
    name: str
    violates: tuple[str, ...]
    description: str


_QUIRKS = [
    Quirk("capabilities_missing", ("CAP-001",), "The capabilities endpoint answers 404 while search and read work."),
    Quirk("capabilities_wrong_schema", ("CAP-002",), "Capabilities advertises bailing.agent-knowledge.v2."),
    Quirk("capabilities_wrong_route", ("CAP-003",), "Capabilities reports another route than the one asked."),
    Quirk("capabilities_inline_only", ("CAP-004",), "Capabilities lists only the inline delivery mode."),
    Quirk("capabilities_loose_limits", ("CAP-005",), "Capabilities advertises five hints and a 262144-byte chain."),
    Quirk("disabled_still_enabled", ("CAP-006", "SRCH-009"), "A disabled workspace reports enabled true and searches with status ok."),
    Quirk("capabilities_unauthenticated", ("CAP-007",), "Capabilities answers without a token."),
    Quirk("legacy_answers_500", ("NEG-005",), "A legacy workspace answers the knowledge endpoints with 500."),
    Quirk("turn_ignores_delivery", ("TURN-003", "TURN-008"), "on_demand turns get the inline context."),
    Quirk("turn_no_pinning", ("TURN-004", "TURN-011", "TURN-012"), "A retried turn is a new run; another payload under the same identity is accepted."),
    Quirk("turn_delivery_bad_schema", ("TURN-006",), "context.knowledge_delivery says mode ondemand."),
    Quirk("turn_unbounded_hints", ("TURN-007",), "context.knowledge_delivery carries five hints."),
    Quirk("turn_bodies_on_demand", ("TURN-008",), "on_demand turns also carry knowledge bodies."),
    Quirk("turn_missing_refs_array", ("TURN-008",), "on_demand turns omit knowledge_refs."),
    Quirk("search_missing", ("SRCH-001",), "The search endpoint answers 404."),
    Quirk("search_ignores_run", ("SRCH-002", "AUTH-003"), "Search accepts any run_id, even one that was never started."),
    Quirk("search_fourth_hint", ("SRCH-003",), "Search returns four hints."),
    Quirk("search_hint_without_summary", ("SRCH-004",), "Hints lack their summary."),
    Quirk("search_status_empty", ("SRCH-005",), "A search with no hits has status empty."),
    Quirk("search_full_content", ("SRCH-006",), "Hint summaries carry the full document."),
    Quirk("trust_missing", ("SRCH-007", "READ-003"), "Search and read omit trust."),
    Quirk("search_oversize", ("SRCH-008",), "Titles and summaries are never trimmed, so search JSON can exceed 4096 bytes."),
    Quirk("unavailable_as_empty_ok", ("SRCH-010",), "An unavailable service searches as status ok with no hints."),
    Quirk("partial_as_ok", ("SRCH-011",), "A partly searchable corpus reports ok."),
    Quirk("read_missing", ("READ-001",), "The read endpoint answers 404."),
    Quirk("read_new_ref", ("READ-002",), "Read answers with a freshly minted ref instead of the original."),
    Quirk("read_default_32k", ("READ-004",), "Read pages default to 32768 bytes."),
    Quirk("max_bytes_ignored", ("READ-005",), "Read ignores max_bytes and always fills 16384 bytes."),
    Quirk("max_bytes_unchecked", ("READ-006",), "Read clamps an out-of-range max_bytes instead of refusing it."),
    Quirk("long_refs", ("READ-007",), "References are padded past 4096 bytes."),
    Quirk("oversize_ref_accepted", ("READ-008",), "A reference with trailing bytes past 4096 is accepted."),
    Quirk("truncated_lies", ("READ-009",), "Every page says truncated false."),
    Quirk("no_read_budget", ("READ-010", "READ-011"), "Read chains never stop at 131072 content bytes."),
    Quirk("budget_claims_complete", ("READ-011",), "An exhausted chain ends with truncated false and no budget_exhausted."),
    Quirk("wrong_total_bytes", ("READ-014",), "total_content_bytes counts characters, not bytes."),
    Quirk("pages_overlap", ("READ-015",), "Each next page repeats the last character of the previous one."),
    Quirk("split_characters", ("READ-015", "READ-016"), "Pages are cut by bytes, splitting multi-byte characters."),
    Quirk("refs_never_expire", ("REF-001",), "References never expire."),
    Quirk("refs_expire_early", ("REF-002",), "References expire after 60 seconds."),
    Quirk("ref_any_hub", ("REF-003",), "A reference of another Hub is accepted."),
    Quirk("ref_any_session", ("REF-004",), "A reference of another Agent Session is accepted."),
    Quirk("ref_any_route", ("REF-005",), "A reference of another route is accepted."),
    Quirk("ref_any_run", ("REF-006",), "A reference of another run is accepted."),
    Quirk("scope_change_ignored", ("REF-007",), "References survive a change of the account's scope."),
    Quirk("revision_change_ignored", ("REF-008",), "References survive a new revision and read the current one."),
    Quirk("ref_any_account", ("REF-009",), "A reference of another account is accepted."),
    Quirk("generic_error_codes", ("REF-011",), "Reference errors use the code invalid_reference."),
    Quirk("error_without_next_action", ("REF-012",), "Reference errors carry no next_action."),
    Quirk("error_leaks_content", ("REF-014",), "An expired-reference error carries the page content."),
    Quirk("unsigned_refs", ("REF-015",), "Reference signatures are not checked."),
    Quirk("auth_optional", ("AUTH-001",), "Search and read without a token act as the workspace's first identity."),
    Quirk("route_unchecked", ("AUTH-002",), "A token works on every route."),
    Quirk("crash_on_bad_input", ("WIRE-001",), "Malformed JSON bodies crash the handler (500)."),
    Quirk("turn_bad_schema_version", ("WIRE-002",), "Turn responses carry schema_version bailing.agent-turn.v0."),
    Quirk("cache_control_missing", ("WIRE-003",), "Responses omit Cache-Control: no-store."),
]

QUIRKS: dict[str, Quirk] = {q.name: q for q in _QUIRKS}


def parse_quirks(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Validate quirk names, with the known list in the error."""
    unknown = sorted(set(names) - QUIRKS.keys())
    if unknown:
        raise ValueError(f"unknown quirk(s) {', '.join(unknown)}; known: {', '.join(sorted(QUIRKS))}")
    return frozenset(names)
