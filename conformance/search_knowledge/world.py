"""The world the ``search_knowledge`` checks run in, beside the Core's (conformance.server.world).

A world of its own (through control): a workspace with bases the caller can see, one it may
not see (its scope), one archived; archived and unpublished items; an item that gets a new
revision; multi-byte text for windows; and a corpus where lexical and semantic evidence
disagree. The caller is alice; bob has lost ``knowledge:read``; carol sees every base.

One transport suffices (streamable HTTP when there is one): the tool's behaviour does not
depend on it, and the MCP profile (conformance/suite/mcp) checks the transports themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conformance.common.config import TargetConfig
from conformance.common.control import KnowledgeControl
from conformance.common.open import Target
from conformance.common.outcomes import NotVerified
from conformance.common.rules import Rule, expect
from conformance.mcp.endpoints import agent_endpoints, skipped
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.answers import (
    ARCHIVED_BASE,
    MAIN,
    OTHER,
    Answer,
    Corpus,
    call,
    not_offered,
    open_sessions,
)
from conformance.server.world import World
from knowledge_schemas import load_registry

if TYPE_CHECKING:
    from conformance.mcp.session import McpSession

INVALID, UNAVAILABLE = "knowledge_invalid_request", "knowledge_resource_unavailable"
REQUIRED = frozenset({"knowledge_query_required", "knowledge_item_required"})
STRICT_EXCERPT = 2000  # characters of a result's excerpt under strict (the seed says "bounded excerpt")
_worlds = itertools.count(1)


@dataclass
class SkWorld:
    """The tool as each identity calls it, the corpus behind it, and its control (None: checks that need none)."""

    corpus: Corpus
    control: KnowledgeControl | None
    sessions: dict[str, McpSession]
    strict: bool
    revisions: dict[str, str] = field(default_factory=dict)  # item -> first revision ID

    def ask(self, arguments: dict[str, Any], who: str = "alice") -> Answer:
        session = self.sessions.get(who)
        if session is None:
            raise NotVerified(
                f"not verified: no MCP session acting as {who} (needs control and an MCP target that takes its token)"
            )
        return call(session, arguments)

    def need_control(self) -> KnowledgeControl:
        if self.control is None:
            raise NotVerified("not verified: needs the test-control extension to build the search_knowledge world")
        return self.control

    def search(self, query: str, who: str = "alice", *, refused: Rule = sk.SK_001, **extra: Any) -> Answer:
        """A query search that must succeed; ``refused`` is the rule a refusal breaks (the bound a
        probe sits on, or else SK-001's call shape)."""
        answer = self.ask({"query": query, **extra}, who)
        typed(answer, "knowledge_search", sk.SK_017)
        expect(answer.ok, refused, f"query search {extra} failed: {answer.raw}")
        errors = load_registry().errors("search-knowledge-search-result", answer.body)
        expect(not errors, sk.SK_017, f"the query result is not knowledge_search: {errors[:3]}")
        if self.strict:  # this project's excerpt bound and member name (CHOICES.md)
            for hit in answer.hits():
                excerpt = str(hit.get("excerpt", ""))
                expect(len(excerpt) <= STRICT_EXCERPT, sk.SK_017, f"strict: an excerpt of {len(excerpt)} characters")
                expect("source" in hit, sk.SK_017, f"strict: a result without source: {sorted(hit)}")
        return answer

    def read(self, who: str = "alice", *, refused: Rule = sk.SK_001, **arguments: Any) -> dict[str, Any]:
        """An addressed read that must succeed; ``refused`` is the rule a refusal breaks (the bound a
        probe sits on, or else SK-001's call shape)."""
        answer = self.ask(arguments, who)
        typed(answer, "knowledge", sk.SK_018)
        expect(answer.ok, refused, f"addressed read {arguments} failed: {answer.raw}")
        errors = load_registry().errors("search-knowledge-read-result", answer.body)
        expect(not errors, sk.SK_018, f"the addressed result is not type knowledge: {errors[:3]}")
        assert answer.body is not None
        return answer.body

    def refused(
        self,
        answer: Answer,
        allowed: set[str] | frozenset[str],
        requirement: Rule,
        what: str,
        strict: str | None = None,
    ) -> None:
        """A refusal with one of the ``allowed`` codes (exactly ``strict`` under strict codes)."""
        expect(not answer.ok, requirement, f"{what} was accepted: {answer.raw}")
        expect(
            answer.codes & allowed,
            requirement,
            f"{what}: expected {sorted(allowed)}, got {sorted(answer.codes)}: {answer.raw}",
        )
        if strict and self.strict:
            expect(
                strict in answer.codes, requirement, f"{what}: expected {strict} (strict), got {sorted(answer.codes)}"
            )


def typed(answer: Answer, kind: str, requirement: Rule) -> None:
    """A success (no error, no code) of another ``type`` breaks the result shape, not the call shape."""
    if answer.body is not None and not answer.is_error and not answer.codes:
        expect(
            answer.body.get("type") == kind,
            requirement,
            f"a successful answer has type {answer.body.get('type')!r}, not {kind!r}",
        )


def _no_agent_path(chosen: str | None) -> NotVerified:
    return NotVerified(
        "not verified: MCP checks skipped: --mcp-target none"
        if skipped(chosen)
        else "not verified: no Agent Session MCP server (--mcp-target or [mcp])"
    )


@contextmanager
def sk_world(world: World, cfg: TargetConfig, target: Target, chosen: str | None) -> Iterator[SkWorld]:
    """Provision the tool's world on a route of its own (through control, where there is control)
    and open a session per identity; without an Agent Session MCP server, nothing here can be verified."""
    if not agent_endpoints(cfg, target, chosen, str(world.primary.token), world.primary.route):
        raise _no_agent_path(chosen)  # before anything is provisioned
    corpus, control = Corpus(), None
    who: dict[str, tuple[str, str]] = {"alice": (str(world.primary.token), world.primary.route)}
    revisions: dict[str, str] = {}
    if world.control is not None:
        route = f"kc-{target.settings.namespace}-sk-{next(_worlds)}"
        world.control.create_workspace(route)
        revisions = world.control.replace_corpus(route, corpus.build())
        control = world.control.knowledge(route)
        world.control.set_scope(route, "alice", [MAIN, OTHER, ARCHIVED_BASE])
        control.item_state("sk-archived", active=False)
        control.item_state("sk-unpublished", published=False)
        control.base_state(ARCHIVED_BASE, False)
        control.scopes("bob", [])
        who = {
            name: (m["token"], m["route"])
            for name in ("alice", "bob", "carol")
            for m in [world.control.mint(name, route)]
        }
    with ExitStack() as stack:
        sessions, fixed = open_sessions(stack, cfg, target, chosen, who)
        if fixed:
            control = None  # the one session is not the world's caller: only checks without the world can run
        if "alice" not in sessions:
            raise _no_agent_path(chosen)
        probe = call(sessions["alice"], {"query": "knowledge"}, judge=False)  # offered at all: judged by the tests
        if not_offered(probe):
            raise NotVerified(f"not verified: the MCP server does not offer search_knowledge ({probe.raw[:120]})")
        yield SkWorld(corpus, control, sessions, cfg.strict_codes, revisions)
