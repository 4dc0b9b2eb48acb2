"""The requirement catalogue (requirements.yaml) as typed, immutable records."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from knowledge_schemas._files import SCHEMA_DIR, load_yaml

SEED_FILES = {
    "000": "seeds/000_a0631c4036e27a8d.txt",
    "003": "seeds/003_de8e2aa62e19215f.txt",
    "conventions": "CONVENTIONS.md (vendor conventions)",
}


@dataclass(frozen=True)
class Requirement:
    id: str
    title: str
    level: str
    surface: str
    area: str
    source_file: str
    quote: str
    via: str
    needs: tuple[str, ...]
    interpretation: bool = False

    @property
    def server_observable(self) -> bool:
        """True when a request to a Core shows whether the rule holds."""
        return self.surface == "server" and self.via != "none"

    @property
    def source_label(self) -> str:
        return SEED_FILES[self.source_file]


@dataclass(frozen=True)
class Catalogue:
    requirements: tuple[Requirement, ...]

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.requirements)

    def __len__(self) -> int:
        return len(self.requirements)

    def __getitem__(self, rid: str) -> Requirement:
        for req in self.requirements:
            if req.id == rid:
                return req
        raise KeyError(f"unknown requirement ID {rid!r}")

    def __contains__(self, rid: object) -> bool:
        return any(req.id == rid for req in self.requirements)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(req.id for req in self.requirements)


@cache
def catalogue_version() -> str:
    """A digest of requirements.yaml: two runs with the same value judged against the same rules."""
    import hashlib

    return "sha256:" + hashlib.sha256((SCHEMA_DIR / "requirements.yaml").read_bytes()).hexdigest()[:16]


def raw_catalogue() -> dict[str, object]:
    data = load_yaml("requirements.yaml")
    if not isinstance(data, dict):
        raise ValueError("requirements.yaml must be a mapping with a 'requirements' list")
    return data


@cache
def load_catalogue() -> Catalogue:
    """The live (not retired) requirements, in file order."""
    entries = raw_catalogue()["requirements"]
    assert isinstance(entries, list)
    reqs = tuple(
        Requirement(
            id=e["id"],
            title=e["title"],
            level=e["level"],
            surface=e["surface"],
            area=e["area"],
            source_file=e["source"]["file"],
            quote=e["source"]["quote"],
            via=e["observe"]["via"],
            needs=tuple(e["observe"]["needs"]),
            interpretation=bool(e.get("interpretation", False)),
        )
        for e in entries
        if not e.get("retired", False)
    )
    return Catalogue(reqs)
