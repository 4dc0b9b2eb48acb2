"""The project's defaults for wire details the seeds leave open."""

from __future__ import annotations

import copy
import tomllib
from functools import cache
from typing import Any

from knowledge_schemas._files import SCHEMA_DIR


@cache
def _defaults() -> dict[str, Any]:
    with (SCHEMA_DIR / "wire-defaults.toml").open("rb") as fh:
        return tomllib.load(fh)


def load_wire_defaults() -> dict[str, Any]:
    """A fresh deep copy, safe for the caller to overlay."""
    return copy.deepcopy(_defaults())
