"""Keys under which the plugin keeps a session's state on the pytest config and items."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.target.rules import Ledger

STATE = pytest.StashKey[dict[str, Any]]()
LEDGER = pytest.StashKey[Ledger]()  # the rules whose checks passed in a test's call phase
MARKER = "requirement"
