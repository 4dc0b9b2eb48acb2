"""Debian's chromium as the project's tests run it: headless-ready, offline (no background
connections a closed network would refuse), on a fresh profile the caller gives."""

from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
OFFLINE_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
