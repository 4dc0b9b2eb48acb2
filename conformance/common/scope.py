"""A declared scope: which surfaces a run covers and with what access to the target, and so which
MUSTs its verdict counts ("conformant within scope S: N of N MUSTs of S verified; M outside S").

A requirement is in scope when its surface is declared, a request shows it (``observe.via`` is not
``none``) and the declared access provides everything it needs (``observe.needs`` in the catalogue).
A requirement outside the scope is listed, never counted as verified; inside it, a MUST is verified
only by a check that ran and passed, as without a scope."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_schemas.catalogue import Catalogue

SURFACES = ("server", "mcp", "tool")
"""The surfaces a Core run can declare (a client run's are its harness's: client, host)."""
ACCESS = {
    "control": frozenset({"control", "clock", "second_identity", "documents", "workspace_states", "legacy_target"}),
    "no-control": frozenset({"second_identity", "documents", "workspace_states", "legacy_target"}),
}
"""What each kind of access provides: with control the suite drives every state it needs; without
it, the identities, kit documents and kept workspaces of the target configuration stand in."""
REALTIME = frozenset({"clock"})  # ``+realtime``: expiry waited out in real seconds


class ScopeError(ValueError):
    """A scope that cannot be parsed: a usage error naming what to write instead."""


@dataclass(frozen=True)
class Scope:
    surfaces: tuple[str, ...]
    access: tuple[str, ...]  # e.g. ("no-control", "realtime")

    @property
    def label(self) -> str:
        return f"{','.join(self.surfaces)}@{'+'.join(self.access)}"

    @property
    def provides(self) -> frozenset[str]:
        base = ACCESS[self.access[0]]
        return base | REALTIME if "realtime" in self.access else base

    def members(self, catalogue: Catalogue) -> tuple[str, ...]:
        """The MUSTs this scope counts, in catalogue order."""
        return tuple(
            r.id
            for r in catalogue
            if r.level == "MUST" and r.surface in self.surfaces and r.via != "none" and set(r.needs) <= self.provides
        )

    def outside(self, catalogue: Catalogue) -> tuple[str, ...]:
        """The MUSTs a request can show on the declared surfaces that this scope leaves out (listed, never counted)."""
        inside = set(self.members(catalogue))
        return tuple(
            r.id
            for r in catalogue
            if r.level == "MUST" and r.surface in self.surfaces and r.via != "none" and r.id not in inside
        )


def parse_scope(text: str) -> Scope:
    """``SURFACES@ACCESS``: e.g. ``server@no-control``, ``server,mcp,tool@control``, ``server@no-control+realtime``."""
    spelled = "write SURFACES@ACCESS, e.g. server@no-control, server,mcp,tool@control or server@no-control+realtime"
    surfaces_text, at, access_text = text.strip().partition("@")
    if not at:
        raise ScopeError(f"--scope {text!r}: {spelled}")
    surfaces = tuple(dict.fromkeys(s.strip() for s in surfaces_text.split(",") if s.strip()))
    unknown = [s for s in surfaces if s not in SURFACES]
    if not surfaces or unknown:
        raise ScopeError(f"--scope {text!r}: surfaces are {', '.join(SURFACES)} (not {', '.join(unknown) or 'none'})")
    access = tuple(dict.fromkeys(a.strip() for a in access_text.split("+") if a.strip()))
    if not access or access[0] not in ACCESS or any(a != "realtime" for a in access[1:]):
        raise ScopeError(f"--scope {text!r}: access is control or no-control, optionally +realtime")
    if access[0] == "control" and "realtime" in access:
        raise ScopeError(f"--scope {text!r}: control already drives the clock; realtime goes with no-control")
    return Scope(surfaces, access)
