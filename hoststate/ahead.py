"""The GPU section collected ahead, in a child forked as the command starts, while the parent imports click and
the command, parses the options and runs the other collectors.

Reading the GPUs is the longest part of a snapshot on a GPU host, and most of it is Python (pynvml's import,
the collector's code) plus NVML's first calls into the driver (docs/performance.md). Threads share one
interpreter lock, so the GPU collector's thread waits for the parsing threads and they for it; a child forked
before any thread exists has an interpreter of its own and runs beside them on another core. The child runs the
very collector a thread would (hoststate.collectors._call on a plain snap's Context: the live host, no
``--vllm-pid``) and hands its Section's fields back as plain values in ``marshal``'s format (built in, where
``pickle`` costs an import of about 6 ms on each side) over a pipe only the two processes hold. On a live host the
child starts NVML (nvmlInit: milliseconds in the driver, without the interpreter lock) in a thread before it
imports pynvml and the collector, and leaves the last nvmlShutdown to its exit, which a snap does not wait for (a
guard does, before it starts the benchmark: settle). The parent uses the section only for a context it was
collected for (hoststate.capture's ``_early``); otherwise, or when the child failed, the collector runs in the
parent as before. A child that does not answer within the collector's timeout is killed and the section is
``timeout``, as a wedged thread's is; a child also dies with its parent.

Whether to fork is decided from argv alone, and any doubt (``--root``, ``--vllm-pid``, ``--skip gpu``, an
``--only`` without it, ``--help``, no driver and no replay, a thread already running) means not forking, which
costs only the overlap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from hoststate.nvml import DRIVER_MARKERS, LIBRARY, NVML_REPLAY_ENV  # data only: every command imports this module

#: The commands that read the live host's GPUs, and the collector read ahead.
COMMANDS = ("snap", "guard")
NAME = "gpu"
#: Options after which the GPU section would differ from a default Context's, or nothing is collected.
_NOT_AHEAD = ("--root", "--vllm-pid", "--help", "-h")

#: The child collecting ahead: its pid and the read end of its pipe.
_child: tuple[int, int] | None = None


def _options(argv: Sequence[str]) -> list[str] | None:
    """The command's own options (guard's command after ``--`` is not hoststate's); None for another command."""
    words = [a for a in argv if a != "--debug"]  # the one option before the command
    if not words or words[0] not in COMMANDS:
        return None
    return list(words[1:words.index("--")] if "--" in words else words[1:])


def _values(args: list[str]) -> dict[str, str]:
    """The last value of each long option in ``args`` (``--name value`` or ``--name=value``), as click keeps it."""
    found: dict[str, str] = {}
    for n, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name.startswith("--") and not eq:
            value = args[n + 1] if n + 1 < len(args) else ""
        found[name] = value
    return found


def _csv(value: str) -> list[str]:
    """The names of a comma-separated option, each stripped as click's callback strips it."""
    return [v.strip() for v in value.split(",") if v.strip()]


def wanted(argv: Sequence[str], environ: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists) -> bool:
    """Whether the command line reads the GPUs of the live host (or a replay) with a default Context."""
    args = _options(argv)
    if args is None or any(a.partition("=")[0] in _NOT_AHEAD for a in args):
        return False
    values = _values(args)
    if NAME not in _csv(values.get("--only", NAME)) or NAME in _csv(values.get("--skip", "")):
        return False
    return bool(environ.get(NVML_REPLAY_ENV)) or any(exists(p) for p in DRIVER_MARKERS)


def start(work: Callable[[], object], argv: Sequence[str] | None = None) -> bool:
    """Fork the child that runs ``work`` (the GPU collector: hoststate.collectors.gpu_section) when the command line
    will read the GPUs; whether it was forked. ``work`` returns what ``marshal`` writes (dicts, lists, strings,
    numbers); a value it cannot write fails the child, and the parent collects the GPUs itself."""
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
            import marshal

            _end_with(parent)
            os.close(read)
            data = marshal.dumps(work())
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


