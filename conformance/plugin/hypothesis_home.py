"""Where Hypothesis keeps what it computes once (its Unicode tables, the constants it reads from
source files): a folder in the user's cache, not ``.hypothesis`` in whatever folder the suite runs in.

Why: the suite's generated requests draw UTF-8 strings, and Hypothesis builds the table of what
UTF-8 can encode the first time a process needs it, some 1.9 CPU seconds, then saves it in its
folder. A run in a fresh folder (a CI checkout, a temporary directory) built it again every time,
in every worker: a sixth of a default run. The suite's runs use no example database (every
``settings`` passes ``database=None``), so nothing kept there changes what a run checks. A
``HYPOTHESIS_STORAGE_DIRECTORY`` the user set is left as it is."""

from __future__ import annotations

import os
from pathlib import Path

STORAGE_ENV = "HYPOTHESIS_STORAGE_DIRECTORY"


def cache_folder(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """``$XDG_CACHE_HOME`` (else ``~/.cache``) ``/knowledge-conformance/hypothesis``; None where the
    user named Hypothesis' folder, or there is no home to put it in."""
    if environ.get(STORAGE_ENV):
        return None
    base = Path(environ.get("XDG_CACHE_HOME") or "")
    if not base.is_absolute():  # unset, empty or relative: the XDG spec says to ignore it
        if environ.get("HOME") == "":  # Python takes an empty HOME for "/": no home at all
            return None
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no home directory to resolve
            return None
    if not base.is_absolute():  # HOME empty: never a folder inside the run's own
        return None
    return base / "knowledge-conformance" / "hypothesis"


def keep_in_user_cache() -> None:
    """Point Hypothesis at :func:`cache_folder` (before any strategy is drawn)."""
    folder = cache_folder()
    if folder is None:
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(folder)
