"""schemathesis over schemas/openapi.yaml against the target, with its auth and a
started run: no 5xx, every error is the error envelope, and every response matches
its documented schema. The request schemas are this project's choices (CHOICES.md),
so only a strict run demands that a request schemathesis marks negative is refused.
Requests go to the target's configured ``[paths]``; the operations are named by their
openapi.yaml paths (the test IDs and the documented response schemas stay the same)."""

from __future__ import annotations

import datetime
from functools import cache
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conformance.common.names import response_stem
from conformance.common.outcomes import ContractViolation
from conformance.common.rules import expect
from conformance.common.secrets import clip
from conformance.plugin.options import option
from conformance.server import checks
from conformance.server import rules as server
from conformance.server.world import World
from knowledge_schemas import load_wire_defaults
from knowledge_schemas.openapi import bundle, load_document

R = pytest.mark.requirement
OPERATIONS = [(path, method.upper()) for path, item in load_document()["paths"].items() for method in item]


def _served(path: str, wire: dict[str, Any]) -> str:
    """Where the target serves the openapi.yaml operation at ``path``: the configured ``[paths]``
    entry whose default ``path`` is (openapi.yaml spells the default paths)."""
    for name, default in load_wire_defaults()["paths"].items():
        if default == path:
            return str(wire["paths"][name])
    return path


@cache
def _schema(served: tuple[tuple[str, str], ...]) -> Any:
    """The bundled openapi.yaml with each operation moved to where the target serves it."""
    document = bundle()
    document["paths"] = {dict(served).get(path, path): item for path, item in document["paths"].items()}

    # An explicit configuration: none is discovered from the working directory, and a
    # negative case counts as refused only with a 4xx (never a 5xx, which is WIRE-001 anyway).
    config = schemathesis.Config.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": ["4xx"]}}})
    return schemathesis.openapi.from_dict(document, config=config)


@pytest.fixture(scope="module", autouse=True)
def _warm_up() -> None:
    """Every module schemathesis imports lazily, imported in the module's setup, and each strategy
    built once, so that no test pays for the first; not at collection, so that a worker whose
    share holds none of these tests never pays it (some 0.13 s). (It was once thought to keep
    CPython 3.11's "AST constructor recursion depth mismatch" away, as if a deep stack raised it;
    a collection inside ``ast.parse`` does, whatever the depth, and conformance.plugin.ast_guard
    prevents it.)"""
    import schemathesis.specs.openapi.checks  # noqa: F401
    from schemathesis.generation import GenerationMode

    for path, method in OPERATIONS:
        operation = _schema(tuple((p, p) for p, _ in OPERATIONS))[path][method]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            operation.as_strategy(generation_mode=mode, path_parameters={"route": "warm-up"})


def _bind_run(case: Any, run_id: str, negative: bool) -> None:
    """Give the case the started run, so the Core validates past the run lookup; never when that
    would make a negative case valid (schemathesis revalidates the edited body when ``meta`` is read)."""
    original = case.body["run_id"]
    case.body["run_id"] = run_id
    if negative and case.meta is not None and not case.meta.generation.mode.is_negative:
        case.body["run_id"] = original


@R(server.WIRE_001, server.WIRE_002)
@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize(
    ("path", "method"), OPERATIONS, ids=[f"{m} {p.rsplit('/', 2)[-2]}/{p.rsplit('/', 1)[-1]}" for p, m in OPERATIONS]
)
def test_generated_requests_never_break_the_server(
    world: World, pytestconfig: pytest.Config, path: str, method: str, mode: str
) -> None:
    from schemathesis.errors import FailureGroup
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import negative_data_rejection, response_schema_conformance

    served = tuple((p, _served(p, world.cfg.wire)) for p, _ in OPERATIONS)
    operation = _schema(served)[dict(served)[path]][method]
    negative = mode == "negative"
    generation = GenerationMode.NEGATIVE if negative else GenerationMode.POSITIVE
    strategy = operation.as_strategy(generation_mode=generation, path_parameters={"route": world.route})
    run_id = world.start_run()
    headers = world.core.headers(world.primary.token)
    examples = 100 if option(pytestconfig, "--deep") else 8
    strict = world.cfg.strict_codes
    base_url = str(world.core.http.base_url)
    wanted = [response_schema_conformance, *([negative_data_rejection] if negative and strict else [])]

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=tuple(p for p in Phase if p is not Phase.shrink or not option(pytestconfig, "--no-shrink")),
    )
    @given(case=strategy, bind=st.booleans())  # drawn by Hypothesis, so a failing case replays (and shrinks) exactly
    def check(case: Any, bind: bool) -> None:
        # The run's credential replaces whatever the case holds (a negative case may leave it out):
        # set on the case, so that schemathesis judges the request as sent, never one it only generated.
        case.headers = {**(case.headers or {}), **headers}
        # A negative case always gets the started run (unless that makes it valid): refused for an
        # unknown run, it would prove nothing about how the Core treats the part that violates the schema.
        if (bind or negative) and isinstance(case.body, dict) and "run_id" in case.body:
            _bind_run(case, run_id, negative)
        kwargs = case.as_transport_kwargs(base_url=base_url)
        kwargs.pop("cookies", None)
        if isinstance(kwargs.get("data"), (bytes, str)):
            kwargs["content"] = kwargs.pop("data")
        response = world.core.http.request(kwargs.pop("method"), kwargs.pop("url"), **kwargs)
        expect(
            response.status_code < 500,
            server.WIRE_001,
            lambda: (
                f"{method} {path} answered HTTP {response.status_code}: {clip(response.text, 200)}\n{case.as_curl_command(base_url=base_url)}"
            ),
        )
        if response.status_code >= 400:
            checks.error_envelope(response, server.WIRE_001, strict=strict)
        content = world.cfg.names.canonical_content(
            response_stem(path, method, response.status_code), response.content
        )  # schemas use canonical names
        checked = httpx.Response(
            response.status_code, headers=response.headers, content=content, request=response.request
        )
        checked.elapsed = datetime.timedelta(0)
        try:
            case.validate_response(checked, checks=wanted)
        except FailureGroup as group:  # a BaseExceptionGroup: `except Exception` would miss it
            accepted = [f for f in group.exceptions if "negative_data_rejection" in type(f).checks]
            if accepted:
                raise ContractViolation(
                    server.WIRE_001,
                    f"strict: a request schemathesis generated to violate the request schema was "
                    f"accepted with HTTP {response.status_code}: {clip(str(accepted[0]), 600)}\n{case.as_curl_command(base_url=base_url)}",
                ) from None
            raise ContractViolation(server.WIRE_002, f"{method} {path}: {clip(str(group), 800)}") from None
        server.WIRE_002.held()  # schemathesis' response_schema_conformance found the response as documented

    check()
