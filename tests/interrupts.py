"""For tests that interrupt a suite run with SIGINT (Ctrl-C)."""

import signal


def interruptible() -> None:
    """Run in the child before exec: SIGINT back to its default disposition. A child inherits an
    ignored SIGINT (a worker process may have one), and Python then installs no KeyboardInterrupt
    for it, so the Ctrl-C the test sends would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
