"""schemathesis over schemas/openapi.yaml against the target, with its auth and a
started run: no 5xx, and every response matches its documented schema."""

from __future__ import annotations

import datetime
import random
from functools import cache
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from conformance.checks import expect
from conformance.names import response_stem
from knowledge_schemas import load_registry
from knowledge_schemas.openapi import bundle, load_document

R = pytest.mark.requirement
OPERATIONS = [(path, method.upper()) for path, item in load_document()["paths"].items() for method in item]


@cache
def _schema() -> Any:
    import schemathesis

    return schemathesis.openapi.from_dict(bundle())


@R("WIRE-001", "WIRE-002")
@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m} {p.rsplit('/', 2)[-2]}/{p.rsplit('/', 1)[-1]}" for p, m in OPERATIONS])
def test_generated_requests_never_break_the_server(world: Any, pytestconfig: pytest.Config, path: str, method: str, mode: str) -> None:
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import response_schema_conformance

    operation = _schema()[path][method]
    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    strategy = operation.as_strategy(generation_mode=generation, path_parameters={"route": world.route})
    run_id = world.start_run()
    headers = world.core.headers(world.primary.token)
    examples = 100 if pytestconfig.getoption("--deep") else 8
    rng = random.Random(0)

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def check(case: Any) -> None:
        if isinstance(case.body, dict) and "run_id" in case.body and rng.random() < 0.5:
            case.body["run_id"] = run_id
        kwargs = case.as_transport_kwargs(base_url=str(world.core.http.base_url), headers=headers)
        kwargs.pop("cookies", None)
        if isinstance(kwargs.get("data"), (bytes, str)):
            kwargs["content"] = kwargs.pop("data")
        response = world.core.http.request(kwargs.pop("method"), kwargs.pop("url"), **kwargs)
        expect(response.status_code < 500, "WIRE-001", f"{method} {path} answered HTTP {response.status_code}: {response.text[:200]}\n{case.as_curl_command()}")
        if response.status_code >= 400:
            errors = load_registry().errors("error", response.json()) if response.headers.get("content-type", "").startswith("application/json") else ["not JSON"]
            expect(not errors, "WIRE-001", f"HTTP {response.status_code} without the error envelope: {errors[:2]}")
        content = world.cfg.names.canonical_content(response_stem(path, method, response.status_code), response.content)  # schemas use canonical names
        checked = httpx.Response(response.status_code, headers=response.headers, content=content, request=response.request)
        checked.elapsed = datetime.timedelta(0)
        try:
            case.validate_response(checked, checks=[response_schema_conformance])
        except Exception as exc:  # schemathesis raises its own failure types
            raise AssertionError(f"[WIRE-002] {str(exc)[:800]}") from None

    check()

