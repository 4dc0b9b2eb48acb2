"""Named, deliberate deviations from the contract, chosen at start.

The list is data (``quirk-outcomes.yaml`` beside the schemas): each quirk's
description, the requirement IDs it violates and the exit code a whole-suite
run against it must end with. Each is implemented as a miniature around the
clean Core (``simulator.miniatures``); the project's tests run the suite
against every one and check that it reports exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from knowledge_schemas import load_registry, load_yaml

OUTCOMES_FILE = "quirk-outcomes.yaml"


@dataclass(frozen=True)
class Quirk:
    name: str
    violates: tuple[str, ...]
    description: str
    exit: int  # of a whole-suite run: 1 when a violated ID is a MUST, 0 (a SHOULD warning) otherwise
    strict_only: bool = False  # the seeds allow it: caught only with [wire] codes.strict = true
    suite_misses: dict[str, str] = field(default_factory=dict)  # known gaps of the suite: ID -> what it would need
    caught_by: str = "suite"  # "load": only concurrency shows it; the sequential suite passes it, a load run fails it
    clock_tick: float | None = None  # the bundled clock's tick its run needs (--sim-clock-tick); None: the default


def load_quirks(data: object) -> dict[str, Quirk]:
    """The quirks of a parsed outcomes document, by name; a ValueError says what is wrong with it."""
    errors = load_registry().errors("quirk-outcomes", data)
    if errors:
        raise ValueError(f"{OUTCOMES_FILE}: {'; '.join(errors[:3])}")
    assert isinstance(data, dict)
    quirks: dict[str, Quirk] = {}
    for entry in data["quirks"]:
        if entry["name"] in quirks:
            raise ValueError(f"{OUTCOMES_FILE}: quirk {entry['name']!r} is listed twice")
        quirks[entry["name"]] = Quirk(
            entry["name"],
            tuple(entry["violates"]),
            entry["description"],
            entry["exit"],
            entry.get("strict_only", False),
            dict(entry.get("suite_misses", {})),
            entry.get("caught_by", "suite"),
            entry.get("clock_tick"),
        )
    return quirks


QUIRKS: dict[str, Quirk] = load_quirks(load_yaml(OUTCOMES_FILE))


def quirk_names() -> frozenset[str]:
    """Every quirk's name. The suite reaches it through the ``sim.quirks`` entry point of the
    ``knowledge_conformance.targets`` group (it never imports the simulator), to refuse an
    unknown ``--sim-quirk`` before any test runs."""
    return frozenset(QUIRKS)


def parse_quirks(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Validate quirk names, with the known list in the error."""
    unknown = sorted(set(names) - QUIRKS.keys())
    if unknown:
        raise ValueError(f"unknown quirk(s) {', '.join(unknown)}; known: {', '.join(sorted(QUIRKS))}")
    return frozenset(names)
