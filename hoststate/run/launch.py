"""Launching the guarded command: the shell's exit statuses, signals forwarded, never orphaned (design.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from hoststate.errors import InputError

#: Signals sent to guard that it passes on to its command (design.md: guard never orphans its command).
FORWARDED: tuple[signal.Signals, ...] = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM,
)

#: Signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\\, hang-up).
TERMINAL_SIGNALS: frozenset[int] = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGHUP})

#: siginfo's si_code for a signal the kernel itself sent (a terminal's, a timer's); Linux's SI_KERNEL.
SI_KERNEL = 0x80

#: Signals Python itself ignores at start-up; the command starts with them at their defaults, as the shell's would.
_PYTHON_IGNORED: frozenset[int] = frozenset(
    s for s in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if s is not None
)


def _from_terminal(signum: int, code: int) -> bool:
    """True for a signal the terminal sent to the whole foreground process group, the command included:
    forwarding it would deliver it twice (a second Ctrl-C makes many benchmarks abort instead of stopping
    cleanly). A hang-up sent to guard as a session leader reached guard alone."""
    if signum not in TERMINAL_SIGNALS or code != SI_KERNEL:
        return False
    return not (signum == signal.SIGHUP and os.getsid(0) == os.getpid())


def _spawn_error(argv0: str, err: OSError) -> int:
    """The shell's status and one line for a command that could not be started."""
    from hoststate.redact import redact_argv

    name = redact_argv([argv0])[0]
    if isinstance(err, FileNotFoundError):
        print(f"hoststate: {name}: command not found", file=sys.stderr)
        return 127
    if isinstance(err, PermissionError):
        print(f"hoststate: {name}: permission denied", file=sys.stderr)
        return 126
    print(f"hoststate: {name}: cannot execute: {err.strerror or err}", file=sys.stderr)
    return 126


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run_command(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` as guard's own command would be run by the shell, and return its exit status.

    The command inherits stdin, stdout, stderr, the terminal, the process group, the signal mask, the
    environment given (os.environ by default, never redacted) and every inheritable file descriptor. While it
    runs, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM sent to guard are forwarded to it and
    guard keeps waiting, so the command is never orphaned by a signal guard can catch. A Ctrl-C, Ctrl-\\ or
    hang-up from the terminal already reached the command (same foreground process group) and is not sent
    twice. A signal ignored when guard started stays ignored, for the command too (``nohup``).

    A command killed by signal N gives 128 + N; a command that cannot be found gives 127, one that cannot be
    executed 126 (one line on stderr), as in the shell.
    """
    if not argv:
        raise InputError("no command given after '--'")
    full_env = dict(os.environ if env is None else env)
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread receives process signals reliably: a harness thread gets plain inheritance.
        try:
            proc = subprocess.Popen(list(argv), close_fds=False, env=full_env)
        except OSError as err:
            return _spawn_error(argv[0], err)
        return _status(proc.wait())

    caller_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handled = [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN and s not in caller_mask]
    waited = {*handled, signal.SIGCHLD}
    child: list[int] = []

    def stray(signum: int, _frame: Any) -> None:
        """A forwardable signal the kernel gave to another thread (one a timed-out collector left behind):
        its origin is unknown, so it is forwarded."""
        if child:
            with contextlib.suppress(OSError):
                os.kill(child[0], signum)

    signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # first: a signal from now on waits for the loop below
    saved = {s: signal.signal(s, stray) for s in handled}
    try:
        try:
            # The command starts with the caller's signal mask (not the one guard waits with) and with the
            # signals guard catches at their defaults (exec resets caught signals).
            pid = os.posix_spawnp(argv[0], list(argv), full_env, setsigmask=caller_mask,
                                  setsigdef=_PYTHON_IGNORED)
        except OSError as err:
            return _spawn_error(argv[0], err)
        child.append(pid)
        return _status(_wait_forwarding(pid, waited))
    finally:
        child.clear()  # reaped: its pid may be reused, so nothing is sent to it any more
        while signal.sigtimedwait(waited, 0) is not None:
            pass  # arrived after the command ended: nothing left to forward them to
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def _wait_forwarding(pid: int, waited: set[int]) -> int:
    """Wait for ``pid``, forwarding every signal of ``waited`` but SIGCHLD; its returncode as subprocess gives it."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        # The timeout only bounds how late a stray signal's handler runs; a signal or SIGCHLD wakes this at once.
        info = signal.sigtimedwait(waited, 1.0)
        if info is None or info.si_signo == signal.SIGCHLD or _from_terminal(info.si_signo, info.si_code):
            continue
        with contextlib.suppress(ProcessLookupError):  # it has just exited: waitpid reports it next
            os.kill(pid, info.si_signo)
