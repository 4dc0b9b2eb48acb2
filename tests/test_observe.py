"""``knowledge-conformance observe`` judges the traffic of the project's own clients against the
simulator: clean traffic violates nothing, each wire-visible quirk of the simulator and each
wire-visible broken client is named by the requirement IDs the active suite names for it, and a
recording of the same traffic gets the same verdict.

The variants' table is data (below): for each, the traffic sections it needs, the IDs observe must
name, and the IDs it may name besides (the same deviation seen on another exchange, as the active
suite sees it too). ``KC_OBSERVE_VARIANTS=all`` runs every variant; by default a few run, so the
test stays within CI's budget."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from conformance.clients.miniatures import MINIATURES
from conformance.clients.reference import ReferenceHarness
from conformance.observe.coverage import JUDGED
from conformance.observe.credentials import Credentials
from conformance.observe.har import read_har
from conformance.observe.judge import Judge
from conformance.observe.report import Source, build, rule_verdicts, write
from knowledge_schemas import load_registry, load_yaml
from tests.observe_unseen import PARTLY, UNSEEN_CLIENTS, UNSEEN_QUIRKS
from tests.serving import choose_variants
from tests.test_observe_mcp import MCP_QUIRKS
from tests.test_observe_support import SECTIONS, Observation, cfg, observe


@dataclass(frozen=True)
class Variant:
    sections: tuple[str, ...]
    names: frozenset[str]  # the IDs observe must name (the active suite names them for this deviation)
    besides: frozenset[str] = frozenset()  # IDs it may name too: the same deviation on another exchange
    client: str | None = None  # a broken client (conformance.clients.miniatures) instead of the reference
    quirk: str | None = None
    negotiating: bool = False
    strict: bool = False  # judged with [wire] codes.strict, as the active suite's run of a strict-only quirk


def v(sections: str, names: str, besides: str = "", **kw: Any) -> Variant:
    return Variant(tuple(sections.split()), frozenset(names.split()), frozenset(besides.split()), **kw)


QUIRKS: dict[str, Variant] = {
    "capabilities_missing": v("negotiation accounts", "CAP-001"),
    "capabilities_wrong_schema": v("negotiation", "CAP-002"),
    "capabilities_wrong_route": v("negotiation", "CAP-003"),
    "capabilities_inline_only": v("negotiation", "CAP-004"),
    "capabilities_loose_limits": v("negotiation", "CAP-005"),
    "disabled_on_demand_falls_back_inline": v("states", "CAP-006"),
    "disabled_still_enabled": v("states", "CAP-006 SRCH-009"),
    "read_while_disabled": v("states", "CAP-006"),
    "turn_ignores_delivery": v("negotiation", "TURN-003 TURN-008"),
    "turn_no_pinning": v("negotiation", "TURN-004"),
    "turn_delivery_bad_schema": v("negotiation", "TURN-006"),
    "turn_unbounded_hints": v("negotiation", "TURN-007"),
    "turn_bodies_on_demand": v("negotiation", "TURN-008"),
    "turn_missing_refs_array": v("negotiation", "TURN-008"),
    "turn_unavailable_as_ok": v("states", "SRCH-010"),
    "unavailable_as_empty_ok": v("states", "SRCH-010"),
    "search_missing": v("negotiation accounts", "SRCH-001"),
    "search_fourth_hint": v("search_and_read", "SRCH-003"),
    "search_hint_without_summary": v("search_and_read accounts", "SRCH-004", "TURN-006"),
    "search_status_empty": v("search_and_read", "SRCH-005"),
    "search_full_content": v("search_and_read", "SRCH-006", "SRCH-008 TURN-007"),
    "hint_summary_verbatim": v("search_and_read", "SRCH-006 TURN-007"),
    "search_hint_preview": v("search_and_read", "SRCH-006", "TURN-007"),
    "trust_missing": v("search_and_read", "SRCH-007 READ-003"),
    "search_oversize": v("search_and_read", "SRCH-008", "TURN-007"),
    "search_counts_characters": v("search_and_read", "SRCH-008 TURN-007"),
    "search_fills_counting_characters": v("search_and_read", "SRCH-008 TURN-007"),
    "search_escape_counted_as_one_byte": v("search_and_read", "SRCH-008 TURN-007"),
    "search_counts_bytes_before_escaping": v("search_and_read", "SRCH-008 TURN-007"),
    "search_fits_before_envelope": v("search_and_read", "SRCH-008 TURN-007"),
    "search_cached_by_query": v("accounts states", "SRCH-002 SRCH-009", "SRCH-010"),
    "read_missing": v("negotiation accounts", "READ-001"),
    "read_new_ref": v("search_and_read", "READ-002"),
    "read_default_4096": v("search_and_read", "READ-004"),
    "read_default_32k": v("search_and_read", "READ-004"),
    "max_bytes_ignored": v("search_and_read", "READ-005"),
    "max_bytes_range_exclusive": v("search_and_read", "READ-005"),
    "page_sized_by_raw_bytes": v("search_and_read", "READ-004 READ-005"),
    "long_refs": v("search_and_read accounts", "READ-007", "TURN-007"),
    "truncated_lies": v("search_and_read budget", "READ-009", "READ-011"),
    "full_budget_said_exhausted": v("budget", "READ-009"),
    "no_read_budget": v("budget", "READ-010 READ-011"),
    "budget_claims_complete": v("budget", "READ-011"),
    "read_budget_halved": v("budget", "READ-020"),
    "wrong_total_bytes": v("search_and_read", "READ-014"),
    "pages_overlap": v("search_and_read", "READ-015"),
    "split_characters": v("search_and_read", "READ-016"),
    "full_window_skips_a_character": v("search_and_read", "READ-015"),
    "pages_cut_in_utf16_units": v("search_and_read", "READ-016"),
    "refs_never_expire": v("expiry", "REF-001"),
    "refs_expire_early": v("expiry", "REF-002"),
    "read_refreshes_expiry": v("expiry", "REF-001"),
    "expiry_from_first_use": v("expiry", "REF-001"),
    "cursor_expiry_from_last_use": v("expiry", "REF-001"),
    "cursor_outlives_revision": v("revisions", "REF-008"),
    "revision_change_ignored": v("revisions", "REF-008"),
    "ref_any_hub": v("bindings", "REF-003"),
    "ref_any_session": v("bindings", "REF-004"),
    "ref_any_route": v("bindings", "REF-005"),
    "ref_any_run": v("bindings", "REF-006"),
    "generic_error_codes": v("expiry", "REF-011"),
    "error_next_action_elsewhere": v("expiry", "REF-012"),
    "error_leaks_content": v("expiry", "REF-014"),
    "turn_bad_schema_version": v("negotiation", "WIRE-002"),
    "cache_control_missing": v("negotiation", "WIRE-003"),
    "budget_ends_one_page_late": v("budget", "READ-020", strict=True),
    "read_budget_one_short": v("budget", "READ-020", strict=True),
    "error_without_next_action": v("expiry", "REF-012", strict=True),
}
"""Each quirk of the simulator a client's ordinary traffic shows (schemas/quirk-outcomes.yaml has
what the active suite names); docs/observe.md lists the quirks no passive observation can see."""

CLIENTS: dict[str, Variant] = {
    "retry_not_pinned": v("negotiation", "TURN-005"),
    "pin_kept_for_one_retry": v("retries", "TURN-005"),
    "turns_without_negotiating": v("negotiation", "NEG-004", negotiating=True),
    "negotiates_once_per_process": v("negotiation", "NEG-004", negotiating=True),
    "replays_after_reference_error": v("bindings", "REF-013"),
    "shares_search_cache": v("accounts", "REF-010"),
    "camel_case_on_the_wire": v("accounts", "READ-018"),
    "negotiation_not_pinned": v("retries", "TURN-005"),
}
"""Each broken client whose deviation its requests show (schemas/client-miniatures.yaml)."""

BOTH: dict[str, Variant] = {
    "ref_any_account+shares_search_cache": v(
        "accounts", "REF-009 REF-010", client="shares_search_cache", quirk="ref_any_account"
    ),
    "reference+client_negotiates": v(" ".join(SECTIONS), "", negotiating=True),
    "turn_no_pinning+retry_not_pinned": v(
        "negotiation", "TURN-004 TURN-005 TURN-011", client="retry_not_pinned", quirk="turn_no_pinning"
    ),
    "turn_fingerprint_ignores_delivery+retry_not_pinned": v(
        "negotiation",
        "TURN-005 TURN-011",
        client="retry_not_pinned",
        quirk="turn_fingerprint_ignores_delivery",
        strict=True,
    ),
}
"""A broken client in front of a broken Core (both sides named at once), and the reference client
judged with --client-negotiates (its traffic still violates nothing)."""

FAST_QUIRKS = ("capabilities_wrong_schema", "turn_unbounded_hints", "refs_never_expire")
FAST_CLIENTS = ("retry_not_pinned", "ref_any_account+shares_search_cache")
CHOSEN = os.environ.get("KC_OBSERVE_VARIANTS", "fast")


def _harness(name: str | None) -> ReferenceHarness:
    if name is None:
        return ReferenceHarness()
    harness = MINIATURES[name]()
    harness.name = name
    return harness


def _violated(observation: Observation) -> set[str]:
    return {rid for rid, verdict in rule_verdicts(observation.run).items() if verdict == "violated"}


def _judge_variant(name: str, variant: Variant, run: str) -> None:
    found = observe(
        _harness(variant.client),
        quirks=[variant.quirk] if variant.quirk else [],
        sections=variant.sections,
        run=run,
        negotiating=variant.negotiating,
        strict=variant.strict,
    )
    violated = _violated(found)
    messages = {rid: [f.message[:200] for f in kept] for rid, kept in found.judge.tally.findings.items()}
    assert not found.judge.tally.errors, found.judge.tally.errors
    assert variant.names <= violated, f"{name}: observe named {sorted(violated)}, expected {sorted(variant.names)}"
    assert violated <= variant.names | variant.besides, f"{name}: unexpected {messages}"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Observation:
    """The reference client's whole traffic, recorded as a HAR by the proxy."""
    return observe(ReferenceHarness(), har=tmp_path_factory.mktemp("observe") / "clean.har", run="clean")


