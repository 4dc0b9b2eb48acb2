"""What changed between two results.json files: new failures, fixes, other moves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.target.secrets import clip
from knowledge_schemas import load_registry


def load(path: str) -> dict[str, Any]:
    """A results.json that validates against schemas/results.schema.json, or a ValueError in one line."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        data = json.loads(file.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    errors = load_registry().errors("results", data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValueError(f"{path}: not a results.json of this suite ({clip(' '.join(errors[0].split()), 200)}{more})")
    assert isinstance(data, dict)  # the schema says so
    return data


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
