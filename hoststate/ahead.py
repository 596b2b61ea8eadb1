"""Sections collected ahead, in children forked as the command starts, while the parent imports click and the
command and parses the options.

A fresh ``hoststate`` process spends about half of a snap before its first read: the interpreter, click (about
40 ms on the project's VM), the command's modules (docs/performance.md). None of the collection depends on them.
Two children run beside that import on cores of their own:

- ``snapshot`` (WHOLE): every selected collector, each section redacted, and the digest, as
  hoststate.capture.collect builds them (hoststate.capture.collected_ahead). Forked for ``snap`` and ``guard``
  when argv gives the collectors a plain Context: the live host, no ``--vllm-*`` source, ``--only``, ``--skip``
  and ``--timeout`` as far as argv tells them (``planned``). The parent takes it only when the Context it parsed
  is the one the child collected for, so a misread argv costs the overlap, never a wrong snapshot.
- ``gpu`` (NAME): the GPU section alone. Reading the GPUs is the longest part of a snapshot on a GPU host, most
  of it pynvml's import, the collector's Python and NVML's first calls into the driver; a child of its own runs
  it beside the other collectors instead of under their interpreter lock. The snapshot child forks it as it
  starts; where no snapshot child is forked (a ``--vllm-*`` source) the command's process does.

Each child hands its value back in ``marshal``'s format (built in, where ``pickle`` costs an import of about
6 ms on each side) over a pipe only the two processes hold. A child that does not answer by its deadline is
killed, one that fails leaves the work to the parent, and a child dies with its parent. On a live host the GPU
child starts NVML (nvmlInit: milliseconds in the driver, without the interpreter lock) in a thread before it
imports the collector, and leaves the last nvmlShutdown to its exit, which a snap does not wait for (a guard
does, before it starts the benchmark: settle; the snapshot child waits for its GPU child's exit before its own).

Whether to fork is decided from argv alone, and any doubt (``--root``, ``--vllm-pid``, ``--help``, a selection
without the GPUs for the GPU child, no driver and no replay, a thread already running) means not forking, which
costs only the overlap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from hoststate.nvml import DRIVER_MARKERS, NVML_REPLAY_ENV  # data only: every command imports this module

#: The commands that snap the live host, and the collector read by a child of its own.
COMMANDS = ("snap", "guard")
NAME = "gpu"
#: The child that collects the whole snapshot.
WHOLE = "snapshot"
#: Options after which the GPU section would differ from a default Context's, or nothing is collected.
_NOT_AHEAD = ("--root", "--vllm-pid", "--help", "-h")
#: Options after which another section would differ from a default Context's (the vLLM server's sources).
_NOT_WHOLE = (*_NOT_AHEAD, "--vllm-cmd", "--vllm-log", "--vllm-url", "--vllm-version")
#: Seconds a child waits for a GPU child's exit before its own (see settle), when argv names no --timeout.
SETTLE = 20.0
#: The CPUs this process may run on, at least, for the snapshot child: it, the parent's imports and the GPU child
#: each need one. On the project's 2-core VM the child took no time off a snap and added a third to its CPU time
#: (docs/performance.md, "The whole snapshot collected ahead").
WHOLE_CORES = 4

#: The children collecting ahead, by what they collect: pid and the read end of the pipe.
_children: dict[str, tuple[int, int]] = {}
#: What the snapshot child was forked to collect (``planned``), while it runs.
_plan: tuple[list[str] | None, list[str] | None, float] | None = None
#: In a child: the write end of the pipe it answers on, which a child it forks must not hold open (the parent
#: reads until every write end is closed).
_answer: int | None = None
#: In a child: the pids of the processes it was forked from, this command's parent first.
_lineage: list[int] = []


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


def _csv(value: str) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] or None


def planned(argv: Sequence[str]) -> tuple[list[str] | None, list[str] | None, float] | None:
    """``(only, skip, timeout)`` as argv gives them to a snap of the whole host with a default Context; None when
    the command is not a snap or guard, names a source other than the live host's, or an option cannot be read."""
    args = _options(argv)
    if args is None or any(a.partition("=")[0] in _NOT_WHOLE for a in args):
        return None
    values = _values(args)
    try:
        timeout = float(values.get("--timeout", "20"))
    except ValueError:
        return None
    only = _csv(values["--only"]) if "--only" in values else None
    skip = _csv(values["--skip"]) if "--skip" in values else None
    return only, skip, timeout


def wanted(argv: Sequence[str], environ: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists) -> bool:
    """Whether the command line reads the GPUs of the live host (or a replay) with a default Context."""
    args = _options(argv)
    if args is None or any(a.partition("=")[0] in _NOT_AHEAD for a in args):
        return False
    values = _values(args)
    if NAME not in (_csv(values.get("--only", NAME)) or ()) or NAME in (_csv(values.get("--skip", "")) or ()):
        return False
    return bool(environ.get(NVML_REPLAY_ENV)) or any(exists(p) for p in DRIVER_MARKERS)


