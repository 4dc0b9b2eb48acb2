"""The scrubber masks every window of 8 or more characters of any spelling of a secret (raw,
escaped, hex, base64 at any alignment), exactly as the obvious slow masking would."""

from __future__ import annotations

import base64
import dataclasses
import html
import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.common.secrets import FRAGMENT, MASK, Scrubber, _windows, protected

SECRET = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=6, max_size=40)


@st.composite
def texts_with_cuts(draw: st.DrawFn, secrets: list[str]) -> str:
    """Ordinary text with whole secrets and pieces of them (cut at either end) spliced in."""
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        secret = draw(st.sampled_from(secrets))
        i, j = sorted(draw(st.lists(st.integers(0, len(secret)), min_size=2, max_size=2)))
        parts += [draw(st.text(max_size=12)), draw(st.sampled_from((secret, secret[i:], secret[:j], secret[i:j])))]
    return "".join(parts) + draw(st.text(max_size=12))


def _reference_mask(text: str, scrubber: Scrubber) -> str:
    """The slow, obvious masking: every character inside any window of any spelling, merged."""
    windows = {w for v in scrubber.values for w in _windows(v) if w.lower() not in protected()}
    sizes = {len(w) for w in windows}
    covered = [False] * len(text)
    for start in range(len(text)):
        for size in sizes:
            if text[start : start + size] in windows:
                covered[start : start + size] = [True] * size
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(MASK)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(SECRET, min_size=1, max_size=5))
def test_the_automaton_masks_exactly_what_the_obvious_masking_does(data: st.DataObject, secrets: list[str]) -> None:
    scrubber = Scrubber()
    for secret in secrets:
        scrubber.add(secret)
    text = data.draw(texts_with_cuts(secrets))
    assert scrubber.text(text) == _reference_mask(text, scrubber)


@settings(max_examples=100, deadline=None)
@given(st.data(), SECRET, st.sampled_from(["", "Bearer ", "Basic "]), st.text(max_size=5), st.text(max_size=5))
def test_no_encoding_of_a_secret_survives_at_any_alignment(
    data: st.DataObject, secret: str, scheme: str, before: str, after: str
) -> None:
    """A Core that base64-encodes a text holding the token (alone or as an Authorization value)
    leaks nothing: no 8 consecutive characters of the token's encoding at that alignment remain."""
    scrubber = Scrubber()
    scrubber.add(secret)
    raw = (before + scheme + secret + after).encode()
    secret_bytes = secret.encode()
    start = len((before + scheme).encode())
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(raw).decode()
        clean = scrubber.text(encoded)
        # the characters that carry only secret bits, at this alignment
        first, last = -(-8 * start // 6), 8 * (start + len(secret_bytes)) // 6
        carried = encoded[first:last]
        for i in range(len(carried) - FRAGMENT + 1):
            window = carried[i : i + FRAGMENT]
            assert window not in clean or window.lower() in protected()  # a word of the suite's own is kept
    for form in (secret, secret.encode().hex(), quote(secret, safe=""), html.escape(secret)):
        for i in range(max(1, len(form) - FRAGMENT + 1)):
            window = form[i : i + FRAGMENT]
            assert window not in scrubber.text(f"<<{window}>>") or window.lower() in protected()


def test_a_secret_added_after_a_scrub_is_masked_from_then_on() -> None:
    scrubber = Scrubber()
    assert scrubber.text("token kc-first-secret here") == "token kc-first-secret here"
    scrubber.add("kc-first-secret")
    assert scrubber.text("token kc-first-secret here") == f"token {MASK} here"
    assert scrubber.text("cut: kc-first-se") == f"cut: {MASK}"


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(SECRET, min_size=1, max_size=4), st.integers(-60, 60))
def test_a_clip_keeps_what_a_cut_of_the_whole_scrubbed_text_keeps(
    data: st.DataObject, secrets: list[str], limit: int
) -> None:
    """``clip`` scrubs only a window when the window is clean; what it keeps is what scrubbing the
    whole text and then cutting keeps, wherever the secrets and their pieces fall."""
    from conformance.common import secrets as module

    scrubber = module.RunSecrets()
    for secret in secrets:
        scrubber.add(secret)
    text = data.draw(texts_with_cuts(secrets)) * data.draw(st.integers(1, 4))
    whole = scrubber.text(text)
    saved, module.SECRETS = module.SECRETS, scrubber
    try:
        assert module.clip(text, limit) == (whole[limit:] if limit < 0 else whole[:limit])
    finally:
        module.SECRETS = saved


def test_a_text_with_a_lone_surrogate_is_scrubbed_not_crashed() -> None:
    scrubber = Scrubber()
    scrubber.add("kc-surrogate-secret")
    assert scrubber.text("\ud800 kc-surrogate-secret \udfff") == f"\ud800 {MASK} \udfff"


