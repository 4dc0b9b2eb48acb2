"""The fixture every client (SDK) area shares: the harness, once it said it wraps a client."""

from __future__ import annotations

import pytest

from conformance.clients.session import Session


@pytest.fixture
def sdk(harness: Session) -> Session:
    harness.needs("client")
    return harness