def test_the_reference_clients_traffic_violates_nothing(clean: Observation) -> None:
    tally = clean.judge.tally
    assert not tally.findings, {rid: f[0].message for rid, f in tally.findings.items()}
    assert not tally.errors and not tally.unjudged
    held = {rid for rid, verdict in rule_verdicts(clean.run).items() if verdict == "held"}
    # what the clean traffic exercises, on both sides; the rest is listed as not observed
    assert {"CAP-002", "SRCH-008", "READ-010", "READ-020", "REF-001", "REF-006", "TURN-004", "TURN-005"} <= held
    assert {"REF-003", "REF-004", "REF-005", "REF-013", "READ-018", "HOST-005", "SRCH-009", "SRCH-010"} <= held
    assert clean.run.verdict == "conformant"
    assert clean.run.summary["observed_sessions"] == len(clean.world.connections)  # every connection sent some


def _judged_again(clean: Observation, *, strict: bool = False) -> Judge:
    assert clean.har is not None
    credentials = Credentials(clean.world.identities)
    judge = Judge(cfg(strict), credentials, base_url="http://core.example")
    for seen in read_har(clean.har, credentials):
        judge.judge(seen)
    return judge


def test_a_recording_of_the_same_traffic_gets_the_same_verdict(clean: Observation) -> None:
    assert clean.har is not None
    judge = _judged_again(clean)
    again = build(judge.tally.snapshot(), Source("har", clean.har.name), sessions=judge.ctx.credentials.count)
    assert rule_verdicts(again) == rule_verdicts(clean.run)
    assert again.verdict == clean.run.verdict
    assert again.summary["observed_exchanges"] == clean.run.summary["observed_exchanges"]


