"""The one client of the optional test-control extension (schemas/control-openapi.yaml).

Every part of the suite that sets up or observes state through control uses it: the Core
suite's worlds and their cleanup, the ``search_knowledge`` checks (the route-bound
:class:`KnowledgeControl`), client runs (faults, ``respond_next``, the transcript) and load
runs. A refusal is a :class:`ControlError`, a harness error: nothing was judged.

Every request goes through :meth:`Control._request`, the one place that sends a control
request and maps its answer (a non-2xx status, or no answer at all) to that error.

The control extension is a versioned contract of its own (``info.version`` of the document):
its root (``GET /``) lists the release and the optional features an extension offers. The
suite uses only what is offered. An extension without that root is taken for release 1.0.0,
and each later feature's endpoint is tried once; an optional endpoint that answers 404, 405
or 501 is "not offered": :class:`NotOffered`, a ``NotVerified`` (the rules that need it stay
not verified), never a harness error.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from conformance.common.outcomes import HarnessError, NotVerified
from conformance.common.secrets import SECRETS, clip
from conformance.common.transport import IDENTITIES, RateLimited, bounded_client, broken
from conformance.common.untrusted import shown

CONTROL_BASE = "/_control/v1"  # where the bundled simulator serves control (wire-defaults' paths.control_base)
NOT_OFFERED = (404, 405, 501)
"""How a control extension says it has no such endpoint: an optional one is then not offered."""


FIRST_RELEASE = "1.0.0"
"""What an extension without ``GET /`` implements: no optional feature is known, each is tried."""


class ControlError(HarnessError):
    """The control extension refused a setup step: the run cannot verify what needs it."""


class NotOffered(NotVerified):
    """An optional feature of the control extension that this one does not offer."""


@dataclass(frozen=True)
class Offer:
    """What an extension says of itself: its release, and its optional features (None: it does not say)."""

    version: str
    features: frozenset[str] | None

    def lacks(self, feature: str) -> bool:
        """True when the extension says it does not offer ``feature`` (never when it says nothing)."""
        return self.features is not None and feature not in self.features


TRANSCRIPT_MAX_BYTES = 64 << 20
"""A transcript holds the requests of every run against the Core since it started (the simulator
keeps its last 10,000, some 0.5 KB each): bounded, but well above one answer's 4 MiB, or a Core
that served a few runs turns every later transcript read into a harness error."""
TRANSCRIPT_SECONDS = 60.0

KEPT_TRANSCRIPT_BYTES = 2 * TRANSCRIPT_MAX_BYTES
"""What incremental transcript reads (``transcript.since``) keep at most, counted as their JSON
plus :data:`ENTRY_OVERHEAD` a request: the Core's transcript at the first read and a run's own
requests after it."""
ENTRY_OVERHEAD = 128
"""Bytes counted for each kept request besides its JSON: an entry of a few characters costs about
that much in memory."""


class Control:
    """The control extension at ``base_url`` (its ``/_control/v1`` root), over ``http``.

    It remembers the workspaces it created (``cleanup`` removes them again) and every revision
    text it published (a response that carries one of them leaks it)."""

    def __init__(
        self, http: httpx.Client, base_url: str, token: str, *, owns_http: bool = False, over_network: bool = True
    ) -> None:
        self.http = http
        self._over_network = over_network  # False: ``http`` reaches an in-process app, the only way to it
        self.base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._owns_http = owns_http
        self.created: list[str] = []  # workspaces this run made, removed again by cleanup()
        self.published: list[str] = []  # every revision text this run wrote, for leak checks
        self._offer: Offer | None = None
        self._absent: set[str] = set()  # features whose endpoint answered "no such endpoint"
        self._transcript_http: httpx.Client | None = None  # its own bound (TRANSCRIPT_MAX_BYTES)
        self._transcript_lock = threading.Lock()
        self._transcript_seen: list[dict[str, Any]] = []  # read so far (transcript.since)
        self._transcript_bytes = 0
        self._transcript_next = 0
        self._transcript_epoch: str | None = None
        SECRETS.add(token)

    @classmethod
    def of_core(cls, core_url: str, token: str, *, timeout: float = 30.0) -> Control:
        """The control extension of the Core at ``core_url``, over an HTTP client of its own (closed by ``close``)."""
        http = bounded_client(timeout)  # a whole-request deadline and a bounded body, as for the Core
        return cls(http, core_url.rstrip("/") + CONTROL_BASE, token, owns_http=True)

    def close(self) -> None:
        if self._owns_http:
            self.http.close()
        if self._transcript_http is not None:
            self._transcript_http.close()

    # ------------------------------------------------------------- what it offers
    @property
    def offer(self) -> Offer:
        """The extension's release and features, asked once (``GET /``)."""
        if self._offer is None:
            body = self._request("GET", "/", optional=True)
            if body is None:
                self._offer = Offer(FIRST_RELEASE, None)
            elif (
                not isinstance(body, dict)
                or not isinstance(body.get("version"), str)
                or not isinstance(body.get("features"), list)
            ):
                raise ControlError(f"control GET / is not a release and its features: {clip(str(body), 300)}")
            else:
                self._offer = Offer(body["version"], frozenset(str(f) for f in body["features"]))
        return self._offer

    def offers(self, feature: str) -> bool:
        """Whether ``feature`` may be used: offered, or not known to be missing."""
        return feature not in self._absent and not self.offer.lacks(feature)

    def _missing(self, feature: str, what: str) -> NotOffered:
        return NotOffered(f"not verified: the control extension does not offer {what} (feature {feature})")

    # ------------------------------------------------------------- the one sender
    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        optional: bool = False,
        done: tuple[int, ...] = (),
        feature: tuple[str, str] | None = None,
        http: httpx.Client | None = None,
    ) -> Any:
        """Send one control request; its JSON answer (None when empty). A non-2xx answer (other
        than the statuses in ``done``), or none, is a ControlError. ``feature`` (its name, and
        what it is in words) marks an optional feature's endpoint: one the extension does not
        offer (it says so, or answers 404, 405 or 501) is NotOffered; an ``optional`` endpoint
        within a feature answers None instead."""
        if feature is not None and not self.offers(feature[0]):
            raise self._missing(*feature)
        try:
            response = (http or self.http).request(
                method,
                self.base + path,
                json=body,
                params=params,
                headers=self._headers,
                extensions={"kc_control": True},  # never kept for reports (conformance.common.transport)
            )
        except httpx.HTTPError as exc:
            raise ControlError(f"control {method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code in done or (optional and response.status_code in NOT_OFFERED):
            return None
        if feature is not None and response.status_code in NOT_OFFERED:
            self._absent.add(feature[0])
            raise self._missing(*feature)
        if not 200 <= response.status_code < 300:
            raise ControlError(f"control {method} {path} answered {response.status_code}: {clip(response.text, 300)}")
        if (why := broken(response)) is not None:
            raise ControlError(f"control {method} {path}: {why}")
        try:
            return response.json() if response.content else None
        except ValueError as exc:  # also a body the suite will not walk (duplicate members, too deep)
            raise ControlError(
                f"control {method} {path} answered no JSON the suite can read: {shown(exc, 300)}"
            ) from None

    # ------------------------------------------------------------- workspaces
    def create_workspace(self, route: str, mode: str = "normal") -> None:
        self._request("POST", "/workspaces", {"route": route, "mode": mode})
        self.created.append(route)

    def delete_workspace(self, route: str) -> None:
        """Remove a workspace and all it holds; one already gone (404) counts as removed."""
        self._request("DELETE", f"/workspaces/{route}", done=(404,))

    def cleanup(self) -> list[str]:
        """Delete the workspaces this run created, where the control extension allows it.

        Returns what could not be deleted; a Core whose control extension has no
        delete (405/501, or a refusal) keeps them, named by run ID, and nothing fails."""
        kept = []
        for route in reversed(self.created):
            try:
                self.delete_workspace(route)
            except (ControlError, RateLimited):  # a Core still rate limiting keeps it too, and says so
                kept.append(route)
        self.created.clear()
        return kept

    def replace_corpus(self, route: str, bases: list[dict[str, Any]]) -> dict[str, str]:
        """Seed or replace every base, item and revision; item ID -> its current revision."""
        return dict(self._request("PUT", f"/workspaces/{route}/corpus", {"bases": bases})["items"])

    def publish(self, route: str, item_id: str, content: str) -> str:
        self.published.append(content)
        path = f"/workspaces/{route}/items/{item_id}/revisions"
        return str(self._request("POST", path, {"content": content})["revision_id"])

    def set_scope(self, route: str, account: str, bases: list[str]) -> None:
        self._request("PUT", f"/workspaces/{route}/scopes/{account}", {"bases": bases})

    def set_mode(self, route: str, mode: str, legacy_status: int | None = None) -> None:
        body: dict[str, Any] = {"mode": mode}
        if legacy_status is not None:
            body["legacy_status"] = legacy_status
        self._request("PUT", f"/workspaces/{route}/mode", body)

    def knowledge(self, route: str) -> KnowledgeControl:
        """The ``search_knowledge`` states of one workspace (``/workspaces/{route}/knowledge/...``)."""
        return KnowledgeControl(self, route)

    # ------------------------------------------------------------- clock
    def now(self) -> float:
        return float(self._request("GET", "/clock")["now"])

    def advance(self, seconds: float, *routes: str) -> float:
        """Move time for ``routes``, by default for every workspace this run created: another run
        sharing the Core keeps its own time."""
        body: dict[str, Any] = {"seconds": seconds}
        if self.offer.features is not None and "clock.routes" in self.offer.features:  # else: the whole Core (1.0.0)
            body["routes"] = sorted(set(routes or self.created))
        return float(self._request("POST", "/clock/advance", body)["now"])

    # ------------------------------------------------------------- identities
    def mint(
        self, account: str, route: str, *, hub: str | None = None, session_id: str | None = None
    ) -> dict[str, str]:
        """An Agent Session token of ``account`` on ``route`` (and its hub and session); scrubbed from every output."""
        body = {"account": account, "route": route}
        if hub:
            body["hub"] = hub
        if session_id:
            body["session_id"] = session_id
        minted = dict(self._request("POST", "/identities", body))
        SECRETS.add(minted.get("token"), minted=True)  # the target's choice: it masks the target's text only
        # Named by its account until a world gives it its role (primary, other_route, ...).
        IDENTITIES.name(minted.get("token"), f"minted_{account}")
        return minted

    # ------------------------------------------------------------- faults
    def fault(self, kind: str, route: str | None = None, **extra: Any) -> None:
        self._request("POST", "/faults", {"kind": kind, **({"route": route} if route else {}), **extra})

    def respond_next(
        self, route: str, endpoint: str, status: int, body: Any = None, *, after: int = 0, text: str | None = None
    ) -> None:
        """The next request to ``endpoint`` on ``route`` gets this answer (control's respond_next fault):
        after ``after`` such requests went through, and as ``text`` (not JSON) when given."""
        if not self.offers("faults.respond_next"):
            raise self._missing("faults.respond_next", "canned answers (the respond_next fault)")
        extra: dict[str, Any] = {}
        if after:
            if not self.offers("faults.respond_next.after"):
                raise self._missing("faults.respond_next.after", "a canned answer mid-chain (respond_next after)")
            extra["after"] = after
        if text is not None:
            if not self.offers("faults.respond_next.text"):
                raise self._missing("faults.respond_next.text", "a canned answer that is not JSON (respond_next text)")
            extra["text"] = text
        else:
            extra["body"] = body
        self.fault("respond_next", route, endpoint=endpoint, status=status, **extra)

    def lost_responses(self, route: str) -> list[dict[str, Any]] | None:
        """What the lose faults fired on ``route`` withheld (status and body), oldest first; None when
        this control extension does not offer it (404, 405 or 501): then nothing can be compared with it."""
        try:
            body = self._request(
                "GET",
                "/faults/lost",
                params={"route": route},
                feature=("faults.lost", "the read-back of lost responses"),
            )
        except NotOffered:
            return None
        found = body.get("responses") if isinstance(body, dict) else None
        if not isinstance(found, list):
            raise ControlError(f"control GET /faults/lost answered without a responses list: {clip(str(body), 300)}")
        return [dict(r) for r in found if isinstance(r, dict)]

    def lost(self, route: str) -> list[dict[str, Any]]:
        """``lost_responses`` for a check that cannot do without them."""
        found = self.lost_responses(route)
        if found is None:
            raise self._missing("faults.lost", "the read-back of lost responses (GET /faults/lost)")
        return found

    # ------------------------------------------------------------- transcript
    def transcript(self) -> list[dict[str, Any]]:
        """The requests the Core surface received, oldest first (never a token).

        A client check reads it before and after it acts, some 400 times a client run: where the
        extension lists ``transcript.since``, each read asks only for what came since the last one
        and adds it to what was read before (a reset, a new epoch, or requests the Core no longer
        keeps: read from the start again), so it holds every request since the first read, also
        those the Core has let go since; elsewhere each read is the whole transcript. What is kept
        is bounded (:data:`KEPT_TRANSCRIPT_BYTES`): past it, a ControlError, as a whole read
        past its own cap is."""
        with self._transcript_lock:
            newer = self._transcript_since(self._transcript_next)
            if newer is None:
                return list(self._transcript()["requests"])
            requests, following, epoch = newer
            follows = epoch == self._transcript_epoch and following - len(requests) == self._transcript_next
            if self._transcript_next and not follows:
                newer = self._transcript_since(0)  # not what follows what was read: all of it again
                if newer is None:
                    return list(self._transcript()["requests"])
                requests, following, epoch = newer
            if not follows:
                self._transcript_seen.clear()
                self._transcript_bytes = 0
            seen = self._transcript_seen
            for entry in requests:
                seen.append(entry)
                self._transcript_bytes += len(json.dumps(entry, default=str)) + ENTRY_OVERHEAD
            if self._transcript_bytes > KEPT_TRANSCRIPT_BYTES:
                seen.clear()
                self._transcript_bytes, self._transcript_next, self._transcript_epoch = 0, 0, None
                raise ControlError(
                    f"control GET /transcript: the requests since the last reset are over {KEPT_TRANSCRIPT_BYTES} "
                    "bytes (reset the Core's control extension)"
                )
            self._transcript_next, self._transcript_epoch = following, epoch
            return list(seen)

    def _transcript_since(self, first: int) -> tuple[list[dict[str, Any]], int, str] | None:
        """The requests numbered ``first`` and later, the number the next one will get, and the
        epoch (the last reset) they count from (``transcript.since``); None where the extension
        does not list it, or answers without ``next`` and ``epoch`` (then it is not asked again)."""
        features = self.offer.features  # listed only (added in 1.2.0): a 1.0.0 extension is never sent it
        if features is None or "transcript.since" not in features or "transcript.since" in self._absent:
            return None
        body = self._transcript({"since": str(first)})
        following, epoch = body.get("next"), body.get("epoch")
        if type(following) is not int or following < 0 or not isinstance(epoch, str):
            self._absent.add("transcript.since")  # it says neither: read whole from now on
            return None
        return list(body["requests"]), following, epoch

    def _transcript(self, params: dict[str, str] | None = None) -> dict[str, Any]:
        if self._transcript_http is None and self._over_network:
            self._transcript_http = bounded_client(TRANSCRIPT_SECONDS, TRANSCRIPT_MAX_BYTES)
        feature = ("transcript", "a transcript (GET /transcript)")
        body = self._request("GET", "/transcript", params=params, feature=feature, http=self._transcript_http)
        if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
            raise ControlError(f"control GET /transcript is not a list of requests: {clip(str(body), 300)}")
        return body


class KnowledgeControl:
    """The ``search_knowledge`` (seed 003) states of one workspace, through its control extension."""

    def __init__(self, control: Control, route: str) -> None:
        self.control, self.route = control, route

    def _request(self, method: str, path: str, body: Any = None, *, optional: bool = False) -> Any:
        return self.control._request(
            method,
            f"/workspaces/{self.route}/knowledge{path}",
            body,
            optional=optional,
            feature=("knowledge", "the search_knowledge states (seed 003, /workspaces/{route}/knowledge/...)"),
        )

    def publish(self, item_id: str, content: str, title: str | None = None) -> str:
        """A new revision through the Knowledge service: current, published, audited (the
        previous revision's title when ``title`` is None)."""
        body = {"content": content} | ({} if title is None else {"title": title})
        return str(self._request("POST", f"/items/{item_id}/revisions", body)["revision_id"])

    def item_state(self, item_id: str, *, active: bool | None = None, published: bool | None = None) -> None:
        body = {k: v for k, v in (("active", active), ("published", published)) if v is not None}
        self._request("PUT", f"/items/{item_id}/state", body)

    def base_state(self, base_id: str, active: bool) -> None:
        self._request("PUT", f"/bases/{base_id}/state", {"active": active})

    def runtime(self, enabled: bool) -> None:
        self._request("PUT", "/runtime", {"enabled": enabled})

    def scopes(self, account: str, scopes: list[str]) -> None:
        self._request("PUT", f"/scopes/{account}", {"scopes": scopes})

    def audit(self) -> list[dict[str, Any]] | None:
        """The audit events, or None when this control extension cannot show them."""
        body = self._request("GET", "/audit", optional=True)
        events = body.get("events") if isinstance(body, dict) else None
        return list(events) if isinstance(events, list) else None
