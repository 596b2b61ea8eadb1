"""PID 1 of an xdist worker's own PID namespace: ``nsinit.py ARGS`` runs ``python ARGS`` (the worker) as its child.

tests/conftest.py starts each worker under ``unshare --pid --fork --mount-proc`` with this file first, so a worker's
live snapshot sees only its own processes, never the stand-in servers another worker starts and ends. The worker
cannot be PID 1 itself: PID 1 gets only the signals it has a handler for, and every process orphaned in the namespace
(a daemon a test starts, a server's child) becomes its child, a zombie until PID 1 waits for it. So this process
forwards SIGTERM sent to it to the worker, reaps every child, and exits with the worker's status; the worker keeps
the stdin, stdout and stderr it was given (execnet's channel). SIGINT and SIGHUP come from the terminal to the whole
process group, the worker included: this process ignores them (forwarding them would deliver each twice) and the
worker gets them with their default disposition. When it exits the kernel ends the namespace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

FORWARDED = (signal.SIGTERM,)
#: Signals the terminal sends to the process group: the worker gets them itself.
GROUP = (signal.SIGINT, signal.SIGHUP)


def main(args: list[str]) -> int:
    worker: list[int] = []  # its PID, once spawned
    done: list[int] = []  # its PID, once waited for (then no longer its own)

    def forward(signum: int, _frame: object) -> None:
        if not worker:  # not started yet: the signal was meant for it
            sys.exit(128 + signum)
        if not done:  # not yet waited for, so the PID is still the worker's
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker[0], signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    for signum in GROUP:
        signal.signal(signum, signal.SIG_IGN)
    # the worker gets the default dispositions: SIGPIPE as a child of subprocess (Python ignores it in this
    # process), SIGINT and SIGHUP (ignored here, and an ignored signal stays ignored across exec)
    worker.append(os.posix_spawn(sys.executable, [sys.executable, *args], os.environ,
                                 setsigdef=(signal.SIGPIPE, *GROUP)))
    while True:
        pid, status = os.waitpid(-1, 0)  # any child: the worker or an orphan
        if pid == worker[0]:
            done.append(pid)
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