def test_the_same_traffic_judged_strictly_violates_nothing(clean: Observation) -> None:
    """Strict (``[wire] codes.strict``) holds the Core to this project's choices too; the simulator
    makes them, so the clean traffic still violates nothing (the strict-only quirks are judged so)."""
    tally = _judged_again(clean, strict=True).tally
    assert not tally.findings and not tally.errors, {rid: f[0].message for rid, f in tally.findings.items()}


def test_held_is_never_verified_in_the_reports(clean: Observation, tmp_path: Path) -> None:
    paths = write(clean.run, tmp_path)
    data = json.loads(paths["json"].read_text("utf-8"))
    assert not load_registry().errors("results", data)
    assert data["summary"]["verified"] == 0 and data["scope"]["label"] == "observed traffic"
    rows = {r["id"]: r for r in data["requirements"]}
    assert rows["SRCH-003"]["status"] == "not_verified" and rows["SRCH-003"]["reason"].startswith("held: seen ")
    assert rows["AUTH-003"]["reason"].startswith("not observed: ")
    markdown = paths["markdown"].read_text("utf-8")
    assert "| SRCH-003 | server | held |" in markdown and "## Never exercised by this traffic" in markdown
    assert "testcase" in paths["junit"].read_text("utf-8")
    tokens = [t for t in clean.world.identities]
    for path in [*paths.values(), clean.har]:
        assert path is not None
        text = path.read_text("utf-8")
        assert not [t for t in tokens if t in text or t[4:20] in text], path.name


