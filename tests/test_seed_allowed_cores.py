"""As strict as the seed, no stricter: Cores that behave in seed-allowed ways pass,
and only a strict run (`[wire] codes.strict = true`) holds them to this project's choices.

Every suite run below goes against the simulator inside one or more wrappers of
tests/seed_allowed.py; the runs are started together (module fixture) and each test
reads the results it is about."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from conformance.common.transport import InProcessTransport
from tests.seed_allowed import (
    CONTROL_TOKEN,
    OTHER_PATHS,
    ClampsMaxBytes,
    ControlWithoutLegacyStatus,
    ControlWithoutLostReadback,
    CursorNamesItsChain,
    DecoratedTitles,
    DeliveryExtraMember,
    ErrorsWithoutMessage,
    FeedbackNextActionOnly,
    ForbiddenWithoutToken,
    IgnoresContentType,
    IntegerRevisions,
    LenientSearch,
    MemberOrderMatters,
    NoTruncatedMember,
    OneHint,
    OtherPaths,
    OwnHintsToTheByte,
    PaddedBase64Refs,
    RefusesLargeLimit,
    SemanticFindsNothing,
    SmallerChainBudget,
    SmallPages,
    TurnsOfAnotherSchema,
    core,
    failures,
    only,
    run_suite,
    statuses,
)

ALLOWED = (
    DecoratedTitles,
    RefusesLargeLimit,
    ClampsMaxBytes,
    ErrorsWithoutMessage,
    IgnoresContentType,
    ControlWithoutLegacyStatus,
    LenientSearch,
    OneHint,
    ControlWithoutLostReadback,
    SmallPages,
    ForbiddenWithoutToken,
    IntegerRevisions,
    FeedbackNextActionOnly,
    DeliveryExtraMember,
    MemberOrderMatters,
    NoTruncatedMember,
)
CHAIN_IDS = ("READ-004", "READ-005", "READ-010", "READ-011", "READ-015", "READ-020")
PATHS_CONFIG = "[wire.paths]\n" + "".join(f'{name} = "{path}"\n' for name, path in OTHER_PATHS.items())
ERROR_IDS = ("WIRE-001", "AUTH-001", "AUTH-003", "SRCH-002", "READ-006", "READ-008", "REF-011", "REF-012")
SK_MODE_IDS = ("SK-003", "SK-025", "SK-028", "SK-029", "SK-030")
# name: (wrappers, suite arguments, strict[, more target configuration])
RUNS: dict[str, tuple[Any, ...]] = {
    "decorated": ((DecoratedTitles,), [], False),
    "all-allowed": (ALLOWED, [], False),
    "one-hint": ((OneHint,), only("SRCH-003", "SRCH-008"), False),
    "one-hint-strict": ((OneHint,), only("SRCH-003"), True),
    "limit-refused": ((RefusesLargeLimit,), only("SRCH-001", "SRCH-003"), False),
    "limit-refused-strict": ((RefusesLargeLimit,), only("SRCH-001", "SRCH-003"), True),
    "clamped": ((ClampsMaxBytes,), only("READ-006"), False),
    "clamped-strict": ((ClampsMaxBytes,), only("READ-006"), True),
    "no-message": ((ErrorsWithoutMessage,), only(*ERROR_IDS), False),
    "no-message-strict": ((ErrorsWithoutMessage,), [*only("WIRE-001"), "-k", "bad_input"], True),
    "no-legacy-knob": (
        (ControlWithoutLegacyStatus,),
        [*only("MCP-007"), "--mcp-target", "{url}/agent-api/v1/workspaces/{route}/mcp"],
        False,
    ),
    "no-lost-readback": ((ControlWithoutLostReadback,), only("TURN-012", "TURN-004"), False),
    "turn-schema": ((TurnsOfAnotherSchema,), [*only("WIRE-001", "WIRE-002"), "-k", "generated"], False),
    "lenient": ((LenientSearch,), only("WIRE-001", "WIRE-002"), False),
    "lenient-strict": ((LenientSearch,), [*only("WIRE-001"), "-k", "generated"], True),
    "content-type": ((IgnoresContentType,), [*only("WIRE-001"), "-k", "content_type"], False),
    "content-type-strict": ((IgnoresContentType,), [*only("WIRE-001"), "-k", "content_type"], True),
    "small-pages": ((SmallPages,), only(*CHAIN_IDS), False),
    "smaller-budget": ((SmallerChainBudget,), only(*CHAIN_IDS, "CAP-005", "READ-014"), False),
    "no-truncated": ((NoTruncatedMember,), only(*CHAIN_IDS, "READ-002", "READ-009"), False),
    "no-truncated-strict": ((NoTruncatedMember,), only("READ-002"), True),
    "forbidden": ((ForbiddenWithoutToken,), only("CAP-007", "AUTH-001"), False),
    "forbidden-strict": ((ForbiddenWithoutToken,), only("CAP-007", "AUTH-001"), True),
    "int-revision": ((IntegerRevisions,), only("READ-001", "READ-002", "WIRE-002"), False),
    "int-revision-strict": ((IntegerRevisions,), only("READ-002"), True),
    "feedback-only": ((FeedbackNextActionOnly,), only("REF-001", "REF-011", "REF-012", "READ-008"), False),
    "delivery-extra": ((DeliveryExtraMember,), only("TURN-006", "TURN-007", "WIRE-002"), False),
    "delivery-extra-strict": ((DeliveryExtraMember,), only("TURN-006"), True),
    "member-order": ((MemberOrderMatters,), only("TURN-004"), False),
    "member-order-strict": ((MemberOrderMatters,), only("TURN-004"), True),
    "cursor-names-chain": ((CursorNamesItsChain,), only("REF-008"), False),
    "cursor-names-chain-strict": ((CursorNamesItsChain,), only("REF-008"), True),
    "own-hints": ((OwnHintsToTheByte,), only("SRCH-004", "SRCH-006", "SRCH-008", "TURN-007"), False),
    "padded-base64-refs": ((PaddedBase64Refs,), only("REF-015"), False),
    "semantic-finds-nothing": (
        (SemanticFindsNothing,),
        [*only(*SK_MODE_IDS), "--mcp-target", "{url}/agent-api/v1/workspaces/{route}/mcp"],
        False,
    ),
    "other-paths": ((OtherPaths,), [*only("WIRE-001", "WIRE-002"), "-k", "generated"], False, PATHS_CONFIG),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, Any], str]]:
    reports = tmp_path_factory.mktemp("seed-allowed")

    def one(name: str) -> tuple[int, dict[str, Any], str]:
        wrappers, args, strict, *config = RUNS[name]
        return run_suite(core(*wrappers), reports / name, *args, strict=strict, config="".join(config))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RUNS, pool.map(one, RUNS), strict=True))


def _failed(runs: dict[str, tuple[int, dict[str, Any], str]], name: str) -> dict[str, str]:
    return failures(runs[name][1])


def _status(runs: dict[str, tuple[int, dict[str, Any], str]], name: str, rid: str) -> str:
    return statuses(runs[name][1])[rid]


def _out(runs: dict[str, tuple[int, dict[str, Any], str]], name: str) -> str:
    return runs[name][2][-2500:]


def test_decorated_titles_and_another_ranking_are_conformant(runs: Any) -> None:
    """Documents are identified by their content, never by title wording or rank."""
    code, results, out = runs["decorated"]
    assert failures(results) == {}, out[-3000:]
    assert code == 0 and results["verdict"] == "conformant", out[-2000:]


def test_every_seed_allowed_behaviour_at_once_is_conformant(runs: Any) -> None:
    """Every seed-allowed behaviour at once, the control's too: no failure, and every server MUST
    verified but TURN-012, which needs the lost response read back (GET /faults/lost): without it
    the run is honestly incomplete. (With the read-back, the wrappers' changes to the Core's turn
    bodies, which the control's copy does not carry, would make the comparison meaningless.)"""
    code, results, out = runs["all-allowed"]
    assert failures(results) == {}, out[-3000:]
    musts = [r for r in results["requirements"] if r["surface"] == "server" and r["level"] == "MUST"]
    unverified = {r["id"] for r in musts if r["status"] != "verified"}
    assert unverified == {"SCOPE-001", "SCOPE-002", "TURN-012"}, (unverified, out[-2000:])
    assert code == 6 and results["verdict"] == "incomplete", out[-2000:]


def test_fewer_than_three_hints_pass_unless_strict(runs: Any) -> None:
    assert _failed(runs, "one-hint") == {} and _status(runs, "one-hint", "SRCH-003") == "verified", _out(
        runs, "one-hint"
    )
    assert set(_failed(runs, "one-hint-strict")) == {"SRCH-003"}, _out(runs, "one-hint-strict")


def test_a_limit_above_three_may_be_refused_unless_strict(runs: Any) -> None:
    assert _failed(runs, "limit-refused") == {} and _status(runs, "limit-refused", "SRCH-003") == "verified", _out(
        runs, "limit-refused"
    )
    failed = _failed(runs, "limit-refused-strict")
    assert set(failed) == {"SRCH-003"} and "limit" in failed["SRCH-003"], _out(runs, "limit-refused-strict")


def test_a_clamped_max_bytes_passes_unless_strict(runs: Any) -> None:
    assert _status(runs, "clamped", "READ-006") == "verified", _out(runs, "clamped")
    assert set(_failed(runs, "clamped-strict")) == {"READ-006"}, _out(runs, "clamped-strict")


def test_an_error_without_message_passes_unless_strict(runs: Any) -> None:
    assert _failed(runs, "no-message") == {}, _out(runs, "no-message")
    assert all(_status(runs, "no-message", rid) == "verified" for rid in ERROR_IDS), _out(runs, "no-message")
    failed = _failed(runs, "no-message-strict")
    assert set(failed) == {"WIRE-001"} and "message" in failed["WIRE-001"], _out(runs, "no-message-strict")


def test_legacy_status_is_whatever_the_core_answers(runs: Any) -> None:
    """The suite does not choose the legacy status: a control without the legacy_status knob still
    puts a legacy Core behind the MCP tools."""
    assert _status(runs, "no-legacy-knob", "MCP-007") == "verified", _out(runs, "no-legacy-knob")


def test_a_control_without_lost_readback_leaves_the_committed_run_not_verified_never_failed(runs: Any) -> None:
    """GET /faults/lost is optional: without it the retry is checked for consistency only (TURN-004),
    the comparison with the committed run is skipped, and TURN-012 stays not verified: no test claims
    it from a retry it cannot compare (a Core that starts a new run on the retry would pass that)."""
    code, results, out = runs["no-lost-readback"]
    assert failures(results) == {} and _status(runs, "no-lost-readback", "TURN-012") == "not_verified", out[-2500:]
    assert _status(runs, "no-lost-readback", "TURN-004") == "verified"
    compared = [t for t in results["tests"] if "resolves_to_the_committed_run" in t["nodeid"]]
    assert len(compared) == 2 and all(t["outcome"] == "skipped" and "not verified" in t["message"] for t in compared), (
        compared
    )
    assert code == 6, out[-2000:]  # incomplete: TURN-012, and the requirements the run did not select


def test_schema_violations_found_by_schemathesis_are_charged_to_wire_002(runs: Any) -> None:
    assert set(_failed(runs, "turn-schema")) == {"WIRE-002"}, _out(runs, "turn-schema")
    assert _status(runs, "turn-schema", "WIRE-001") == "verified", _out(runs, "turn-schema")
    # --no-shrink reaches the generated requests too: the failing case is reported as found (about
    # 80 requests, the same every run), not minimised against the Core (some 630).
    assert runs["turn-schema"][1]["requests"] < 200, runs["turn-schema"][1]["requests"]


def test_accepted_negative_data_fails_only_a_strict_run(runs: Any) -> None:
    assert _failed(runs, "lenient") == {}, _out(runs, "lenient")
    failed = _failed(runs, "lenient-strict")
    assert set(failed) == {"WIRE-001"} and "accepted" in failed["WIRE-001"], _out(runs, "lenient-strict")


def test_json_under_another_content_type_passes_unless_strict(runs: Any) -> None:
    assert _status(runs, "content-type", "WIRE-001") == "verified", _out(runs, "content-type")
    failed = _failed(runs, "content-type-strict")
    assert set(failed) == {"WIRE-001"} and "415" in failed["WIRE-001"], _out(runs, "content-type-strict")


def test_own_summaries_and_hints_filled_to_the_byte_pass(runs: Any) -> None:
    """A Core may derive its own summaries and fill the search bound to its last byte: the
    worst-case hints are judged on the bytes sent, never on how the Core chose its text."""
    assert _failed(runs, "own-hints") == {}, _out(runs, "own-hints")
    assert _status(runs, "own-hints", "SRCH-008") == "verified", _out(runs, "own-hints")
    assert _status(runs, "own-hints", "TURN-007") == "verified", _out(runs, "own-hints")


def test_pages_much_smaller_than_asked_pass(runs: Any) -> None:
    """The walk of a chain is bounded by its bytes, not by a page count: a budget-sized chain of
    a few hundred small pages is read to its end (it used to fail READ-010 after 64 pages)."""
    assert _failed(runs, "small-pages") == {}, _out(runs, "small-pages")
    assert all(_status(runs, "small-pages", rid) == "verified" for rid in CHAIN_IDS), _out(runs, "small-pages")


def test_a_smaller_advertised_chain_budget_passes(runs: Any) -> None:
    """CAP-005 accepts a read_chain_max_bytes under 131072; the chain rules judge a chain against
    the budget the Core advertises (READ-020 used to demand more than 98,304 bytes)."""
    assert _failed(runs, "smaller-budget") == {}, _out(runs, "smaller-budget")
    assert all(_status(runs, "smaller-budget", rid) == "verified" for rid in CHAIN_IDS), _out(runs, "smaller-budget")


def test_pages_without_a_truncated_member_pass_unless_strict(runs: Any) -> None:
    """The seed lists a page's members as ref, revision, content and next_cursor: a page may leave
    truncated out (READ-002 used to demand it); strict holds this project's choice."""
    assert _failed(runs, "no-truncated") == {}, _out(runs, "no-truncated")
    verified = ("READ-002", "READ-009", *CHAIN_IDS)
    assert all(_status(runs, "no-truncated", rid) == "verified" for rid in verified), _out(runs, "no-truncated")
    failed = _failed(runs, "no-truncated-strict")
    assert set(failed) == {"READ-002"} and "truncated" in failed["READ-002"], _out(runs, "no-truncated-strict")


def test_403_for_a_missing_token_passes_unless_strict(runs: Any) -> None:
    assert _failed(runs, "forbidden") == {}, _out(runs, "forbidden")
    assert _status(runs, "forbidden", "CAP-007") == _status(runs, "forbidden", "AUTH-001") == "verified", _out(
        runs, "forbidden"
    )
    failed = _failed(runs, "forbidden-strict")
    assert set(failed) == {"CAP-007", "AUTH-001"} and "403" in failed["CAP-007"], _out(runs, "forbidden-strict")


def test_an_integer_revision_passes_unless_strict(runs: Any) -> None:
    assert _failed(runs, "int-revision") == {}, _out(runs, "int-revision")
    assert _status(runs, "int-revision", "READ-002") == _status(runs, "int-revision", "WIRE-002") == "verified", _out(
        runs, "int-revision"
    )
    failed = _failed(runs, "int-revision-strict")
    assert set(failed) == {"READ-002"} and "revision" in failed["READ-002"], _out(runs, "int-revision-strict")


def test_next_action_in_a_feedback_object_of_its_own_passes(runs: Any) -> None:
    """CHOICES.md accepts next_action inside feedback; the error schema does not ask for the SDK's whole feedback object."""
    assert _failed(runs, "feedback-only") == {}, _out(runs, "feedback-only")
    assert all(_status(runs, "feedback-only", rid) == "verified" for rid in ("REF-011", "REF-012")), _out(
        runs, "feedback-only"
    )


def test_an_extra_delivery_member_passes_unless_strict(runs: Any) -> None:
    assert _failed(runs, "delivery-extra") == {}, _out(runs, "delivery-extra")
    assert _status(runs, "delivery-extra", "TURN-006") == "verified", _out(runs, "delivery-extra")
    failed = _failed(runs, "delivery-extra-strict")
    assert set(failed) == {"TURN-006"} and "generated_by" in failed["TURN-006"], _out(runs, "delivery-extra-strict")


def test_generated_requests_go_to_the_configured_paths(runs: Any) -> None:
    """test_negative builds its requests from openapi.yaml but sends them where [paths] says: with
    search, read and turns served elsewhere, nothing reaches their default paths."""
    assert _failed(runs, "other-paths") == {}, _out(runs, "other-paths")
    assert _status(runs, "other-paths", "WIRE-001") == _status(runs, "other-paths", "WIRE-002") == "verified", _out(
        runs, "other-paths"
    )
    assert OtherPaths.strays == [], OtherPaths.strays[:5]


DIMENSIONS = {"REF-003": "hub", "REF-004": "session", "REF-005": "route", "REF-009": "account"}


@pytest.mark.parametrize("rid", DIMENSIONS)
def test_a_case_claims_only_its_own_requirement(rid: str) -> None:
    """--requirement selects what claims an ID; a binding-matrix case must not inherit its siblings' IDs."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "conformance.suite",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--assert=plain",
        "--requirement",
        rid,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    matrix = [line for line in out.splitlines() if "test_one_differing_binding_is_refused[" in line]
    dimensions = {line.split("[", 1)[1].split("-", 1)[0] for line in matrix}
    assert len(matrix) == 4 and dimensions == {DIMENSIONS[rid]}, out[-1500:]


def test_the_simulator_refuses_a_body_that_is_not_declared_json() -> None:
    with httpx.Client(transport=InProcessTransport(core()), base_url="http://sim") as http:
        ctl = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
        assert http.post("/_control/v1/workspaces", json={"route": "ct"}, headers=ctl).status_code == 201
        token = http.post("/_control/v1/identities", json={"account": "a", "route": "ct"}, headers=ctl).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "x"}
        run_id = http.post("/agent-api/v1/workspaces/ct/turns", json=turn, headers=auth).json()["run_id"]
        body = json.dumps({"query": "binding", "run_id": run_id})
        path = "/agent-api/v1/workspaces/ct/knowledge/search"
        for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            response = http.post(path, content=body, headers={**auth, "Content-Type": media})
            assert response.status_code == 415 and response.json()["error"] == "unsupported_media_type", (
                media,
                response.text,
            )
        for media in ("application/json", "application/json; charset=utf-8", "application/problem+json"):
            response = http.post(path, content=body, headers={**auth, "Content-Type": media})
            assert response.status_code == 200, (media, response.text)


def test_a_refused_replay_with_reordered_members_passes_unless_strict(runs: Any) -> None:
    """Pinning forbids another run; refusing the reordered replay keeps the run pinned."""
    assert _failed(runs, "member-order") == {} and _status(runs, "member-order", "TURN-004") == "verified", _out(
        runs, "member-order"
    )
    failed = _failed(runs, "member-order-strict")
    assert set(failed) == {"TURN-004"} and "reordered" in failed["TURN-004"], _out(runs, "member-order-strict")


def test_a_cursor_that_names_its_own_chain_passes_unless_strict(runs: Any) -> None:
    """Beside another document's reference, such a cursor reads its own chain on: the seed allows it."""
    assert _failed(runs, "cursor-names-chain") == {} and _status(runs, "cursor-names-chain", "REF-008") == "verified", (
        _out(runs, "cursor-names-chain")
    )
    assert set(_failed(runs, "cursor-names-chain-strict")) == {"REF-008"}, _out(runs, "cursor-names-chain-strict")


def test_padded_base64_references_decoded_leniently_pass(runs: Any) -> None:
    """Text after a reference's padding is ignored by common decoders: never probed as a tampered reference."""
    assert _failed(runs, "padded-base64-refs") == {} and _status(runs, "padded-base64-refs", "REF-015") == "verified", (
        _out(runs, "padded-base64-refs")
    )


def test_a_semantic_model_that_finds_nothing_is_not_verified_never_failed(runs: Any) -> None:
    """The seed names semantic evidence without defining it: a model that finds neither the document
    related by meaning nor the one holding the rare term shows nothing either way (SK-029 not
    verified), and the other modes' rules still hold on the lexical list alone."""
    code, results, out = runs["semantic-finds-nothing"]
    assert failures(results) == {}, out[-3000:]
    assert _status(runs, "semantic-finds-nothing", "SK-029") == "not_verified", out[-2500:]
    for rid in ("SK-003", "SK-025", "SK-028", "SK-030"):
        assert _status(runs, "semantic-finds-nothing", rid) == "verified", (rid, out[-2500:])
    assert code == 6 and results["verdict"] == "incomplete", out[-2000:]
