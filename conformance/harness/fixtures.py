"""Fixtures of a client run (``--harness``): the Core, its world, the running harness.

Registered by the plugin only when ``--harness`` is given. A harness that does not start
or breaks the protocol is a harness error of every check (verdict ``error``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conformance.errors import HarnessError
from conformance.harness.session import Session
from conformance.options import option
from conformance.state import STATE


@pytest.fixture(scope="session")
def hc_control(pytestconfig: pytest.Config) -> Iterator[Any]:
    from conformance.harness.core import DEFAULT_CONTROL_TOKEN, Control, ServedSimulator
    from conformance.secrets import SECRETS

    url, token = option(pytestconfig, "--harness-core"), option(pytestconfig, "--harness-control-token")
    served = None
    if url is None:
        served = ServedSimulator()
        url, token = served.url, DEFAULT_CONTROL_TOKEN
    SECRETS.add(token)
    control = Control(url, token or DEFAULT_CONTROL_TOKEN)
    try:
        yield control
    finally:
        try:
            requests = len(control.transcript()) if control.created else 0
        except HarnessError:
            requests = 0  # the Core went away: the checks that needed it already say so
        control.cleanup()
        if served is not None:
            served.close()
        recorder = pytestconfig.stash[STATE].get("recorder")
        if recorder is not None:
            recorder.count = requests


@pytest.fixture(scope="session")
def harness(pytestconfig: pytest.Config, hc_control: Any, kc_config: Any) -> Iterator[Session]:
    from conformance.harness.protocol import Harness
    from conformance.harness.scope import gate
    from conformance.harness.world import build
    from conformance.transport import Recorder
    from knowledge_schemas import load_catalogue

    state = pytestconfig.stash[STATE]
    state["recorder"] = Recorder()
    world = build(hc_control, kc_config.run_id)
    running = Harness(option(pytestconfig, "--harness"), timeout=option(pytestconfig, "--harness-timeout"))
    try:
        info = running.start(world.core_url, list(world.connections.values()))
        client, tool = info["client"], info["harness"]
        who = f"{client['name']} {client['version']} (harness {tool['name']} {tool['version']}"
        who += f", {info['language']})" if info.get("language") else ")"
        surfaces = list(info["surfaces"])
        state["harness"] = {
            "target": f"client {who}",
            "surfaces": [{"surface": s, "label": f"{s} harness", "checked": s in surfaces,
                          "detail": who if s in surfaces else "the harness does not declare this surface"} for s in ("client", "host")],
            "gate": gate(load_catalogue(), surfaces),
        }
        yield Session(running, world, hc_control, surfaces)
    finally:
        running.close()
        world.close()
