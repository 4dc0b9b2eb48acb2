"""What observe cannot name, and why: each quirk of the simulator (schemas/quirk-outcomes.yaml) and
each broken client (schemas/client-miniatures.yaml) that tests/test_observe.py does not drive, and
each ID the active suite names for a driven variant that observe does not (``PARTLY``).

A reason says what the wire would have to carry for passive observation to see the deviation, and
why the traffic of a conforming counterpart never carries it. tests/test_observe.py holds the
tables complete (the MCP quirks tests/test_observe_mcp.py drives count as driven): every variant
is driven or listed here, never both."""

from __future__ import annotations

FORGED = "needs a request no conforming client sends: "
CONTROL = "needs a state only control drives: "
OFF_WIRE = "what the client does with an answer never reaches the wire: "
HOST = "the host transport's API (a model's arguments, signals, bindings), which no request shows: "
EDGE = (
    "an expiry edge within a second of 300 s: observe leaves 1 s (plus [tolerances] clock_skew_seconds) on each "
    "side, since the Core stamps a reference somewhere between the request and the answer the proxy sees"
)
MCP = (
    "an MCP path's behaviour outside the search and read tools' successful results (observe judges only those, "
    "over streamable HTTP; a stdio server's traffic never passes a proxy)"
)
SK = "the search_knowledge tool's rules: observe judges only the search and read tools' results over MCP"
NEGOTIATION = (
    "an on_demand turn after an invalid capabilities answer shows only in front of a Core whose capabilities "
    "break (a broken Core too) and with --client-negotiates; observe then names NEG-004 (capabilities asked and "
    "supported before each on_demand turn), not how the client misread them"
)

UNSEEN_QUIRKS: dict[str, str] = {
    "capabilities_unauthenticated": FORGED + "capabilities without a token (observe names CAP-007 when one comes)",
    "lost_turn_recommitted": (
        "the run the lost attempt committed never reaches the proxy (its answer was lost): only the Core's own "
        "record of it tells a recommitted run from a first commit"
    ),
    "turn_hints_ignore_scope": CONTROL + "an account's knowledge scope that leaves documents out",
    "turn_key_without_session": (
        "two Agent Sessions sending one turn identity: a host's ids are its own conversation's, so only a driver "
        "that chooses them collides; observe does not judge TURN-013"
    ),
    "search_ignores_run": FORGED + "a run_id no turn started (a client names the run its turn got)",
    "search_fits_without_message": CONTROL + "a partly searchable corpus, whose answer carries a message",
    "partial_as_ok": CONTROL + "a partly searchable corpus (its ok answer looks like a whole corpus's)",
    "max_bytes_of_other_type_ignored": FORGED + "max_bytes as a string or a fraction",
    "max_bytes_unchecked": FORGED + "max_bytes outside 4096..32768 (strict: refused, not clamped)",
    "oversize_ref_accepted": FORGED + "a reference or cursor past 4096 bytes (the Core issues none)",
    "token_size_in_characters": FORGED + "a reference of 4097 bytes of two-byte characters",
    "token_bound_exclusive": FORGED + "a reference or cursor of exactly 4096 bytes (the Core issues none)",
    "max_bytes_out_of_range_crashes": FORGED + "max_bytes outside 4096..32768",
    "expiry_rounds_age": EDGE,
    "expiry_whole_seconds_late": EDGE,
    "expiry_after_edge": EDGE,
    "expiry_edge_crashes": EDGE,
    "cursor_ignores_scope": CONTROL + "a change of the account's knowledge scope mid-chain",
    "scope_change_ignored": CONTROL + "a change of the account's knowledge scope",
    "scope_widening_ignored": CONTROL + "a knowledge scope widened around a document",
    "refs_bound_to_run_only": (
        FORGED + "another identity presenting the issuing run's run_id (a conforming client names its own run, "
        "so the reference is refused as another run's, REF-006, before its identity matters)"
    ),
    "unsigned_refs": FORGED + "a tampered reference",
    "auth_optional": FORGED + "search or read without a token",
    "route_unchecked": FORGED + "a token sent to a route it was not minted for",
    "crash_on_bad_input": FORGED + "a malformed JSON body",
    "read_coalesced_across_identities": (
        FORGED + "another account presenting a reference at the moment its owner reads it (only concurrent "
        "clients show the coalescing: the load profile's case)"
    ),
}
UNSEEN_QUIRKS |= {
    name: MCP
    for name in (
        "mcp_missing_flag mcp_knowledge_on_job_path mcp_knowledge_callable_on_job_path mcp_identity_argument_honoured "
        "mcp_hidden_arguments_honoured mcp_delivery_argument_honoured mcp_no_structured_content mcp_read_before_turn "
        "mcp_session_per_workspace mcp_differs_from_http mcp_own_page_size mcp_error_as_jsonrpc "
        "mcp_read_tool_unlisted mcp_tools_after_first_turn mcp_presence_means_support mcp_on_demand_to_old_core "
        "mcp_old_core_501_as_failure mcp_no_rebinding_protection mcp_origin_checked_by_prefix "
        "mcp_scope_change_no_search_again mcp_turn_retry_new_identity"
    ).split()
}
UNSEEN_QUIRKS |= {
    name: SK
    for name in (
        "sk_alpha_inverted sk_semantic_weight_two_minus_alpha sk_alpha_unclamped sk_mode_refused sk_query_historical "
        "sk_pinned_revision_skips_state sk_window_in_bytes sk_existence_leak sk_owner_argument_honoured "
        "sk_audit_written sk_other_choices sk_scores_rounded sk_excerpt_whole_content sk_semantic_is_lexical "
        "sk_lexical_is_semantic sk_hybrid_lexical_only sk_hit_stale_members sk_read_needs_revision "
        "sk_revision_without_item sk_mixed_query_wins sk_scope_unchecked sk_hidden_refused sk_base_filter_ignored "
        "sk_short_default_window sk_many_default_results sk_read_type_renamed sk_audit_envelope sk_runtime_off_empty "
        "sk_bounds_clamped sk_nothing_as_empty_search sk_numbers_coerced mcp_search_knowledge_listed "
        "mcp_search_knowledge_text_summary"
    ).split()
}
"""Quirks no client's passive traffic shows, each with why."""

