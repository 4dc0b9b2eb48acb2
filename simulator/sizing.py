"""Byte budgets of JSON messages: trim text on character boundaries to fit.

Encoding is orjson's (some ten times the standard library's speed; a page fit encodes its
candidate prefix at each step of a bisection). Its compact UTF-8 output is byte for byte the
standard library's ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` for the values
the simulator sends (strings, integers, booleans, null, lists, objects; the same escapes).
Whatever orjson refuses (a lone surrogate, an integer past 64 bits) takes the standard library's way.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

import orjson

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(body: Any) -> bytes:
    """The simulator's one wire encoding: compact, UTF-8, no ASCII escaping.

    A lone UTF-16 surrogate has no UTF-8 form; it is sent as its JSON escape, as
    JavaScript's ``JSON.stringify`` does. The clean Core never holds one (requests
    carrying one are refused), but a miniature may put one on the wire."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        pass
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def has_lone_surrogate(body: Any) -> bool:
    """Whether any string of ``body`` (keys included) holds an unpaired surrogate."""
    try:
        orjson.dumps(body)  # refuses every string that is not valid UTF-8: a lone surrogate is the one way
        return False
    except orjson.JSONEncodeError:
        return bool(_LONE_SURROGATE.search(json.dumps(body, ensure_ascii=False)))


def escaped_size(text: str) -> int:
    """UTF-8 bytes ``text`` takes inside a JSON string, quotes excluded."""
    try:
        return len(orjson.dumps(text)) - 2
    except orjson.JSONEncodeError:  # a lone surrogate: as the standard library counts (and fails) it
        return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


def fit_prefix(text: str, budget: int, *, raw_budget: int | None = None) -> int:
    """Largest character count whose JSON-escaped prefix fits ``budget`` bytes.

    ``raw_budget`` additionally bounds the prefix's plain UTF-8 size (the read
    chain budget counts content bytes, not escaped bytes). Characters are code
    points, so a prefix never splits one. The search is the standard library's bisection:
    a hand-written loop is one off-by-one from never ending.
    """
    if budget <= 0:
        return 0

    def too_long(count: int) -> bool:
        chunk = text[:count]
        return escaped_size(chunk) > budget or (raw_budget is not None and len(chunk.encode("utf-8")) > raw_budget)

    if len(text) <= budget and not too_long(len(text)):
        return len(text)  # what the bisection finds when the whole text fits, with one encoding instead of a dozen
    # The first count that does not fit, less one; the empty prefix always fits.
    return bisect.bisect_left(range(min(len(text), budget) + 1), True, key=too_long) - 1


def trim(text: str, budget: int, *, ellipsis: str = "…") -> str:
    """``text`` cut to fit ``budget`` escaped bytes, marked with an ellipsis when cut."""
    if escaped_size(text) <= budget:
        return text
    keep = fit_prefix(text, budget - escaped_size(ellipsis))
    return text[:keep] + ellipsis
