"""Where the contract files are, whether installed or in a checkout.

The contract's data lives in the checkout's ``schemas/`` folder, the single source of
truth of every wire message; this package holds only the code that reads it. A wheel
ships that folder inside the package as ``knowledge_schemas/schemas/`` (the
``knowledge_schemas.schemas`` data package of ``pyproject.toml``'s ``package-dir``); in a
checkout (an editable install, or the source tree on ``sys.path``) it is the
``schemas/`` folder beside this package.
"""

from pathlib import Path
from typing import Any

import yaml

_PACKAGE = Path(__file__).resolve().parent


def _schema_dir() -> Path:
    shipped = _PACKAGE / "schemas"
    return shipped if shipped.is_dir() else _PACKAGE.parent / "schemas"


SCHEMA_DIR = _schema_dir()
BASE_URI = "https://knowledge-conformance.example/schemas/"


def schema_names() -> list[str]:
    """Names of every wire-message schema file, sorted."""
    return sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json"))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(name: str) -> Any:
    """A contract file of ``SCHEMA_DIR`` parsed as YAML: with libyaml when PyYAML has it (ten
    times faster than pure Python, and every suite process reads the catalogue and both OpenAPI
    documents), with the same safe loader's results either way."""
    return yaml.load((SCHEMA_DIR / name).read_text("utf-8"), Loader=_LOADER)
