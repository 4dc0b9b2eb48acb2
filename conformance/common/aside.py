"""Work done in a thread of its own for tests that come later (the ``--realtime`` expiry wait,
started when the run starts so the five minutes overlap every other test): its requests are no
running test's evidence and its checks no running test's record, until a test takes its results
and judges them itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


def active() -> bool:
    """Whether this thread's work is set aside."""
    return bool(getattr(_local, "on", False))


@contextmanager
def aside() -> Iterator[None]:
    """For the ``with`` block, this thread's requests and checks are set aside."""
    _local.on = True
    try:
        yield
    finally:
        _local.on = False
