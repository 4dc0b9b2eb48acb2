"""checks.reference_error: one cause, or several at once, under default and strict codes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from conformance.common.config import TargetConfig, load_config
from conformance.common.outcomes import ContractViolation
from conformance.server import checks
from conformance.server.rules import REF_001, REF_008


def _cfg(tmp_path: Path, strict: bool) -> TargetConfig:
    path = tmp_path / "target.toml"
    path.write_text(f"[wire]\ncodes = {{strict = {str(strict).lower()}}}\n", "utf-8")
    return load_config(str(path))


def _refusal(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"error": code, "message": "search again", "next_action": "search_knowledge"})


BOTH = {"reference_expired", "revision_changed"}


@pytest.mark.parametrize(
    ("status", "code"), [(410, "knowledge_reference_expired"), (409, "knowledge_revision_changed")]
)
def test_when_two_causes_hold_strict_accepts_either(tmp_path: Path, status: int, code: str) -> None:
    assert (
        checks.reference_error(_refusal(status, code), _cfg(tmp_path, True), BOTH, requirement=REF_001)["error"] == code
    )


@pytest.mark.parametrize(
    ("status", "code", "kinds"),
    [
        (409, "knowledge_scope_changed", BOTH),  # a cause that does not hold
        (409, "knowledge_reference_expired", BOTH),  # right code, the status of another kind
        (409, "knowledge_scope_changed", "reference_expired"),  # the old model's single kind
    ],
)
def test_strict_refuses_a_code_or_status_outside_the_causes(
    tmp_path: Path, status: int, code: str, kinds: str | set[str]
) -> None:
    with pytest.raises(ContractViolation) as info:
        checks.reference_error(_refusal(status, code), _cfg(tmp_path, True), kinds, requirement=REF_001)
    assert info.value.requirement == "REF-011"


def test_default_codes_accept_any_code_of_the_family(tmp_path: Path) -> None:
    checks.reference_error(
        _refusal(409, "knowledge_scope_changed"), _cfg(tmp_path, False), "reference_expired", requirement=REF_001
    )
    with pytest.raises(ContractViolation) as info:
        checks.reference_error(
            _refusal(200, "knowledge_scope_changed"), _cfg(tmp_path, False), BOTH, requirement=REF_008
        )
    assert info.value.requirement == "REF-008" and "expired or out of date with the revision" in str(info.value)
