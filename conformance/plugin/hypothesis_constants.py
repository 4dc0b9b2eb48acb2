"""Generated cases that do not depend on which of this machine's modules happen to be imported.

Why: Hypothesis (6.131 and later) draws, now and then, a constant found in the source of the
"local" modules a process has imported: any module outside the standard library and
site-packages. For the suite that is its own modules in a source checkout or an editable install,
and none in a wheel install; and within a run it is whatever earlier tests of the same process
happened to import (the MCP client, the simulator). So a derandomized test drew other cases in
another install, or in a worker of ``--concurrency`` that ran other tests before it (200
derandomized draws of text and integers: 7 differed once one more local module was imported).
``results.json`` promises that the same suite version and target replay the same cases, and a
concurrent run the verdict of a serial one. A suite session therefore draws from Hypothesis'
own constants only; outside a session (the project's own tests) nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable


def without_local_constants() -> Callable[[], None]:
    """Make this process's Hypothesis draw no local constant; returns what undoes that. Where the
    installed Hypothesis has no such constants (before 6.131) there is nothing to do."""
    from hypothesis.internal.conjecture import providers

    found = getattr(providers, "_get_local_constants", None)
    if found is None:
        return lambda: None
    from hypothesis.internal.constants_ast import Constants

    none = Constants()

    def no_local_constants() -> Constants:
        return none

    providers._get_local_constants = no_local_constants
    providers.CONSTANTS_CACHE.cache.clear()  # pools cut with local constants already in them

    def undo() -> None:
        providers._get_local_constants = found
        providers.CONSTANTS_CACHE.cache.clear()

    return undo
