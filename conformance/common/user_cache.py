"""The folder of the user's cache this package keeps what it computes once a machine in:
``$XDG_CACHE_HOME`` (else ``~/.cache``) ``/knowledge-conformance/<name>``. It is the user's own,
never a folder others share (as the temporary directory is), so nothing in it is planted."""

from __future__ import annotations

import os
from pathlib import Path


def folder(name: str, environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """Where ``name`` is kept; None where there is no home to put it in."""
    base = Path(environ.get("XDG_CACHE_HOME") or "")
    if not base.is_absolute():  # unset, empty or relative: the XDG spec says to ignore it
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no home directory to resolve
            return None
    if not base.is_absolute():  # HOME empty: never a folder inside the run's own
        return None
    return base / "knowledge-conformance" / name
