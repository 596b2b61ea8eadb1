"""PID 1 of an xdist worker's own PID namespace: ``nsinit.py ARGS`` runs ``python ARGS`` (the worker) as its child.

tests/conftest.py starts each worker under ``unshare --pid --fork --mount-proc`` with this file first, so a worker's
live snapshot sees only its own processes, never the stand-in servers another worker starts and ends. The worker
cannot be PID 1 itself: PID 1 gets only the signals it has a handler for, and every process orphaned in the namespace
(a daemon a test starts, a server's child) becomes its child, a zombie until PID 1 waits for it. So this process
forwards SIGTERM, SIGINT and SIGHUP to the worker, reaps every child, and exits with the worker's status; the worker
keeps the stdin, stdout and stderr it was given (execnet's channel). When it exits the kernel ends the namespace.
"""

from __future__ import annotations

import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(args: list[str]) -> int:
    worker: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not worker:  # not started yet: the signal was meant for it
            sys.exit(128 + signum)
        os.kill(worker[0], signum)  # still our child until waited for: it exists

    for signum in FORWARDED:
        signal.signal(signum, forward)
    # SIGPIPE back to the default, as a child of subprocess gets it (Python ignores it in this process)
    worker.append(os.posix_spawn(sys.executable, [sys.executable, *args], os.environ, setsigdef=(signal.SIGPIPE,)))
    while True:
        pid, status = os.waitpid(-1, 0)  # any child: the worker or an orphan
        if pid == worker[0]:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
