"""Miniatures of references: expiry, binding, scope and revision checks skipped,
signatures not checked, and reference errors that say the wrong thing."""

from __future__ import annotations

import math
from typing import Any

from simulator.clock import Clock
from simulator.config import SimConfig
from simulator.core import Caller, Core, binding
from simulator.errors import ApiError
from simulator.miniatures._asgi import Miniature
from simulator.signing import Signer
from simulator.store import Revision, Run, Scope, Store


class RefsNeverExpire(Core):
    reference_ttl = math.inf


class RefsExpireEarly(Core):
    reference_ttl = 60.0


class ExpiryRoundsAge(Core):
    """Ages are rounded to whole seconds before the check: from 299.5 s on a reference or cursor is expired."""

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        age = self._age(claims)
        if age is not None and round(age) >= self.reference_ttl:
            raise self._ref_error(410, "knowledge_reference_expired", f"this {kind} expired; search again")
        super()._check_age(kind, claims)


class ExpiryWholeSecondsLate(Core):
    """Ages are truncated to whole seconds and must pass the TTL: a reference or cursor stays valid until 301 s."""

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        age = self._age(claims)
        if age is None or math.floor(age) > self.reference_ttl:
            raise self._ref_error(410, "knowledge_reference_expired", f"this {kind} expired; search again")


class ExpiryAfterEdge(Core):
    """Expired only once older than the TTL (`age > 300`): at exactly 300 s a reference or cursor still reads."""

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        age = self._age(claims)
        if age is None or age > self.reference_ttl:
            raise self._ref_error(410, "knowledge_reference_expired", f"this {kind} expired; search again")


class ExpiryEdgeCrashes(Core):
    """The age, in hundredths of a second, is compared as below or above the TTL, and at 300.00 s
    neither branch answers: the handler fails (500)."""

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        age = self._age(claims)
        if age is not None and round(age, 2) == self.reference_ttl:
            raise ApiError(500, "internal_error", f"this {kind} is neither valid nor expired")
        super()._check_age(kind, claims)


class ReadRefreshesExpiry(Core):
    """Each page served restarts its reference's 300 seconds: expiry counts from the latest read."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self.last_read: dict[str, float] = {}

    def _claims(self, kind: str, token: str) -> dict[str, Any]:
        claims = super()._claims(kind, token)
        if kind == "ref" and token in self.last_read:
            claims = {**claims, "t": max(float(claims.get("t", 0)), self.last_read[token])}
        return claims

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        page = super().read(caller, body)
        self.last_read[body["ref"]] = self.clock.now()
        return page


class _ContinuingRead(Core):
    """Knows, during a read, whether it continues a chain (a cursor was given): the base of
    the miniatures that trust a cursor where they should check it."""

    continuing = False

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        self.continuing = "cursor" in body
        try:
            return super().read(caller, body)
        finally:
            self.continuing = False


class ExpiryFromFirstUse(Core):
    """A reference's or cursor's 300 seconds start when it is first presented, not when it was
    issued: right for a token read at once, late by however long it waited for its first read."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self.first_use: dict[str, float] = {}

    def _claims(self, kind: str, token: str) -> dict[str, Any]:
        claims = super()._claims(kind, token)
        return {**claims, "t": self.first_use.setdefault(token, self.clock.now())}


class CursorExpiryFromLastUse(_ContinuingRead):
    """A read with a cursor counts only the cursor's age (the cursor stands for its chain, so the
    reference beside it is not aged), and each read with a cursor restarts its 300 seconds."""

    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self.last_use: dict[str, float] = {}

    def _claims(self, kind: str, token: str) -> dict[str, Any]:
        claims = super()._claims(kind, token)
        if kind != "cursor":
            return claims
        last = self.last_use.get(token)
        self.last_use[token] = self.clock.now()
        return claims if last is None else {**claims, "t": max(float(claims.get("t", 0)), last)}

    def _check_age(self, kind: str, claims: dict[str, Any]) -> None:
        if not (self.continuing and kind == "reference"):
            super()._check_age(kind, claims)


class CursorOutlivesRevision(_ContinuingRead):
    """A read with a cursor trusts the chain it continues: the revision check is skipped and the
    chain goes on in whatever revision is current."""

    def _check_revision(self, claims: dict[str, Any], current: Revision) -> None:
        if not self.continuing:
            super()._check_revision(claims, current)


class CursorIgnoresScope(_ContinuingRead):
    """A read with a cursor trusts the chain it continues: the scope check is skipped, so a chain
    goes on after the account's scope dropped its document (a plain reference is still checked)."""

    def _check_scope(self, claims: dict[str, Any], current: Revision | None, scope: Scope) -> None:
        if not self.continuing:
            super()._check_scope(claims, current, scope)


def _accepts_another(claim: str, label: str) -> type[Core]:
    """A Core that accepts a reference whose ``claim`` names another ``label``. Such a
    reference was necessarily issued for another run too, so that is overlooked with it;
    a reference that differs in the run alone is still refused."""

    class AcceptsAnother(Core):
        def _check_binding(self, kind: str, claims: dict[str, Any], caller: Caller, run: Run) -> None:
            mine = {key: value for key, value, _ in binding(caller, run)}
            if claims.get(claim) != mine[claim]:
                claims = {**claims, claim: mine[claim], "r": run.run_id}
            super()._check_binding(kind, claims, caller, run)

    AcceptsAnother.__name__ = AcceptsAnother.__qualname__ = f"AcceptsAnother{label}"
    return AcceptsAnother


