"""Recorded transcripts for the transcript checker (conformance.server.transcript).

``record_refresh_scenario`` drives a short, fixed sequence against the in-process
simulator (clean, or with quirks) through a ``Checker`` and returns what it
recorded, whether or not the target deviated: a reference is read at 0, 200, 300
and 301 seconds, and presented once by another Agent Session. A Core whose reads
restart a reference's 300 seconds serves the read at 301 seconds.

``python -m tests.transcripts DIR`` writes the two recordings kept beside the
tests (clean, and against ``read_refreshes_expiry``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conformance.common.config import TargetConfig, load_config
from conformance.common.control import Control
from conformance.common.open import open_target
from conformance.common.outcomes import ContractViolation
from conformance.common.settings import RunSettings
from conformance.server.stateful import world_of
from conformance.server.transcript import Checker
from conformance.server.wire import CoreWire
from conformance.server.world import World, provision

FIXTURES = Path(__file__).parent / "fixtures"
QUIRKY = FIXTURES / "transcript-read-refreshes-expiry.json"
CLEAN = FIXTURES / "transcript-clean.json"


@contextmanager
def simulator(*quirks: str) -> Iterator[tuple[TargetConfig, World]]:
    """A provisioned world on the in-process simulator with ``quirks``."""
    cfg = load_config(None, target="sim")
    target = open_target(cfg, RunSettings(sim_quirks=quirks))
    try:
        assert target.control_url is not None and target.control_token is not None
        control = Control(target.http, target.control_url, str(target.control_token))
        yield cfg, provision(cfg, CoreWire(target.http, cfg, target.settings.namespace), control, large=False)
    finally:
        target.close()


def record_refresh_scenario(*quirks: str) -> dict[str, Any]:
    with simulator(*quirks) as (cfg, world):
        checker = Checker(world_of(world), cfg)
        assert world.control is not None
        control = world.control

        def step(event: dict[str, Any], response: Any) -> Any:
            try:
                return checker.exchange(event, response)
            except ContractViolation:
                return None  # keep recording: the transcript is what the replay judges

        def advance(seconds: float) -> None:
            control.advance(seconds)
            checker.control({"op": "advance", "seconds": seconds})

        primary, other = world.primary, world.others["other_session"]
        body = world.core.turn_body("binding", "on_demand")
        run = step(
            {"op": "start_run", "who": "primary", "key": body["client_turn_id"], "delivery": "on_demand"},
            world.core.turn(primary.token, primary.route, body),
        )
        hints = step({"op": "search", "who": "primary", "run": run, "query": "alphadoc"}, world.search("alphadoc", run))
        ref = None
        for hint in hints:
            outcome = step(
                {
                    "op": "read",
                    "who": "primary",
                    "run": run,
                    "ref": hint["ref"],
                    "cursor": None,
                    "max_bytes": None,
                    "identify": True,
                },
                world.read(hint["ref"], run),
            )
            if outcome is not None and outcome.doc == "alpha":
                ref = hint["ref"]
                break
        assert ref is not None, "the scenario needs the simulator to find the alpha document"

        def read(who: str = "primary") -> None:
            person = primary if who == "primary" else other
            step(
                {"op": "read", "who": who, "run": run, "ref": ref, "cursor": None, "max_bytes": None},
                world.read(ref, run, person),
            )

        read("other_session")
        for seconds in (200.0, 100.0, 1.0):
            advance(seconds)
            read()
        return checker.transcript()


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    for path, quirks in ((out / CLEAN.name, ()), (out / QUIRKY.name, ("read_refreshes_expiry",))):
        path.write_text(json.dumps(record_refresh_scenario(*quirks), ensure_ascii=False, indent=1) + "\n", "utf-8")
        print(path)
