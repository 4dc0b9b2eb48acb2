"""A Core whose Content-Length counts UTF-16 code units (bodies with multibyte characters cut
short, the rest spilling into the next answer on a kept-alive connection) fails the rules its
cut answers break and ends NON-CONFORMANT, with no harness error: the answer that reads the
spilled bytes is read again on a new connection, and judged as its own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conformance.common.served import ServedSimulator
from tests.framing_proxy import Utf16FramingProxy, utf16_units
from tests.suite_command import warm_suite


def test_utf16_units_undercount_multibyte_bodies() -> None:
    assert utf16_units("aé€😀".encode()) == 5 and len("aé€😀".encode()) == 10


def test_a_core_that_frames_in_utf16_units_is_non_conformant_without_harness_errors(tmp_path: Path) -> None:
    with ServedSimulator(frozen_clock=True) as sim:
        port = int(sim.url.rsplit(":", 1)[1])
        with Utf16FramingProxy(port) as proxy:
            config = tmp_path / "target.toml"
            config.write_text(f'[control]\nurl = "{sim.url}/_control/v1"\ntoken = {{env = "KC_CONTROL"}}\n', "utf-8")
            reports = tmp_path / "reports"
            done = subprocess.run(
                [*warm_suite(), "--target", proxy.url, "--target-config", str(config), "--reports", str(reports)],
                capture_output=True,
                text=True,
                timeout=900,
                env={**os.environ, "KC_CONTROL": sim.control_token},
                check=False,
            )
    results = json.loads((reports / "results.json").read_text("utf-8"))
    errors = [t["message"][:200] for t in results["tests"] if t["outcome"] == "error"]
    failed = sorted(r["id"] for r in results["requirements"] if r["status"] == "failed")
    assert errors == [], errors[:5]
    assert done.returncode == 1 and results["verdict"] == "non-conformant" and failed, (done.returncode, failed)
