"""References and cursors are bound to their Hub, Agent Session, route, run and account.

A matrix, not hand-picked cases: for each binding dimension, each of a reference and
a cursor, and each way the presented context can differ, exactly one dimension differs
from the victim's own valid context. Presenting the victim's own run matters: with the
stranger's run, a Core that checks only the run would already refuse, and a Core that
never checks the session, route or account would pass.

A refusal may come from the reference check (a ``knowledge_reference_*`` error) or
from the run check (the run is not the caller's: ``run_not_found``); both keep the
reference bound. Under strict codes only the configured mismatch and run-not-found
codes pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.common import contract as C
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import World

R = pytest.mark.requirement

# dimension -> (the identity that differs from the victim in that dimension only, the rule)
DIMENSIONS = {
    "hub": ("other_hub", server.REF_003),
    "session": ("other_session", server.REF_004),
    "route": ("other_route", server.REF_005),
    "account": ("other_account", server.REF_009),
}
PRESENTED_RUN = ("victims_run", "strangers_run")


def _cases() -> list[Any]:
    cases = [
        pytest.param(dim, what, run, marks=R(rule), id=f"{dim}-{what}-{run}")
        for dim, (_, rule) in DIMENSIONS.items()
        for what in ("ref", "cursor")
        for run in PRESENTED_RUN
    ]
    cases += [
        pytest.param("run", what, "victims_other_run", marks=R(server.REF_006), id=f"run-{what}")
        for what in ("ref", "cursor")
    ]
    return cases


@R(server.REF_011, server.REF_012, server.REF_014)
@pytest.mark.parametrize(("dimension", "what", "presented"), _cases())
def test_one_differing_binding_is_refused(world: World, dimension: str, what: str, presented: str) -> None:
    doc = world.docs.get("unicode")  # long enough for a cursor at the smallest page size
    run_id = world.start_run()
    ref = world.ref_for(run_id, doc)
    page = world.page(ref, run_id, C.READ_MIN_MAX_BYTES)
    if what == "cursor" and page["next_cursor"] is None:
        pytest.skip("not verified: the document found fits one page, so there is no cursor to present")
    if dimension == "run":
        stranger, run = world.primary, world.start_run()
    else:
        stranger = world.isolated(DIMENSIONS[dimension][0], dimension)
        run = run_id if presented == "victims_run" else world.start_run(stranger)
    extra = {"cursor": page["next_cursor"]} if what == "cursor" else {}
    response = world.read(ref, run, who=stranger, max_bytes=C.READ_MIN_MAX_BYTES, **extra)
    rule = DIMENSIONS[dimension][1] if dimension in DIMENSIONS else server.REF_006
    checks.binding_refused(world, response, rule, what, known=[page["content"]])