def test_a_test_s_record_stays_data_when_a_secret_in_it_is_masked() -> None:
    """A mask laid over JSON text can end on the backslash of an escape and leave a bare quote; the
    record a test carries between pytest's hooks is data, masked value by value, so it stays whole."""
    from conformance.common.secrets import SECRETS, scrub
    from conformance.plugin.claims import PROPERTY, TestClaims, scrubbed

    secret = 'kc-quoted"secret-value-0123456789'
    SECRETS.add(secret)
    # the secret whole, and its start before a backslash: masking that start as text ends the mask
    # on the first backslash of the escaped one and leaves an escaped quote where the string ended
    carried = [{"body": f"prefix {secret} suffix", "cut": secret[:9] + "\\"}]
    claims = TestClaims(nodeid="t::x", exchanges=carried, timings=carried, tool_calls=carried, sequence=[secret])
    kept = scrubbed(PROPERTY, json.loads(json.dumps(dataclasses.asdict(claims))))
    assert secret not in json.dumps(kept) and "kc-quoted" not in json.dumps(kept)
    assert TestClaims(**kept).exchanges[0]["body"].startswith("prefix ")
    text = json.dumps(carried)
    assert secret.replace('"', '\\"') in text
    with pytest.raises(ValueError):  # what a text-level mask over the same data as JSON text does to it
        broken = scrub(text)
        json.loads(broken)
        raise AssertionError(f"the text-level mask left JSON after all: {broken}")


def _masked_each(node: object, scrubber: Scrubber) -> object:
    """The obvious masking of a JSON-like value: every string (keys too) masked on its own."""
    if isinstance(node, str):
        return scrubber.text(node)
    if isinstance(node, dict):
        return {scrubber.text(str(k)): _masked_each(v, scrubber) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_masked_each(v, scrubber) for v in node]
    return node


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(SECRET, min_size=1, max_size=3))
def test_a_record_is_masked_as_each_of_its_strings_would_be(data: st.DataObject, secrets: list[str]) -> None:
    """data() decides a record in one pass over all its strings: it must give what masking each
    string gives, with secrets whole, cut, or split across two strings (no mask may come of that)."""
    scrubber = Scrubber()
    for secret in secrets:
        scrubber.add(secret)
    leaf = texts_with_cuts(secrets) | st.integers() | st.none() | st.text(max_size=6)
    record = data.draw(
        st.recursive(
            leaf,
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.tuples(inner)
                | st.dictionaries(texts_with_cuts(secrets) | st.text(max_size=4), inner, max_size=3)
                | st.dictionaries(st.integers(), inner, max_size=2)
            ),
            max_leaves=8,
        )
    )
    assert scrubber.data(record) == _masked_each(record, scrubber)


@pytest.mark.parametrize("minted", ["failed", "FAILED", "non-conformant", "xxnon-conformant", "READ-005", "verdict"])
def test_a_token_that_is_one_of_the_suite_s_own_words_masks_none_of_them(minted: str) -> None:
    """A hostile control extension mints a word of the reports as a token: the reports keep that
    word (an outcome, a verdict, a key, a requirement ID), while a real token is still masked."""
    scrubber = Scrubber()
    token = "bha_" + "5f" * 20
    scrubber.add(minted)
    scrubber.add(token)
    own = '{"verdict": "non-conformant", "outcome": "failed", "violated": "READ-005"} VERDICT: NON-CONFORMANT'
    assert scrubber.text(own) == own
    assert scrubber.text(f"echo {token}") == f"echo {MASK}"


def test_the_protected_words_come_from_the_results_schema_and_the_catalogue() -> None:
    pieces = protected()
    assert {"failed", "verified", "non-conf", "-conform", "verdict", "nodeid", "outcome", "read-005"} <= pieces
    assert "bha_5f5f" not in pieces and all(6 <= len(piece) <= FRAGMENT for piece in pieces)


def test_a_test_s_record_keeps_its_own_fields_whatever_a_secret_matches() -> None:
    """The record's ID, rules and outcome are the suite's and build the verdict: a minted token
    that matches them masks nothing there; the record's text is masked as before."""
    from conformance.common.secrets import SECRETS
    from conformance.plugin.claims import PROPERTY, scrubbed

    token = "test_kc_claims_probe_" + "9e" * 12
    SECRETS.add(token)  # a value no other test writes: the process-wide scrubber only grows
    record = {
        "nodeid": f"server/test_x.py::{token}",
        "requirements": [token],
        "outcome": token,
        "violated": token,
        "message": f"the Core echoed {token}",
    }
    out = scrubbed(PROPERTY, record)
    assert {k: out[k] for k in ("nodeid", "requirements", "outcome", "violated")} == {
        k: record[k] for k in ("nodeid", "requirements", "outcome", "violated")
    }
    assert out["message"] == f"the Core echoed {MASK}"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_a_token_sent_in_utf16_or_utf32_is_masked_as_bytes_as_repr_and_as_json(encoding: str) -> None:
    """JSON may come in UTF-16 or UTF-32: read as bytes or UTF-8, the token stands beside NULs,
    raw, in a ``repr`` (a traceback's arguments) or JSON-escaped (results.json)."""
    scrubber = Scrubber()
    token = "kcTu8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dK"
    scrubber.add(token)
    sent = json.dumps({"message": token}).encode(encoding)
    for seen in (sent.decode("latin-1"), repr(sent), json.dumps(sent.decode("latin-1"))):
        masked = scrubber.text(seen)
        assert MASK in masked and not any(token[i : i + FRAGMENT] in masked.replace("\x00", "") for i in range(33))
    assert (
        scrubber.text("a body of \x00\x00\x00\x00 and \\x00\\x00\\x00\\x00")
        == "a body of \x00\x00\x00\x00 and \\x00\\x00\\x00\\x00"
    )


@pytest.mark.parametrize("spelled", [str.swapcase, lambda t: "".join(f"\\u{ord(c):04X}" for c in t)])
def test_a_token_swapped_in_case_or_escaped_with_upper_case_hex_is_masked(spelled: Any) -> None:
    scrubber = Scrubber()
    token = "kcTu8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dK"
    scrubber.add(token)
    assert scrubber.text(f"echo {spelled(token)}") == f"echo {MASK}"
