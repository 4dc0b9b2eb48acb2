"""Client and host rules no harness can show: reported not verified, with the reason."""

from __future__ import annotations

import pytest

from conformance.clients.scope import UNSHOWABLE


@pytest.mark.parametrize("rule", [pytest.param(r, marks=pytest.mark.requirement(r), id=r) for r in sorted(UNSHOWABLE)])
def test_not_shown_by_a_harness(rule: str) -> None:
    pytest.skip(UNSHOWABLE[rule])
