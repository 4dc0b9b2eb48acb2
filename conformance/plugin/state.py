"""Keys under which the plugin keeps a session's state on the pytest config and items."""

from __future__ import annotations

from typing import Any

import pytest

STATE = pytest.StashKey[dict[str, Any]]()
EXERCISED = pytest.StashKey[set[str]]()
MARKER = "requirement"
