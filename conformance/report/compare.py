"""What changed between two results.json files: new failures, fixes, other moves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from conformance.common.untrusted import shown
from knowledge_schemas import load_registry

MAX_BYTES = 32 << 20
"""A results.json of a full run with every rule failing is a few MiB; a larger file is not one."""
MAX_DEPTH = 64
"""The suite writes a few levels (its server text is kept as strings); deeper is not its file."""
MAX_ERRORS = 100  # schema violations read before naming the first: a huge wrong file stays quick


class ResultsFileError(ValueError):
    """A file ``compare`` cannot read as a results.json: one line, naming the file and the problem,
    whatever the file holds (what it quotes is shown as escapes, its secrets masked)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(shown(f"{path}: {problem}").replace("\n", "\\n"))


def load(path: str) -> dict[str, Any]:
    """A results.json that validates against schemas/results.schema.json, or a ResultsFileError:
    a malformed baseline must be a usage error (exit 4), never read as a regression (exit 1)."""
    data = _parse(path, _read(path))
    _check_depth(path, data)
    _check_schema(path, data)
    assert isinstance(data, dict)  # the schema says so
    return data


def _read(path: str) -> str:
    """The file's text, read no further than MAX_BYTES (it may be a device or endless)."""
    file = Path(path)
    if not file.is_file():
        raise ResultsFileError(path, "no such file")
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ResultsFileError(path, f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_BYTES:
        raise ResultsFileError(path, f"larger than {MAX_BYTES >> 20} MiB, not a results.json of this suite")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(path, f"not JSON (not UTF-8 text at byte {exc.start})") from None


def _parse(path: str, text: str) -> Any:
    """Strict JSON: no NaN or Infinity, no key twice (which one would count?), not too deep."""
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ResultsFileError(path, f"not a results.json of this suite (nested deeper than {MAX_DEPTH})") from None
    except ValueError as exc:
        raise ResultsFileError(path, f"not JSON ({shown(exc, 200)})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {shown(key, 64)!r} appears twice in one object")
        seen.add(key)
    raise AssertionError("unreachable: fewer keys than pairs means one repeats")


def _depths(data: Any) -> Iterator[int]:
    """The depth of every value, without recursion, and no deeper than MAX_DEPTH + 1."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        yield depth
        if depth > MAX_DEPTH:
            continue
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack += [(child, depth + 1) for child in children]


def _check_depth(path: str, data: Any) -> None:
    """Schema validation recurses, so a file within ``json``'s depth may still overflow it."""
    if any(depth > MAX_DEPTH for depth in _depths(data)):
        raise ResultsFileError(path, f"not a results.json of this suite (nested deeper than {MAX_DEPTH})")


def _check_schema(path: str, data: Any) -> None:
    validator = load_registry().validator("results")
    found = islice(validator.iter_errors(data), MAX_ERRORS + 1)
    errors = sorted(found, key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        where = "/" + "/".join(str(p) for p in errors[0].absolute_path)
        first = " ".join(f"{where[:300]}: {errors[0].message[:300]}".split())  # both quote the file: cut first
        more = f" (and {len(errors) - 1}{'+' if len(errors) > MAX_ERRORS else ''} more)" if len(errors) > 1 else ""
        raise ResultsFileError(path, f"not a results.json of this suite ({shown(first, 200)}{more})")


REGRESSIONS = ("new_failures", "coverage_lost")
"""What ``--fail-on-new-failures`` gates on: a rule that now fails, or one that was
judged before and is not any more (failed or verified -> not verified is not a fix)."""


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    before = {r["id"]: r["status"] for r in old["requirements"]}
    after = {r["id"]: r["status"] for r in new["requirements"]}
    out: dict[str, list[str]] = {"new_failures": [], "coverage_lost": [], "fixed": [], "changed": []}
    for rid in sorted(set(before) | set(after)):
        was, status = before.get(rid, "absent"), after.get(rid, "absent")
        if was == status:
            continue
        row = f"{rid}: {was} -> {status}"
        if status == "failed":
            out["new_failures"].append(row)
        elif status in ("not_verified", "absent") and was in ("failed", "verified", "waived"):
            out["coverage_lost"].append(row)
        elif was == "failed" and status in ("verified", "waived"):
            out["fixed"].append(row)
        else:
            out["changed"].append(row)
    return out


def regressed(diff: dict[str, list[str]]) -> bool:
    return any(diff[key] for key in REGRESSIONS)


def stale(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The rules the baseline holds as failed (or waived) that the new run verified: a baseline left
    so would let each of them break again unseen (failed -> failed is no change), so the gate asks
    for the new results.json to become the baseline."""
    before = {r["id"]: r["status"] for r in old["requirements"]}
    return sorted(
        r["id"]
        for r in new["requirements"]
        if r["status"] == "verified" and before.get(r["id"]) in ("failed", "waived")
    )


def stale_line(ids: list[str], old_path: str, new_path: str) -> str:
    """The one line a stale baseline fails the gate with."""
    return (
        f"stale baseline: {', '.join(ids)} failed in {old_path} and {'is' if len(ids) == 1 else 'are'} verified now; "
        f"store {new_path} as the baseline (or pass --allow-fixed)"
    )


def render(diff: dict[str, list[str]], old: dict[str, Any], new: dict[str, Any]) -> str:
    lines = [f"verdict: {old.get('verdict')} -> {new.get('verdict')}"]
    for key, title in (
        ("new_failures", "New failures"),
        ("coverage_lost", "Coverage lost (no longer verified)"),
        ("fixed", "Fixed"),
        ("changed", "Other changes"),
    ):
        lines.append(f"{title} ({len(diff[key])}):")
        lines += [f"  {row}" for row in diff[key]] or ["  none"]
    return "\n".join(lines)
