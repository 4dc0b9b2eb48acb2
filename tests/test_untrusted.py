"""A target's text on the console and in a usage line: controls and CI commands defanged, one line,
cut; secrets masked in the spellings a hostile Core echoes; a token HTTP cannot carry is exit 4."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

from conformance.common.secrets import MASK, Scrubber
from conformance.common.untrusted import ONE_LINE, defang, one_line


def test_a_usage_line_is_one_line_cut_and_defanged() -> None:
    line = one_line("bad\n::error::x\r\x1b[2J" + "y" * 5000)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert len(line) < ONE_LINE + 40 and line.endswith("more characters cut]")
    assert "\\n\\x3a:error" in line


def test_defang_breaks_every_ci_prefix_and_keeps_plain_text() -> None:
    assert defang("  ::add-mask::x\n##vso[task]\nplain: text") == "  \\x3a:add-mask::x\n\\x23#vso[task]\nplain: text"


def test_secrets_are_masked_reversed_cased_as_utf16_hex_and_as_percent_encoded_base64() -> None:
    token = "s3cr3tT0kenABCDEFGHIJKLMNOP1234"
    scrubber = Scrubber()
    scrubber.add(token)
    b64 = base64.b64encode(token.encode()).decode()
    for form in (
        token[::-1],
        token.upper(),
        token.encode("utf-16-le").hex().upper(),
        "".join(f"%{b:02x}" for b in b64.encode()),
        "".join(f"\\u{ord(c):04x}" for c in token),
    ):
        clean = scrubber.text(f"<{form}>")
        # what is left is the brackets and at most an encoded padding ("A==": its bits carry no secret)
        assert MASK in clean and len(clean.replace(MASK, "")) <= 2 + 9, (form, clean)


def test_a_token_http_cannot_carry_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "target.toml"
    config.write_text('[target]\nurl = "http://127.0.0.1:9"\n[identities.primary]\ntoken = {env = "KC_T"}\n', "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--target-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KC_T": "s3cr3tT0kenABCDéFGHIJKLMNOP1234"},
    )
    assert done.returncode == 4, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
