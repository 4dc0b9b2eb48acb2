"""Where the contract files are, whether installed or in a checkout."""

from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent
BASE_URI = "https://knowledge-conformance.example/schemas/"


def schema_names() -> list[str]:
    """Names of every wire-message schema file, sorted."""
    return sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json"))