def cores() -> int:
    """The CPUs this process may run on (its affinity, as a cgroup's cpuset or taskset leaves it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def start(work: Callable[[], object], argv: Sequence[str] | None = None, what: str = NAME) -> bool:
    """Fork the child that runs ``work`` when the command line wants it (``wanted`` for the GPU child, ``planned``
    and WHOLE_CORES for the snapshot's); whether it was forked. ``work`` returns what ``marshal`` writes (dicts,
    lists, strings, numbers); a value it cannot write fails the child, and the parent does the work itself."""
    global _answer, _plan
    threading = sys.modules.get("threading")
    if _children or not hasattr(os, "fork") or (threading is not None and threading.active_count() > 1):
        return False  # forking beside a running thread could copy a lock it holds
    argv = sys.argv[1:] if argv is None else argv
    plan = planned(argv)
    if not (plan is not None and cores() >= WHOLE_CORES if what == WHOLE else wanted(argv, os.environ)):
        return False
    read, write = os.pipe()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return False
    if pid == 0:  # the child: work, hand the value over, exit without the parent's exit handlers
        status = 1
        try:
            import marshal

            _end_with(parent)
            os.close(read)
            if _answer is not None:  # the pipe this process's parent reads: its own to close, not this child's
                os.close(_answer)
            _answer = write
            _lineage.append(parent)
            data = marshal.dumps(plain(work()))
            with open(write, "wb") as pipe:
                pipe.write(data)
            status = 0
            settle(plan[2] if plan else SETTLE)  # a GPU child of this child has exited before this one does
        finally:
            os._exit(status)
    os.close(write)
    _children[what] = (pid, read)
    if what == WHOLE:
        _plan = plan
    import atexit

    atexit.register(discard)  # a command that never collected (a usage error, guard --only system)
    return True


#: The types marshal writes as they are.
_BASE = (str, int, float, bool, bytes, type(None))


def plain(value: object) -> object:
    """``value`` with every string and number of a subclass (hoststate.redact.Own: words hoststate wrote itself)
    as its base type, tables, lists and tuples element-wise: marshal writes no subclass. Anything else is left to
    marshal to refuse, and the parent then does the work itself."""
    kind = type(value)
    if kind in _BASE:
        return value
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return kind(plain(v) for v in value) if kind in (list, tuple) else [plain(v) for v in value]
    for base in _BASE[:3]:  # bool is an int no class can extend
        if isinstance(value, base):
            return base(value)
    return value


def forked(what: str) -> bool:
    """Whether a child collecting ``what`` runs, not yet taken."""
    return what in _children


def whole_plan() -> tuple[list[str] | None, list[str] | None, float] | None:
    """What the snapshot child collects (``planned``): the parent compares it with the options click parsed
    before it waits for the child, so that a misread command line costs only the overlap."""
    return _plan if WHOLE in _children else None


def ours() -> set[int]:
    """The pids of this command's processes: this one, the ones it was forked from and its children collecting
    ahead. They share the command line (``hoststate guard -- vllm serve M`` names vLLM), and none of them is a
    server the snapshot describes (hoststate.collectors.vllm.discovery)."""
    return {os.getpid(), *_lineage, *(pid for pid, _fd in _children.values()), *(pid for pid, *_ in _exiting)}


def _end_with(parent: int) -> None:
    """The child is killed when its parent dies (PR_SET_PDEATHSIG): a parent ended by a signal runs no exit
    handler, and a child must not outlive it waiting on a wedged driver."""
    import contextlib
    import ctypes
    import signal

    _children.clear()  # the parent's children are not this child's
    _exiting.clear()
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent's deadline still ends the child
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def discard(what: str | None = None) -> None:
    """End a child (``what``, or every one) whose value was not taken, killed when still running, so that none
    outlives the collection: guard runs the benchmark after it."""
    for name in [what] if what is not None else list(_children):
        child = _children.pop(name, None)
        if child is not None:
            _end(*child, kill=True)


def take(deadline: float, what: str = NAME) -> tuple[str, object]:
    """What the child collecting ``what`` handed over: ``("ok", value)``; ``("timeout", None)`` when it did not
    finish by ``deadline`` (time.perf_counter; it is killed); ``("failed", None)`` when it died or wrote no value;
    ``("none", None)`` when no such child was forked. The child is reaped either way."""
    child = _children.pop(what, None)
    if child is None:
        return "none", None
    import marshal

    pid, read = child
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

    reaper = threading.Thread(target=_reap, args=(pid,), name="reap-ahead-child", daemon=True)
    try:
        reaper.start()
    except RuntimeError:  # no thread to be had (a cgroup's pids.max): wait here
        _reap(pid)
        return
    _exiting.append((pid, reaper.join, reaper.is_alive))


#: Children that answered and are still exiting, with the join and is_alive of the thread that reaps each (settle).
_exiting: list[tuple[int, Callable[[float], None], Callable[[], bool]]] = []


def _reap(pid: int) -> None:
    """Wait for the child's exit (one already reaped is no error)."""
    import contextlib

    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def settle(timeout: float) -> None:
    """Wait until the children that answered have exited, at most ``timeout`` seconds each, then kill them: a guard
    calls this before it starts the benchmark, so that no child of the collection runs beside it (using a core,
    closing NVML handles, counted among the guard's descendants by the watch)."""
    import contextlib
    import signal

    while _exiting:
        pid, join, is_alive = _exiting.pop(0)
        join(timeout)
        if is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            join(timeout)
def start_nvml(environ: Mapping[str, str] = os.environ) -> object | None:
    """In the child, before the collector's modules are imported: the live pynvml imported and nvmlInit started in
    a thread, so the driver's start overlaps the imports; the collector's own nvmlInit then waits for it and
    counts one more user. Its nvmlShutdown leaves NVML to the child's exit. Nothing under a replay. Returns the
    thread (or None); a failure is left to the collector's own nvmlInit to report."""
    if environ.get(NVML_REPLAY_ENV):
        return None
    try:
        from hoststate.nvml_replay import import_pynvml

        nvml = import_pynvml()
        init = nvml.nvmlInit
    except Exception:  # not installed, the old package: the collector says so
        return None
    import threading

    def begin() -> None:
        import contextlib

        with contextlib.suppress(Exception):  # the collector's own call reports it
            init()

    thread = threading.Thread(target=begin, name="nvml-init", daemon=True)
    thread.start()
    return thread
