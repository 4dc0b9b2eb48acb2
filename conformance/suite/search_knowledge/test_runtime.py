"""search_knowledge as a runtime feature: switched off it says knowledge_unavailable, it writes
no audit event, it is callable whether listed or not, and it stays out of the minimal tool list."""

from __future__ import annotations

import pytest

from conformance.common.rules import expect
from conformance.search_knowledge import rules as sk
from conformance.search_knowledge.answers import (
    envelope_types,
)
from conformance.search_knowledge.world import SkWorld

R = pytest.mark.requirement


@R(sk.SK_020)
def test_runtime_switch_off_is_knowledge_unavailable(tool: SkWorld) -> None:
    control = tool.need_control()
    control.runtime(False)
    try:
        for arguments in ({"query": tool.corpus.token("many")}, {"knowledge_item_id": "sk-window"}):
            answer = tool.ask(arguments)
            expect(answer.has("knowledge_runtime_disabled"), sk.SK_020, f"runtime off answered {answer.raw}")
            expect(
                "knowledge_unavailable" in envelope_types(answer),
                sk.SK_020,
                f"no knowledge_unavailable envelope: {answer.raw}",
            )
            expect(
                not answer.hits() and "content" not in (answer.body or {}),
                sk.SK_020,
                "runtime off still returned knowledge",
            )
    finally:
        control.runtime(True)
    tool.search(tool.corpus.token("many"))


@R(sk.SK_007, sk.SK_019)
def test_read_only_no_audit_event(tool: SkWorld) -> None:
    control = tool.need_control()
    before = control.audit()
    if before is None:
        pytest.skip("not verified: the control extension does not show the Knowledge audit log")
    answers = [  # asked, not searched: the audit envelope is judged before the result's shape
        tool.ask({"query": tool.corpus.token("many")}),
        tool.ask({"knowledge_item_id": "sk-window"}),
        tool.ask({"knowledge_item_id": "sk-no-such-item"}),
    ]
    for answer in answers:
        expect(
            not {"audit", "audit_event", "audit_events"} & set(answer.body or {}),
            sk.SK_019,
            "a result carries an audit envelope",
        )
    after = control.audit()
    expect(after == before, sk.SK_007, f"search_knowledge wrote audit events: {(after or [])[len(before) :][:3]}")


@R(sk.SK_009)
def test_callable_whether_listed_or_not(tool: SkWorld) -> None:
    answer = tool.ask({"query": "knowledge"})
    expect(answer.ok, sk.SK_009, f"search_knowledge is not callable: {answer.raw}")


@R(sk.SK_027)
def test_not_in_the_minimal_tool_list(tool: SkWorld) -> None:
    """The seed keeps the tool out of "the minimal public marketplace-app tool list"; this project
    reads the Agent Session path's tools/list as that list (CHOICES.md), so a listing is a SHOULD
    warning (a failure with --fail-on should)."""
    tool.ask({"query": "knowledge"})  # the session exists (or the check is not verified)
    listed = {t.name for t in tool.sessions["alice"].tools()}
    expect(
        "search_knowledge" not in listed,
        sk.SK_027,
        "search_knowledge is listed by tools/list of the Agent Session path",
    )
