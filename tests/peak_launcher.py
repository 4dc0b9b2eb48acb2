"""Runs a command as its only child and writes the child's peak resident size (KiB) to a file.

Why a launcher: Linux counts the memory a process had before ``exec`` in the ``ru_maxrss`` of
what it became, so a command spawned straight from a pytest worker that has grown to 600 MB
reports at least 600 MB whatever it used. Spawned from this small process, it reports its own.
Usage: ``python -S peak_launcher.py PEAK_FILE COMMAND...``; the exit status is the command's."""

import os
import signal
import sys


def main() -> None:
    peak_file, command = sys.argv[1], sys.argv[2:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    with open(peak_file, "w", encoding="ascii") as out:
        out.write(str(usage.ru_maxrss))
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
