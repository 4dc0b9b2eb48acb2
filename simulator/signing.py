"""Opaque, tamper-evident references and cursors (HMAC-SHA256 over compact JSON).

Claims are encoded by orjson with sorted keys (a search signs a reference per hint, a read page
one or two cursors: the standard library's encoder was a tenth of a search's CPU time). Tokens
signed by the standard library's encoding (ASCII escapes) still verify: the signature covers the
payload as sent, and both decoders read both."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from functools import lru_cache
from typing import Any

import orjson

PREFIX = {"ref": "kr1", "cursor": "kc1"}
MAX_TOKEN_BYTES = 4096
MAC_BYTES = 18
VERIFIED_LIMIT = 4096


class TokenError(ValueError):
    """The token is malformed, forged or of the wrong kind."""


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64(data: bytes) -> str:
    """Unpadded URL-safe base64 (``base64.urlsafe_b64encode``'s, without its wrappers: a search signs three)."""
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(_URLSAFE).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64_length(size: int) -> int:
    """Characters of ``size`` bytes in unpadded base64."""
    return (4 * size + 2) // 3


class Signer:
    def __init__(self, key: bytes) -> None:
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)  # copied for each MAC: the key is prepared once
        # Tokens this signer verified, with their claims: a token's claims under one key never change,
        # and a chain of reads presents one reference again and again (its check was a fifth of a read's
        # own work). Only tokens that verified are kept; the table empties when full.
        self._verified: dict[tuple[str, str], dict[str, Any]] = {}

    def _mac(self, prefix: str, payload: str) -> str:
        mac = self._keyed.copy()
        mac.update(f"{prefix}.{payload}".encode())
        return _b64(mac.digest()[:MAC_BYTES])

    def sign(self, kind: str, claims: dict[str, Any]) -> str:
        prefix = PREFIX[kind]
        payload = _b64(orjson.dumps(claims, option=orjson.OPT_SORT_KEYS))
        return f"{prefix}.{payload}.{self._mac(prefix, payload)}"

    def signed_length(self, kind: str, claims: dict[str, Any]) -> int:
        """The length of ``sign(kind, claims)`` without signing: a read page is sized with a
        placeholder cursor that is never sent, and only its length counts."""
        payload = orjson.dumps(claims, option=orjson.OPT_SORT_KEYS)
        return len(PREFIX[kind]) + 1 + _b64_length(len(payload)) + 1 + _b64_length(MAC_BYTES)

    def verify(self, kind: str, token: str) -> dict[str, Any]:
        found = self._verified.get((kind, token))
        if found is not None:
            return dict(found)
        claims = self._verify(kind, token)
        if len(self._verified) >= VERIFIED_LIMIT:
            self._verified.clear()
        self._verified[(kind, token)] = claims
        return dict(claims)

    def _verify(self, kind: str, token: str) -> dict[str, Any]:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != PREFIX[kind]:
            raise TokenError(f"not a knowledge {kind}")
        prefix, payload, mac = parts
        if not hmac.compare_digest(mac, self._mac(prefix, payload)):
            raise TokenError(f"the {kind} signature does not match")
        try:
            claims = orjson.loads(_unb64(payload))
        except (ValueError, UnicodeDecodeError) as exc:
            raise TokenError(f"the {kind} payload is unreadable") from exc
        if not isinstance(claims, dict):
            raise TokenError(f"the {kind} payload is not an object")
        return claims


@lru_cache(maxsize=4096)
def digest(text: str) -> str:
    """A short digest tying a cursor to the reference it continues (remembered: a page signs two
    cursors of one reference, and a chain's pages all continue one)."""
    return _b64(hashlib.sha256(text.encode()).digest()[:9])
