"""Open member names: the target configuration's [wire.names.*], the suite's way back to
the canonical names for schema validation, and the simulator's renaming step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from conformance.common import contract as C
from conformance.common.config import ConfigError, load_config
from conformance.common.names import WireNames
from conformance.common.outcomes import ContractViolation
from conformance.common.transport import InProcessTransport
from conformance.server import checks
from simulator import create_app
from simulator.cli import main as sim_main
from simulator.wire_names import load_wire_names

CAPS: dict[str, Any] = {
    "schema_version": "bailing.agent-knowledge-capabilities.v1",
    "knowledge_schema_version": "bailing.agent-knowledge.v1",
    "route": "acme",
    "enabled": True,
    "delivery_modes": ["inline", "on_demand"],
    "limits": dict(C.LIMITS),
}


def _config(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "target.toml"
    path.write_text(text, "utf-8")
    return load_config(str(path))


def test_names_default_to_the_canonical_ones(tmp_path: Path) -> None:
    names = _config(tmp_path, "").names
    assert (
        names.is_default
        and names.capabilities["limits"] == "limits"
        and names.turn_context["knowledge_refs"] == "knowledge_refs"
    )


def test_a_configuration_overrides_single_names_and_keeps_the_rest(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[wire.names.limits]\nsearch_max_hints = "maxHints"\n[wire]\ncodes = {strict = true}\n')
    assert cfg.names.limits["search_max_hints"] == "maxHints"
    assert cfg.names.limits["search_max_bytes"] == "search_max_bytes" and cfg.names.capabilities["route"] == "route"
    assert cfg.strict_codes and cfg.code("reference_expired") == "knowledge_reference_expired"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[wire.names.capabilities]\ncolour = "x"\n', "unknown key(s) ['colour'] in [names.capabilities]"),
        ('[wire.names.hints]\ntitle = "x"\n', "unknown key(s) ['hints'] in [names]"),
        ('[wire]\nnames = "x"\n', "wire.names: expected a table, got a string"),
        ('[wire.names.limits]\nsearch_max_hints = "same"\nsearch_max_bytes = "same"\n', "the same name 'same'"),
        ('[wire.names.turn_context]\nknowledge = ""\n', "wire.names.turn_context.knowledge: must not be empty"),
        (
            "[wire.names.turn_context]\nknowledge = 3\n",
            "wire.names.turn_context.knowledge: expected a string, got a number",
        ),
    ],
)
def test_bad_names_are_configuration_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, text)
    assert message in str(info.value)


def test_mapping_back_restores_canonical_names_even_when_names_swap() -> None:
    names = WireNames(
        {
            "capabilities": {
                "schema_version": "knowledge_schema_version",
                "knowledge_schema_version": "schema_version",
                "limits": "bounds",
            },
            "limits": {"search_max_hints": "maxHints"},
        }
    )
    served = {
        "knowledge_schema_version": CAPS["schema_version"],
        "schema_version": CAPS["knowledge_schema_version"],
        **{k: v for k, v in CAPS.items() if k not in ("schema_version", "knowledge_schema_version", "limits")},
        "bounds": {"maxHints": 3, **{k: v for k, v in CAPS["limits"].items() if k != "search_max_hints"}},
    }
    assert names.to_canonical("capabilities-response", served) == CAPS
    checks.schema("capabilities-response", served, names=names)
    with pytest.raises(ContractViolation) as info:
        checks.schema("capabilities-response", served)
    assert info.value.requirement == "WIRE-002"


def test_a_canonical_name_the_wire_calls_otherwise_cannot_stand_in_for_it() -> None:
    """A Core configured to say ``workspace`` but sending ``route`` does not match the configured wire."""
    names = WireNames({"capabilities": {"route": "workspace"}})
    with pytest.raises(ContractViolation):
        checks.schema("capabilities-response", CAPS, names=names)
    assert "route" not in names.to_canonical("capabilities-response", CAPS)


def test_turn_context_members_map_back_and_other_bodies_are_untouched() -> None:
    names = WireNames({"turn_context": {"knowledge": "items", "knowledge_delivery": "delivery"}})
    turn = {
        "schema_version": "bailing.agent-turn-context.v1",
        "run_id": "r",
        "context": {"items": [], "knowledge_refs": [], "delivery": {}},
    }
    assert names.to_canonical("turn-response", turn)["context"] == {
        "knowledge": [],
        "knowledge_refs": [],
        "knowledge_delivery": {},
    }
    page = {"ref": "items", "content": "x"}
    assert names.to_canonical("read-response", page) is page


# ---------------------------------------------------------------- simulator
def _get(options: dict[str, Any], fn: Any) -> Any:
    app = create_app(seed=0, **options)
    ident = app.state.core.store.identities("demo")[0]
    with httpx.Client(transport=InProcessTransport(app), base_url="http://sim") as http:
        return fn(http, {"Authorization": f"Bearer {ident.token}"})


def _caps_and_turns(http: httpx.Client, auth: dict[str, str]) -> tuple[bytes, bytes, bytes]:
    caps = http.get("/agent-api/v1/workspaces/demo/knowledge/capabilities", headers=auth)
    turn = {
        "client_conversation_id": "c",
        "client_turn_id": "t",
        "user_message_id": "m",
        "user_input": "homepage binding",
        "knowledge_delivery": "on_demand",
    }
    first = http.post("/agent-api/v1/workspaces/demo/turns", json=turn, headers=auth)
    again = http.post("/agent-api/v1/workspaces/demo/turns", json=turn, headers=auth)
    assert caps.status_code == first.status_code == again.status_code == 200
    return caps.content, first.content, again.content


def test_simulator_serves_the_configured_names_and_the_canonical_ones_by_default() -> None:
    renamed = {
        "capabilities": {"limits": "bounds", "route": "workspace"},
        "limits": {"search_max_hints": "maxHints"},
        "turn_context": {"knowledge_delivery": "delivery", "knowledge_refs": "refs"},
    }
    caps, turn, replay = (json.loads(b) for b in _get({"wire_names": renamed}, _caps_and_turns))
    assert (
        caps["workspace"] == "demo" and "route" not in caps and caps["bounds"]["maxHints"] == 3 and "limits" not in caps
    )
    assert set(turn["context"]) == {"knowledge", "refs", "delivery", "governance"}
    assert replay == turn  # a replay serves the same frozen context under the same names
    names = WireNames(renamed)
    checks.schema("capabilities-response", caps, names=names)
    checks.schema("turn-response", turn, names=names)
    default_caps, default_turn, _ = (json.loads(b) for b in _get({}, _caps_and_turns))
    assert {"route", "limits"} <= set(default_caps) and {"knowledge", "knowledge_refs", "knowledge_delivery"} <= set(
        default_turn["context"]
    )


def test_simulator_refuses_unknown_or_clashing_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown key"):
        create_app(wire_names={"limits": {"max_hints": "x"}})
    with pytest.raises(ValueError, match="distinct"):
        create_app(wire_names={"capabilities": {"route": "enabled"}})
    good = tmp_path / "names.toml"
    good.write_text('[names.turn_context]\nknowledge = "items"\n', "utf-8")
    assert load_wire_names(str(good)) == {"turn_context": {"knowledge": "items"}}
    bad = tmp_path / "bad.toml"
    bad.write_text('[wire.names.turn_context]\nknowledge = "items"\n', "utf-8")
    assert sim_main(["serve", "--wire-names", str(bad)]) == 2
