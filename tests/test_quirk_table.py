"""Self-checks of the quirk table (quirk-outcomes.yaml) and of the miniatures:
the table agrees with the catalogue, every quirk is one separate miniature, and
the clean Core and app hold no trace of any quirk."""

from __future__ import annotations

import inspect

import pytest

import simulator.app
import simulator.core
import simulator.http
import simulator.search_knowledge.ranking
import simulator.search_knowledge.routes
import simulator.search_knowledge.store
import simulator.search_knowledge.tool
import simulator.signing
from knowledge_schemas import load_catalogue, load_registry, load_yaml
from simulator import create_app
from simulator.core import Core
from simulator.miniatures import MINIATURES, Wrapper, compose
from simulator.miniatures.mcp import MINIATURES as MCP_MINIATURES
from simulator.miniatures.mcp import agent_class, job_class
from simulator.miniatures.search_knowledge import MINIATURES as SK_MINIATURES
from simulator.miniatures.search_knowledge import sk_class
from simulator.quirks import OUTCOMES_FILE, QUIRKS, load_quirks
from simulator.search_knowledge.tool import SearchKnowledge


def _raw() -> dict[str, object]:
    data = load_yaml(OUTCOMES_FILE)
    assert isinstance(data, dict)
    return data


def test_table_matches_its_schema() -> None:
    assert load_registry().errors("quirk-outcomes", _raw()) == []


def test_a_bad_table_is_refused() -> None:
    entry = {
        "name": "search_fourth_hint",
        "description": "Search returns four hints.",
        "violates": ["SRCH-003"],
        "exit": 1,
    }
    with pytest.raises(ValueError, match="listed twice"):
        load_quirks({"quirks": [entry, entry]})
    with pytest.raises(ValueError, match="exit"):
        load_quirks({"quirks": [{**entry, "exit": 6}]})


def test_every_quirk_has_a_miniature_and_every_miniature_a_quirk() -> None:
    assert sorted(QUIRKS) == sorted(MINIATURES)


SHOWN_ON_MCP = {"MCP-007"}  # a host rule the MCP suite also shows on the Core's MCP path (ARCHITECTURE.md)


def test_expected_failures_are_server_observable_requirements() -> None:
    catalogue = load_catalogue()
    unknown = [(q.name, rid) for q in QUIRKS.values() for rid in q.violates if rid not in catalogue]
    assert unknown == []
    # An MCP miniature breaks a rule of the MCP surface, which the suite's MCP profile observes; a
    # search_knowledge miniature a rule of the tool, which its profile observes through the MCP path
    # (the tool's listing and callability through the MCP session itself).
    unobservable = [
        (q.name, rid)
        for q in QUIRKS.values()
        for rid in q.violates
        if not (
            catalogue[rid].server_observable
            or (catalogue[rid].surface, catalogue[rid].via) in {("mcp", "mcp"), ("tool", "tool"), ("tool", "mcp")}
            or rid in SHOWN_ON_MCP
        )
    ]
    assert unobservable == []


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_expected_exit_follows_the_levels_of_the_violated_requirements(name: str) -> None:
    """1 (non-conformant) when a MUST is broken; 0 with a SHOULD warning when only SHOULDs are."""
    quirk = QUIRKS[name]
    levels = {load_catalogue()[rid].level for rid in quirk.violates}
    assert quirk.exit == (1 if "MUST" in levels else 0), f"{name} breaks {sorted(levels)}"


def test_strict_only_quirks_break_interpretations_only() -> None:
    """A deviation the seeds allow can only be caught by one of the project's own choices."""
    catalogue = load_catalogue()
    strict = [q for q in QUIRKS.values() if q.strict_only]
    assert strict, "the table marks no quirk strict_only"
    assert [(q.name, rid) for q in strict for rid in q.violates if not catalogue[rid].interpretation] == []