UNSEEN_CLIENTS: dict[str, str] = {
    "legacy_405_raises": OFF_WIRE + "after a 405 capabilities answer it raises; the wire shows only a turn not sent",
    "errors_as_unsupported": (
        OFF_WIRE + "a failed capabilities answer read as not supported; the turn without on_demand that follows "
        "is also what a host's explicit inline option sends"
    ),
    "trusts_any_capabilities": NEGOTIATION,
    "capabilities_limits_unchecked": NEGOTIATION,
    "capabilities_on_demand_mode_enough": NEGOTIATION,
    "disabled_as_unsupported": (
        OFF_WIRE + "enabled false read as not supported; the turn that follows is an inline option's on the wire"
    ),
    "on_demand_not_emitted": (
        HOST + "the on_demand option never reaches the request; a turn without it is an inline option's on the wire"
    ),
    "on_demand_needs_capabilities": HOST + "the explicit on_demand option sent only after capabilities, as a "
    "negotiating host's turns are",
    "model_chooses_delivery": HOST + "the model's knowledge_delivery chose the turn's; the request looks the same",
    "strips_inline_bodies": OFF_WIRE + "inline bodies dropped before the caller sees them",
    "caps_inline_preview": OFF_WIRE + "inline bodies cut before the caller sees them",
    "strips_on_demand_bodies": OFF_WIRE + "an on_demand turn's bodies emptied before the caller sees them",
    "delivery_checked_on_demand_only": OFF_WIRE + "which answers the client validates",
    "follows_pages": (
        OFF_WIRE + "one page asked, the whole chain read: what the caller asked for is not on the wire, and a chain "
        "followed on purpose looks the same"
    ),
    "unavailable_as_empty": OFF_WIRE + "an unavailable search given back as an empty ok",
    "search_errors_as_empty": OFF_WIRE + "a failed search given back as an empty ok",
    "read_errors_as_empty_page": OFF_WIRE + "a failed read given back as an empty last page",
    "budget_chain_as_full": OFF_WIRE + "how it describes a chain the budget stopped",
    "budget_chain_not_truncated": OFF_WIRE + "the flags it gives back for a chain the budget stopped",
    "budget_chain_described_full": OFF_WIRE + "how it describes a chain the budget stopped",
    "chain_drops_last_page": OFF_WIRE + "the last page's content left out of what it gives back",
    "chain_end_by_cursor": OFF_WIRE + "when it calls a chain complete",
    "chain_swallows_errors": (
        OFF_WIRE + "the error not given back and no search sent: silence after the error, which a caller that "
        "stops there shows too"
    ),
    "chain_stops_as_complete": OFF_WIRE + "the pages read before an error given back as the whole document",
    "host_without_aliases": HOST + "the snake-case max_bytes alias dropped",
    "host_refuses_both_spellings": HOST + "maxBytes and max_bytes refused together",
    "max_bytes_exclusive_bounds": (
        HOST + "maxBytes 4096 or 32768 dropped; the read goes out without max_bytes, as a caller asking for the "
        "default page does"
    ),
    "host_ignores_signal": HOST + "a cancellation signal",
    "host_checks_signal_before_only": HOST + "a cancellation signal",
    "host_checks_binding_before_only": HOST + "the Agent Session binding",
    "host_checks_binding_after_success_only": HOST + "the Agent Session binding",
    "host_without_capabilities": HOST + "the functions it exposes",
    "host_ignores_workspace": HOST + "the options' workspace",
    "host_checks_session_only": HOST + "the Agent Session binding",
    "host_takes_model_run": (
        HOST + "a model's run_id; observe names HOST-005 where a run started by another identity or route reaches "
        "the wire, which this traffic (the client's API, no host) never sends"
    ),
    "host_takes_model_camel_run": HOST + "a model's camelCase runId (see host_takes_model_run)",
    "malformed_answers": "a harness that breaks the protocol: a harness error in the active suite, nothing named",
}
"""Broken clients whose deviation no request shows, each with why."""

PARTLY: dict[str, dict[str, str]] = {
    "turn_no_pinning": {
        "TURN-012": "a retry after a lost response: " + UNSEEN_QUIRKS["lost_turn_recommitted"],
    },
    "search_cached_by_query": {
        "SRCH-010": (
            "named only where the cached search and an on_demand turn of the unavailable route meet within 10 s, "
            "as the traffic's order decides"
        ),
    },
    "read_budget_halved": {
        "READ-015": (
            "the active suite rebuilds the chain against the document it seeded (ground truth); observe knows only "
            "total_content_bytes, which a budget-stopped chain never reaches: it names READ-020"
        ),
    },
    "split_characters": {
        "READ-015": (
            "observe names the split character (READ-016) at the chain's end, the one deviation both rules see "
            "there; the suite judges the rebuilt text first (READ-015) against the document it seeded"
        ),
    },
    "error_next_action_elsewhere": {"MCP-010": MCP},
    "camel_case_on_the_wire": {
        "HOST-005": HOST + "the Core never gets a run_id, so no run is named on the wire (observe names READ-018)",
    },
}
"""IDs the active suite names for a driven variant that observe does not name, each with why."""
