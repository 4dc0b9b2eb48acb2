"""Who sent each request, known only by a digest of its credential.

A bearer token is a secret: observe keeps its digest, gives it a name for the reports
(``primary`` when the target configuration names it, else ``client-1``, ``client-2``, ...), and
adds the token to the process's scrubber so that no report can carry it, whatever an upstream
echoes. What an identity stands for (account, Agent Session, Hub, route) is known only when it
is configured: rules across identities are judged only between identities known to differ."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from conformance.common.secrets import SECRETS
from conformance.observe.seen import digest

SCRUBBED_TOKENS = 4096
"""Tokens added to the scrubber at most: each adds its spellings to it, so the scrubber's memory is
bounded too. Evidence is scrubbed as it is kept, with its own request's token always known."""
PSEUDONYM = "observed-"
"""What a recording written by observe carries instead of a token: this prefix and the token's
digest, which the reader takes as that digest (the same identity, no secret)."""
NAMED = 100_000
"""Credentials given a name at most; later ones are all ``client-other``."""


@dataclass(frozen=True)
class Identity:
    """What a credential stands for: each member empty when not configured."""

    name: str
    account: str = ""
    session: str = ""
    hub: str = ""

    def differs(self, other: Identity) -> str | None:
        """The first binding dimension (hub, session, account) known to differ from ``other``, or
        None when none is known to: two unconfigured credentials may be one Agent Session's."""
        for dimension in ("hub", "session", "account"):
            mine, theirs = getattr(self, dimension), getattr(other, dimension)
            if mine and theirs and mine != theirs:
                return dimension
        return None


class Credentials:
    """Credential digests and their identities; thread-safe (the proxy adds, the judge reads)."""

    def __init__(self, known: dict[str, Identity] | None = None, auth_scheme: str = "Bearer") -> None:
        self._lock = threading.Lock()
        self._known = {digest(token): who for token, who in (known or {}).items()}
        self._named: OrderedDict[str, Identity] = OrderedDict()
        self._scrubbed = 0
        self._used: set[str] = set()  # the configured credentials seen so far
        self._pending: list[str] = []  # new tokens not yet in the scrubber
        self.scheme = auth_scheme
        for token in known or {}:
            SECRETS.add(token)

    def token_of(self, header: str | None) -> str | None:
        """The credential a header value carries (after the configured scheme)."""
        if header is None:
            return None
        value = header.strip()
        scheme = f"{self.scheme} " if self.scheme else ""
        if scheme and value[: len(scheme)].lower() == scheme.lower():
            value = value[len(scheme) :].strip()
        return value or None

    def seen(self, header: str | None) -> str | None:
        """The digest of the credential in ``header``; the token itself is only ever scrubbed.
        Cheap, as the forwarding path needs it: a new token waits for :meth:`flush` to reach the
        scrubber."""
        token = self.token_of(header)
        if token is None:
            return None
        pseudonym = token.startswith(PSEUDONYM) and len(token) == len(PSEUDONYM) + 24
        key = token[len(PSEUDONYM) :] if pseudonym else digest(token)
        with self._lock:
            if key in self._known:
                self._used.add(key)
            elif key not in self._named:
                self._name(key)
                if self._scrubbed < SCRUBBED_TOKENS and not pseudonym:
                    self._scrubbed += 1
                    self._pending.append(token)
        return key

    def note(self, key: str | None) -> None:
        """Name a credential known only by its digest (a judge in another process than the proxy)."""
        if key is None:
            return
        with self._lock:
            if key in self._known:
                self._used.add(key)
            elif key not in self._named:
                self._name(key)

    def take_pending(self) -> list[str]:
        """The tokens seen since the last call, for a judge in another process to scrub."""
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def flush(self) -> None:
        """Add the tokens seen since the last call to the scrubber (the judge's thread, before judging)."""
        with self._lock:
            pending, self._pending = self._pending, []
        for token in pending:
            SECRETS.add(token)

    def _name(self, key: str) -> None:
        if len(self._named) < NAMED:
            self._named[key] = Identity(f"client-{len(self._named) + 1}")

    def of(self, key: str | None) -> Identity | None:
        if key is None:
            return None
        with self._lock:
            if key in self._known:
                return self._known[key]
            return self._named.get(key, Identity("client-other"))

    @property
    def count(self) -> int:
        """Distinct credentials seen (the known ones count once used)."""
        with self._lock:
            return len(self._named) + len(self._used)
