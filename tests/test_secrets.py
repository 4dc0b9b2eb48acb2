"""The scrubber's quick check (one search for any head, tail or short value) never lets a text
through that the full masking would have changed, whatever cut of a secret it carries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.target.secrets import MASK, Scrubber, _mask

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


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(SECRET, min_size=1, max_size=5))
def test_the_quick_check_never_skips_a_text_the_full_mask_changes(data: st.DataObject, secrets: list[str]) -> None:
    scrubber = Scrubber()
    for secret in secrets:
        scrubber.add(secret)
    text = data.draw(texts_with_cuts(secrets))
    full = _mask(text, sorted(scrubber.values, key=len, reverse=True))
    assert scrubber.text(text) == full


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
    from conformance.target import secrets as module

    scrubber = Scrubber()
    for secret in secrets:
        scrubber.add(secret)
    text = data.draw(texts_with_cuts(secrets)) * data.draw(st.integers(1, 4))
    whole = scrubber.text(text)
    saved, module.SECRETS = module.SECRETS, scrubber
    try:
        assert module.clip(text, limit) == (whole[limit:] if limit < 0 else whole[:limit])
    finally:
        module.SECRETS = saved
