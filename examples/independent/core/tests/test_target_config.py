"""target.toml is a valid conformance target configuration."""
import json
import tomllib

import pytest

from conftest import ROOT, SCHEMAS


def test_target_toml_matches_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    if SCHEMAS is None:
        pytest.skip("no schemas/ folder found")
    config = tomllib.loads((ROOT / "target.toml").read_text())
    schema = json.loads((SCHEMAS / "target-config.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(config)
    assert "{route}" in config["mcp"]["url"]
    assert config["mcp"]["jobs_command"][-1] == "jobs"