def ours() -> set[int]:
    """The pids of this command's processes: this one and its child collecting ahead, running or exiting. The
    child shares the command line (``hoststate guard -- vllm serve M`` names vLLM), and neither is a server the
    snapshot describes (hoststate.collectors.vllm.discovery)."""
    return {os.getpid(), *(c[0] for c in (_child, _exiting) if c is not None)}


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


def pending() -> bool:
    """Whether a child is collecting the GPUs ahead and its section has not been taken: the collection then has a
    wait (NVML's) that other work can fill."""
    return _child is not None


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
    import marshal

    pid, read = _child
    _child = None
    data = _read(read, deadline)
    value, state = None, "timeout" if data is None else "ok"
    if data is not None:
        try:
            value = marshal.loads(data)  # our own child's, over a pipe only the two of us hold
        except Exception:  # a child that died half-way
            state = "failed"
    _end(pid, read, kill=state != "ok")
    return state, value


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
    """Close the pipe and reap the child: one killed first when it is not done; one that answered by a thread when
    it is still exiting (the driver closes its NVML handles then: the answer is in, and a snap need not wait for
    that; a guard waits before it starts the benchmark, see settle)."""
    global _exiting
    import contextlib
    import signal

    os.close(fd)
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        return
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
    except ChildProcessError:  # reaped already
        return
    import threading

    reaper = threading.Thread(target=_reap, args=(pid,), name="reap-gpu-child", daemon=True)
    try:
        reaper.start()
    except RuntimeError:  # no thread to be had (a cgroup's pids.max): wait here
        _reap(pid)
        return
    _exiting = (pid, reaper.join, reaper.is_alive)


#: A child that answered and is still exiting, with the join and is_alive of the thread that reaps it (settle).
_exiting: tuple[int, Callable[[float], None], Callable[[], bool]] | None = None


def _reap(pid: int) -> None:
    """Wait for the child's exit (one already reaped is no error)."""
    import contextlib

    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def settle(timeout: float) -> None:
    """Wait until a child that answered has exited, at most ``timeout`` seconds, then kill it: a guard calls this
    before it starts the benchmark, so that no child of the collection runs beside it (using a core, closing
    NVML handles, counted among the guard's descendants by the watch)."""
    global _exiting
    if _exiting is None:
        return
    import contextlib
    import signal

    pid, join, is_alive = _exiting
    _exiting = None
    join(timeout)
    if is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        join(timeout)


def _library():  # a ctypes.CDLL, unannotated: naming its type would import typing or ctypes in every command
    """NVML's library as pynvml loads it (``CDLL``: each call releases the interpreter lock)."""
    import ctypes

    return ctypes.CDLL(LIBRARY)


def start_nvml(environ: Mapping[str, str] = os.environ) -> object | None:
    """In the child, first: NVML's library loaded and ``nvmlInitWithFlags(0)`` called in a thread, through ctypes
    rather than pynvml, so that the driver's start (about 12 ms on an H100) overlaps the import of pynvml (about
    25 ms: it imports ctypes.util, and with it shutil, subprocess and tempfile) as well as the collector's. The
    collector's own nvmlInit, through pynvml, gets the same library (dlopen hands back the one loaded), waits for
    this call if it is still running and counts one more user; its nvmlShutdown leaves NVML to the child's exit.
    Nothing under a replay. Returns the thread (or None); a failure is left to the collector's own nvmlInit to
    report."""
    if environ.get(NVML_REPLAY_ENV):
        return None
    import threading

    def begin() -> None:
        import contextlib

        with contextlib.suppress(Exception):  # no library, no driver: the collector's own call reports it
            _library().nvmlInitWithFlags(0)

    thread = threading.Thread(target=begin, name="nvml-init", daemon=True)
    thread.start()
    return thread