class RefAnyRun(Core):
    def _check_binding(self, kind: str, claims: dict[str, Any], caller: Caller, run: Run) -> None:
        super()._check_binding(kind, {**claims, "r": run.run_id}, caller, run)


class RefsBoundToRunOnly(Core):
    """Run IDs are looked up without asking whose they are, and a reference or cursor is
    checked only against the run it names: the bug of a Core that trusts the run alone."""

    def _run(self, run_id: str, caller: Caller) -> Run:
        run = self.store.run(run_id)
        return super()._run(run_id, caller) if run is None else run

    def _check_binding(self, kind: str, claims: dict[str, Any], caller: Caller, run: Run) -> None:
        mine = {key: value for key, value, _ in binding(caller, run)}
        super()._check_binding(kind, {**claims, **{k: v for k, v in mine.items() if k != "r"}}, caller, run)


class ScopeChangeIgnored(Core):
    def _check_scope(self, claims: dict[str, Any], current: Revision | None, scope: Scope) -> None:
        return None


class ScopeWideningIgnored(Core):
    """Only a scope that no longer holds the document refuses its references: one widened (or
    otherwise changed) around it keeps them readable."""

    def _check_scope(self, claims: dict[str, Any], current: Revision | None, scope: Scope) -> None:
        super()._check_scope({**claims, "sv": scope.version}, current, scope)


class RevisionChangeIgnored(Core):
    def _check_revision(self, claims: dict[str, Any], current: Revision) -> None:
        return None


class GenericErrorCodes(Core):
    def _ref_error(self, status: int, code: str, message: str) -> ApiError:
        err = super()._ref_error(status, code, message)
        err.code = "invalid_reference"
        return err


class ErrorWithoutNextAction(Core):
    def _ref_error(self, status: int, code: str, message: str) -> ApiError:
        err = super()._ref_error(status, code, message)
        err.next_action = None
        return err


class ErrorNextActionElsewhere(Core):
    """Reference errors send the caller to replay the operation, not to search again."""

    def _ref_error(self, status: int, code: str, message: str) -> ApiError:
        err = super()._ref_error(status, code, message)
        err.next_action = "replay_operation"
        return err


class ErrorLeaksContent(Core):
    """An expired reference's error carries the start of the document it names."""

    def read(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().read(caller, body)
        except ApiError as err:
            if err.code == "knowledge_reference_expired":
                claims = self.signer.verify("ref", body["ref"])
                current = self.store.current_revision(str(claims.get("w")), str(claims.get("i")))
                if current is not None:
                    err.extra["content"] = current.content[:200]
            raise


class _UncheckedSigner(Signer):
    """Reads any token of the right shape, whatever its signature says."""

    def verify(self, kind: str, token: str) -> dict[str, Any]:
        parts = token.split(".")
        if len(parts) == 3:
            token = ".".join([parts[0], parts[1], self._mac(parts[0], parts[1])])
        return super().verify(kind, token)


class UnsignedRefs(Core):
    def __init__(self, config: SimConfig, store: Store, clock: Clock) -> None:
        super().__init__(config, store, clock)
        self.signer = _UncheckedSigner(store.signing_key())


MINIATURES: dict[str, Miniature] = {
    "expiry_rounds_age": ExpiryRoundsAge,
    "expiry_whole_seconds_late": ExpiryWholeSecondsLate,
    "expiry_after_edge": ExpiryAfterEdge,
    "expiry_edge_crashes": ExpiryEdgeCrashes,
    "refs_never_expire": RefsNeverExpire,
    "refs_expire_early": RefsExpireEarly,
    "read_refreshes_expiry": ReadRefreshesExpiry,
    "expiry_from_first_use": ExpiryFromFirstUse,
    "cursor_expiry_from_last_use": CursorExpiryFromLastUse,
    "cursor_outlives_revision": CursorOutlivesRevision,
    "cursor_ignores_scope": CursorIgnoresScope,
    "ref_any_hub": _accepts_another("h", "Hub"),
    "ref_any_session": _accepts_another("s", "Session"),
    "ref_any_route": _accepts_another("w", "Route"),
    "ref_any_run": RefAnyRun,
    "refs_bound_to_run_only": RefsBoundToRunOnly,
    "scope_change_ignored": ScopeChangeIgnored,
    "scope_widening_ignored": ScopeWideningIgnored,
    "revision_change_ignored": RevisionChangeIgnored,
    "ref_any_account": _accepts_another("a", "Account"),
    "generic_error_codes": GenericErrorCodes,
    "error_without_next_action": ErrorWithoutNextAction,
    "error_next_action_elsewhere": ErrorNextActionElsewhere,
    "error_leaks_content": ErrorLeaksContent,
    "unsigned_refs": UnsignedRefs,
}
