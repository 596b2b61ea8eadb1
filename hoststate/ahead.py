"""The GPU section collected ahead, in a child forked as the command starts, while the parent imports click and
the command, parses the options and runs the other collectors.

Reading the GPUs is the longest part of a snapshot on a GPU host, and most of it is Python (pynvml's import,
the collector's code) plus NVML's first calls into the driver (docs/performance.md). Threads share one
interpreter lock, so the GPU collector's thread waits for the parsing threads and they for it; a child forked
before any thread exists has an interpreter of its own and runs beside them on another core. The child runs the
very collector a thread would (hoststate.collectors._call on a plain snap's Context: the live host, no
``--vllm-pid``) and hands its Section back over a pipe only the two processes hold. The parent uses it only for
a context it was collected for (hoststate.capture's ``_early``); otherwise, or when the child failed, the
collector runs in the parent as before. A child that does not answer within the collector's timeout is killed
and the section is ``timeout``, as a wedged thread's is; a child also dies with its parent.

Whether to fork is decided from argv alone, and any doubt (``--root``, ``--vllm-pid``, ``--skip gpu``, an
``--only`` without it, ``--help``, no driver and no replay, a thread already running) means not forking, which
costs only the overlap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from hoststate.nvml import DRIVER_MARKERS, NVML_REPLAY_ENV  # data only: every command imports this module

#: The commands that read the live host's GPUs, and the collector read ahead.
COMMANDS = ("snap", "guard")
NAME = "gpu"
#: Options after which the GPU section would differ from a default Context's, or nothing is collected.
_NOT_AHEAD = ("--root", "--vllm-pid", "--help", "-h")

#: The child collecting ahead: its pid and the read end of its pipe.
_child: tuple[int, int] | None = None


def wanted(argv: Sequence[str], environ: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists) -> bool:
    """Whether the command line reads the GPUs of the live host (or a replay) with a default Context."""
    words = [a for a in argv if a != "--debug"]  # the one option before the command
    if not words or words[0] not in COMMANDS:
        return False
    args = list(words[1:words.index("--")] if "--" in words else words[1:])  # guard's command is not hoststate's
    for n, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ("--only", "--skip") and not eq:
            value = args[n + 1] if n + 1 < len(args) else ""
        if name in _NOT_AHEAD or (name == "--only" and NAME not in value.split(",")) or (
                name == "--skip" and NAME in value.split(",")):
            return False
    return bool(environ.get(NVML_REPLAY_ENV)) or any(exists(p) for p in DRIVER_MARKERS)


def start(work: Callable[[], object], argv: Sequence[str] | None = None) -> bool:
    """Fork the child that runs ``work`` (the GPU collector: hoststate.capture.gpu_section) when the command line
    will read the GPUs; whether it was forked."""
    global _child
    threading = sys.modules.get("threading")
    if _child is not None or not hasattr(os, "fork") or (threading is not None and threading.active_count() > 1):
        return False  # forking beside a running thread could copy a lock it holds
    if not wanted(sys.argv[1:] if argv is None else argv, os.environ):
        return False
    read, write = os.pipe()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return False
    if pid == 0:  # the child: collect, hand the section over, exit without the parent's exit handlers
        status = 1
        try:
            import pickle

            _end_with(parent)
            os.close(read)
            data = pickle.dumps(work())
            with open(write, "wb") as pipe:
                pipe.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    _child = (pid, read)
    import atexit

    atexit.register(discard)  # a command that never collected the GPUs (a usage error, guard --only system)
    return True


def _end_with(parent: int) -> None:
    """The child is killed when its parent dies (PR_SET_PDEATHSIG): a parent ended by a signal runs no exit
    handler, and a child must not outlive it waiting on a wedged driver."""
    import contextlib
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent's deadline still ends the child
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def discard() -> None:
    """End a child whose section was not taken (killed when still running), so that none outlives the
    collection: guard runs the benchmark after it."""
    global _child
    if _child is not None:
        pid, read = _child
        _child = None
        _end(pid, read, kill=True)


def take(deadline: float) -> tuple[str, object]:
    """What the child handed over: ``("ok", value)``; ``("timeout", None)`` when it did not finish by
    ``deadline`` (time.perf_counter; it is killed); ``("failed", None)`` when it died or wrote no value;
    ``("none", None)`` when no child was forked. The child is reaped either way."""
    global _child
    if _child is None:
        return "none", None
    import pickle

    pid, read = _child
    _child = None
    data = _read(read, deadline)
    _end(pid, read, kill=data is None)
    if data is None:
        return "timeout", None
    try:
        return "ok", pickle.loads(data)  # our own child's, over a pipe only the two of us hold
    except Exception:  # a child that died half-way
        return "failed", None


def _read(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; None at the deadline."""
    import select
    import time

    poll = select.poll()
    poll.register(fd, select.POLLIN)
    chunks = []
    while True:
        left = deadline - time.perf_counter()
        if left <= 0 or not poll.poll(left * 1000):
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _end(pid: int, fd: int, *, kill: bool) -> None:
    """Close the pipe and reap the child (killed first when it is not done)."""
    import contextlib
    import signal

    os.close(fd)
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
