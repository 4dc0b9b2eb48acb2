"""The suite's fixtures. Registered by the plugin only in sessions that run the suite,
so a project that merely has this package installed never sees ``world`` or ``core``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conformance.plugin.options import option
from conformance.plugin.state import STATE


@pytest.fixture(scope="session")
def kc_config(pytestconfig: pytest.Config) -> Any:
    """The configuration checked before any test ran (see plugin._prepare)."""
    return pytestconfig.stash[STATE]["config"]


@pytest.fixture(scope="session")
def kc_target(kc_config: Any, pytestconfig: pytest.Config) -> Iterator[Any]:
    from conformance.target.open import open_target

    target = open_target(kc_config)
    state = pytestconfig.stash[STATE]
    state["recorder"] = target.recorder
    state["base_url"] = target.base_url
    state["target"] = target.description
    state["control_available"] = target.has_control
    yield target
    target.close()


@pytest.fixture(scope="session")
def core(kc_target: Any, kc_config: Any) -> Any:
    from conformance.server.wire import CoreWire

    CoreWire.namespace = kc_config.namespace
    return CoreWire(kc_target.http, kc_config)


@pytest.fixture(scope="session")
def _provisioner(kc_target: Any, pytestconfig: pytest.Config) -> Iterator[Any]:
    """Control for setting up worlds; at the end it removes every workspace the run created."""
    from conformance.server.wire import ControlWire

    if not kc_target.has_control:
        yield None
        return
    wire = ControlWire(kc_target.http, kc_target.control_url, kc_target.control_token)
    yield wire
    kept = wire.cleanup()
    if kept:
        pytestconfig.stash[STATE].setdefault("kept_workspaces", []).extend(kept)


@pytest.fixture(scope="session")
def control(_provisioner: Any, pytestconfig: pytest.Config) -> Any:
    """Control for tests; None when the target has none or --no-control is given."""
    return None if option(pytestconfig, "--no-control") else _provisioner


@pytest.fixture(scope="session")
def world(kc_config: Any, core: Any, _provisioner: Any, control: Any) -> Any:
    """The shared world: provisioned through control when the target has it (even
    with --no-control, as an operator would set up a test tenant), else configured."""
    from conformance.server.world import provision

    if _provisioner is None and "primary" not in kc_config.identities:
        pytest.skip("not verified: no identities configured and no control extension to mint them")
    built = provision(kc_config, core, _provisioner)
    built.control = control
    return built


@pytest.fixture
def fresh_world(kc_config: Any, core: Any, control: Any) -> Any:
    """An isolated workspace for a test that changes state (mode, scope, revisions)."""
    from conformance.server.world import provision

    if control is None:
        pytest.skip("not verified: needs the test-control extension to provision an isolated workspace")
    return provision(kc_config, core, control, large=False)