def test_every_variant_names_only_rules_observe_judges() -> None:
    for variant in [*QUIRKS.values(), *CLIENTS.values(), *BOTH.values()]:
        assert variant.names | variant.besides <= set(JUDGED)
        assert set(variant.sections) <= set(SECTIONS)


def test_every_quirk_and_broken_client_is_driven_or_its_reason_given() -> None:
    """Each variant of the catalogues is driven here or listed with why no passive observation sees
    it, never both; each ID the active suite names for a driven one is named by observe or explained."""
    tables = {"quirk": (load_yaml("quirk-outcomes.yaml")["quirks"], QUIRKS, UNSEEN_QUIRKS)}
    tables["client"] = (load_yaml("client-miniatures.yaml")["miniatures"], CLIENTS, UNSEEN_CLIENTS)
    for side, (catalogue, driven, unseen) in tables.items():
        named: dict[str, set[str]] = {name: set(variant.names) for name, variant in driven.items()}
        if side == "quirk":  # the MCP quirks a tool's result shows: driven through the proxy by test_observe_mcp
            named |= {name: set(ids) for name, ids in MCP_QUIRKS.items()}
        for variant in BOTH.values():
            if (part := getattr(variant, side)) is not None:
                named.setdefault(part, set()).update(variant.names)
        listed = {entry["name"]: set(entry["violates"]) for entry in catalogue}
        assert set(unseen) <= set(listed) and not set(unseen) & set(named), side
        assert set(listed) == set(named) | set(unseen), sorted(set(listed) - set(named) - set(unseen))
        for name, ids in named.items():
            assert set(PARTLY.get(name, {})) == listed[name] - ids, name


@pytest.mark.parametrize("quirk", choose_variants(CHOSEN, list(QUIRKS), FAST_QUIRKS))
def test_a_quirk_of_the_core_is_named_by_its_ids(quirk: str) -> None:
    _judge_variant(quirk, replace(QUIRKS[quirk], quirk=quirk), f"q{len(quirk)}")


@pytest.mark.parametrize("name", choose_variants(CHOSEN, [*CLIENTS, *BOTH], FAST_CLIENTS))
def test_a_broken_client_is_named_by_its_ids(name: str) -> None:
    variant = BOTH.get(name) or CLIENTS[name]
    if name not in BOTH:
        variant = replace(variant, client=name)
    _judge_variant(name, variant, f"b{len(name)}")