def test_known_suite_gaps_are_some_of_the_violated_ids() -> None:
    """A recorded gap names an ID the quirk violates, and the suite must still catch at least one other."""
    wrong = [q.name for q in QUIRKS.values() if q.suite_misses and not set(q.suite_misses) < set(q.violates)]
    assert wrong == []


def test_the_clean_app_has_no_miniature() -> None:
    assert compose([]) == (Core, [])
    assert type(create_app(demo=False).state.core) is Core


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_each_quirk_composes_its_own_miniature_only(name: str) -> None:
    core_class, wrappers = compose([name])
    miniature = MINIATURES[name]
    if name in SK_MINIATURES:  # the search_knowledge tool, composed by sk_class: the Core and app stay clean
        assert (core_class, wrappers) == (Core, [])
        assert issubclass(sk_class([name]), miniature) and sk_class([]) is SearchKnowledge
        assert isinstance(create_app(quirks=[name], demo=False).state.search_knowledge, miniature)
        return
    if name in MCP_MINIATURES:  # MCP tools, composed by agent_class / job_class: the Core and app stay clean
        assert (core_class, wrappers) == (Core, [])
        assert issubclass(agent_class([name]), miniature) or issubclass(job_class([name]), miniature)
        return
    if issubclass(miniature, Wrapper):
        assert (core_class, wrappers) == (Core, [miniature])
    else:
        assert wrappers == [] and issubclass(core_class, miniature) and miniature is not Core
    assert type(create_app(quirks=[name], demo=False).state.core) is core_class


def test_all_quirks_compose_together() -> None:
    core_class, wrappers = compose(QUIRKS)
    assert len([m for m in MINIATURES.values() if issubclass(m, Wrapper)]) == len(wrappers)
    assert all(issubclass(core_class, m) for m in MINIATURES.values() if issubclass(m, Core))


@pytest.mark.parametrize(
    "module",
    [
        simulator.core,
        simulator.app,
        simulator.http,
        simulator.signing,
        simulator.search_knowledge.tool,
        simulator.search_knowledge.store,
        simulator.search_knowledge.ranking,
        simulator.search_knowledge.routes,
    ],
    ids=lambda m: m.__name__,
)
def test_the_reference_core_names_no_quirk(module: object) -> None:
    source = inspect.getsource(module)  # type: ignore[arg-type]
    assert [name for name in QUIRKS if name in source] == []
    assert ".q(" not in source and not hasattr(Core, "q")


def _named_by_checks() -> set[str]:
    """Every requirement ID a check of the suite names (all surfaces, client checks included)."""
    import importlib
    import pkgutil

    import conformance.suite

    found: set[str] = set()
    for info in pkgutil.walk_packages(conformance.suite.__path__, "conformance.suite."):
        if info.ispkg:
            continue
        for obj in vars(importlib.import_module(info.name)).values():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == "requirement":
                    found.update(mark.args)
                if mark.name == "parametrize":
                    for case in mark.args[1]:
                        for inner in getattr(case, "marks", ()):
                            if inner.name == "requirement":
                                found.update(inner.args)
    return found


def test_every_checked_must_and_should_has_a_broken_variant_that_fails_it() -> None:
    """Negative proof: a rule the suite checks is failed by at least one quirk of the simulator or
    one broken client (its known gaps, ``suite_misses``, do not count). The client rules no harness
    can show are only ever reported not verified, so they need none."""
    from conformance.clients.scope import UNSHOWABLE

    caught = {rid for m in load_yaml("client-miniatures.yaml")["miniatures"] for rid in m["violates"]}
    for quirk in QUIRKS.values():
        caught |= set(quirk.violates) - set(quirk.suite_misses)
    levels = {r.id: r.level for r in load_catalogue()}
    checked = _named_by_checks() - set(UNSHOWABLE)
    assert len(checked) > 100, "the scan found the checks of every surface"
    unproven = sorted(rid for rid in checked if levels[rid] in ("MUST", "SHOULD") and rid not in caught)
    assert unproven == []
