"""What changed between two results.json files: new failures, fixes, other moves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    data = json.loads(file.read_text("utf-8"))
    if "requirements" not in data:
        raise ValueError(f"{path}: not a results.json of this suite")
    return dict(data)


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    before = {r["id"]: r["status"] for r in old["requirements"]}
    after = {r["id"]: r["status"] for r in new["requirements"]}
    out: dict[str, list[str]] = {"new_failures": [], "fixed": [], "changed": []}
    for rid, status in after.items():
        was = before.get(rid, "absent")
        if was == status:
            continue
        if status == "failed":
            out["new_failures"].append(f"{rid}: {was} -> failed")
        elif was == "failed":
            out["fixed"].append(f"{rid}: failed -> {status}")
        else:
            out["changed"].append(f"{rid}: {was} -> {status}")
    return out


def render(diff: dict[str, list[str]], old: dict[str, Any], new: dict[str, Any]) -> str:
    lines = [f"verdict: {old.get('verdict')} -> {new.get('verdict')}"]
    for key, title in (("new_failures", "New failures"), ("fixed", "Fixed"), ("changed", "Other changes")):
        lines.append(f"{title} ({len(diff[key])}):")
        lines += [f"  {row}" for row in diff[key]] or ["  none"]
    return "\n".join(lines)
