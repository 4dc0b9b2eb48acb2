"""The fixture every ``search_knowledge`` area shares: one world for the surface's tests, as
the Core's tests share the plugin's ``world``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.common.config import TargetConfig
from conformance.common.open import Target
from conformance.plugin.options import option
from conformance.search_knowledge.world import SkWorld, sk_world
from conformance.server.world import World


@pytest.fixture(scope="package")
def tool(world: World, kc_config: TargetConfig, kc_target: Target, pytestconfig: pytest.Config) -> Iterator[SkWorld]:
    with sk_world(world, kc_config, kc_target, option(pytestconfig, "--mcp-target")) as made:
        yield made
