"""The read path's shortcuts answer exactly as the work they stand for (simulator.http, simulator.signing)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.http import _has_long_number
from simulator.signing import Signer, TokenError

_CLAIMS = st.dictionaries(
    st.text(max_size=4),
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
    max_size=9,
)


@given(st.binary(max_size=80) | st.text(alphabet='0123456789a."é', max_size=80).map(str.encode))
def test_a_long_number_is_found_as_the_regular_expression_finds_it(raw: bytes) -> None:
    assert _has_long_number(raw) == (re.search(rb"\d{19}", raw) is not None)


@given(st.sampled_from(["ref", "cursor"]), _CLAIMS)
def test_a_signed_length_is_the_length_of_the_token_signed(kind: str, claims: dict[str, Any]) -> None:
    signer = Signer(b"k" * 32)
    assert signer.signed_length(kind, claims) == len(signer.sign(kind, claims))


def test_a_remembered_token_is_still_only_the_one_signed() -> None:
    """Verified tokens are remembered, never a forgery of one, another kind's or another key's; and a
    caller changing the claims it got changes nothing remembered."""
    signer = Signer(b"k" * 32)
    token = signer.sign("ref", {"i": "doc", "t": 1.5})
    first = signer.verify("ref", token)
    first["i"] = "changed"
    assert signer.verify("ref", token) == {"i": "doc", "t": 1.5}
    head, _, mac = token.rpartition(".")
    forged = f"{head}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
    with pytest.raises(TokenError):
        signer.verify("ref", forged)
    with pytest.raises(TokenError):
        signer.verify("cursor", token)
    with pytest.raises(TokenError):
        Signer(b"j" * 32).verify("ref", token)
