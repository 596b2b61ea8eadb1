"""Sections collected ahead, in children forked as the command starts, while the parent imports click and the
command, parses the options and runs the rest.

Two jobs, each in a child of its own (``JOBS``):

- ``gpu``: the GPU section. Reading the GPUs is the longest part of a snapshot on a GPU host, and most of it is
  Python (pynvml's import, the collector's code) plus NVML's first calls into the driver (docs/performance.md).
  On a live host the child starts NVML (nvmlInit: milliseconds in the driver, without the interpreter lock) in a
  thread before it imports pynvml and the collector, and leaves the last nvmlShutdown to its exit, which a snap
  does not wait for (a guard does, before it starts the benchmark: settle).
- ``host``: the sections read from the host's files and commands (``HOST_NAMES``: system, DSA, accel-config,
  the environment, packages), all Python that holds the interpreter lock. Not vLLM's: it reads the GPU section and
  passes over the command's own processes, so it runs in the parent.

Threads share one interpreter lock, so collectors in threads take turns; a child forked before any thread exists
has an interpreter of its own and runs beside the parent on another core. Each child runs the very collectors a
thread would (hoststate.collectors._call and run_all on a plain snap's Context: the live host, no
``--vllm-pid``) and hands their Sections' fields back as plain values in ``marshal``'s format (built in, where
``pickle`` costs an import of about 6 ms on each side) over a pipe only the two processes hold. The parent uses
a section only for a context it was collected for (hoststate.capture's ``_early``); otherwise, or when the child
failed, the collector runs in the parent as before. A child that does not answer within the collectors' timeout
is killed and its sections are ``timeout``, as a wedged thread's are; a child also dies with its parent.

Whether to fork is decided from argv alone, and any doubt (``--root``, ``--help``, a selection or timeout of the
host job's own, ``--vllm-pid`` or ``--skip gpu`` for the GPU's, no driver and no replay, a thread already
running) means not forking, which costs only the overlap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from hoststate.nvml import DRIVER_MARKERS, LIBRARY, NVML_REPLAY_ENV  # data only: every command imports this module

#: The commands that snap the live host, and the jobs read ahead: the GPU collector's section, and the host's.
COMMANDS = ("snap", "guard")
NAME = "gpu"
HOST = "host"
#: The collectors of the host job (collectors.host_sections), collected only all together and for a plain snap:
#: accel_config reads the dsa section, and the parent takes them only where its selection holds them all.
HOST_NAMES = ("system", "dsa", "accel_config", "env", "packages")
#: Options after which the GPU section would differ from a default Context's, or nothing is collected.
_NOT_AHEAD = ("--root", "--vllm-pid", "--help", "-h")
#: Options after which the host job's sections would differ from a plain snap's, or not all would be taken.
_NOT_HOST = ("--root", "--help", "-h", "--only", "--skip", "--timeout")

#: The children collecting ahead, by job: its pid and the read end of its pipe.
_children: dict[str, tuple[int, int]] = {}
#: What each job's child handed over, kept for the collection's other collectors (take), and a lock per job.
_handed: dict[str, tuple[str, object]] = {}
_locks: dict[str, object] = {}


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


#: CPUs this process may use (_cpus), at least, for the host job: it pays where a core is free for it beside the parent
#: (an H100 host of 16: 179 -> 162 ms a snap), not on the project's 2-core VM, where it saved nothing and cost
#: 40 ms of CPU (docs/performance.md).
HOST_CPUS = 4


def _cpus(root: str = "/") -> float:
    """CPUs this process may use: those it may run on (its affinity: a Slurm job's cpuset), or its cgroup's CPU
    quota where that is less (a Kubernetes pod's CPU limit leaves every CPU in the affinity). The quota is read
    only where the affinity alone would let the host job fork."""
    try:
        cpus: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
    if cpus >= HOST_CPUS:
        from hoststate.cgroups import cpu_quota

        def read(rel: str) -> str | None:
            try:
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    return fh.read(4096)
            except OSError:
                return None

        try:
            quota = cpu_quota(read, read("proc/self/cgroup") or "")
        except Exception:  # a file no kernel writes: the affinity alone decides, as before the quota was read
            quota = None
        cpus = cpus if quota is None else min(cpus, quota)
    return cpus


def host_wanted(argv: Sequence[str], environ: Mapping[str, str] | None = None, cpus: float | None = None) -> bool:
    """Whether the command line snaps the live host with every host collector, the plain snap's timeout and no
    other root, with ``cpus`` (this process's, by default: _cpus) HOST_CPUS or more (``environ`` unused: the job's
    sections do not depend on a driver)."""
    args = _options(argv)
    if args is None or any(a.partition("=")[0] in _NOT_HOST for a in args):
        return False
    return (_cpus() if cpus is None else cpus) >= HOST_CPUS


#: The job that reads and parses guard's baseline: the parse and the TOML reader's import are about 5 ms of the
#: parent's start on an H100 host, beside nothing, while a child has the time before the parent needs it.
BASELINE = "baseline"


def baseline_path(argv: Sequence[str]) -> str | None:
    """The file guard's ``--baseline`` names (the last, as click keeps it); None for another command or ``-``."""
    words = [a for a in argv if a != "--debug"]
    args = _options(argv) if words and words[0] == "guard" else None
    if args is None or any(a in ("--help", "-h") for a in args):
        return None
    value = _values(args).get("--baseline")
    return value if value and value != "-" else None


def baseline_wanted(argv: Sequence[str], environ: Mapping[str, str], cpus: float | None = None) -> bool:
    """Whether the command line is a guard's with a baseline file and ``cpus`` (this process's, by default) are
    HOST_CPUS or more, as for the host job: the child's fork, imports and parse cost about 10 ms of CPU, which
    pays only where a core is free for it (``environ`` unused)."""
    return baseline_path(argv) is not None and (_cpus() if cpus is None else cpus) >= HOST_CPUS


def baseline(path: str, deadline: float) -> list | None:
    """``[path, bytes, tree, times]`` of the baseline ``path`` as the child forked for it read and parsed it
    (hoststate.snapshot.read_parsed), or None: no child, it failed or did not answer by ``deadline``, or it read
    another path (its argv parse is not click's). The parent then reads the file itself, and its error is the one
    a user sees."""
    if not pending(BASELINE):
        return None
    state, value = take(BASELINE, deadline)
    if state != "ok" or not isinstance(value, list) or len(value) != 4 or value[0] != path:
        return None
    return value


#: Each job's test of the command line.
JOBS: dict[str, Callable[..., bool]] = {NAME: wanted, HOST: host_wanted, BASELINE: baseline_wanted}


def start(jobs: Mapping[str, Callable[[], object]], argv: Sequence[str] | None = None) -> tuple[str, ...]:
    """Fork a child for each job (a name of JOBS, and the work it runs: hoststate.collectors.gpu_section,
    host_sections) that the command line wants; the jobs forked. ``work`` returns what ``marshal`` writes (dicts,
    lists, strings, numbers); a value it cannot write fails the child, and the parent collects those sections
    itself."""
    threading = sys.modules.get("threading")
    if _children or not hasattr(os, "fork") or (threading is not None and threading.active_count() > 1):
        return ()  # forking beside a running thread could copy a lock it holds
    args = sys.argv[1:] if argv is None else argv
    for job, work in jobs.items():
        if JOBS[job](args, os.environ):
            _fork(job, work)
    if _children:
        import atexit

        atexit.register(discard)  # a command that never collected (a usage error, guard --only system)
    return tuple(_children)


def _fork(job: str, work: Callable[[], object]) -> None:
    import _thread

    read, write = os.pipe()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return
    if pid == 0:  # the child: collect, hand the sections over, exit without the parent's exit handlers
        status = 1
        try:
            import marshal

            _end_with(parent)
            for _pid, other in _children.values():  # a sibling's pipe, inherited: only the parent reads it
                os.close(other)
            _children.clear()
            os.close(read)
            data = marshal.dumps(work())
            with open(write, "wb") as pipe:
                pipe.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    _children[job] = (pid, read)
    _handed.pop(job, None)
    _locks[job] = _thread.allocate_lock()


def ours() -> set[int]:
    """The pids of this command's processes: this one and its children collecting ahead, running or exiting.
    A child shares the command line (``hoststate guard -- vllm serve M`` names vLLM), and none is a server the
    snapshot describes (hoststate.collectors.vllm.discovery)."""
    return {os.getpid(), *(c[0] for c in _children.values()), *(e[0] for e in _exiting)}


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


def pending(job: str | None = None) -> bool:
    """Whether a child is collecting ahead (``job``'s, or any) and its sections have not been taken."""
    return job in _children if job is not None else bool(_children)


def discard(job: str | None = None) -> None:
    """End a child whose sections were not taken (killed when still running), ``job``'s or every one, and forget
    what the children handed over, so that none outlives the collection (guard runs the benchmark after it) and
    a later collection in the process collects its own."""
    for name in [job] if job is not None else list(_children):
        child = _children.pop(name, None)
        if child is not None:
            _end(*child, kill=True)
    if job is None:
        _handed.clear()


def take(job: str, deadline: float) -> tuple[str, object]:
    """What ``job``'s child handed over: ``("ok", value)``; ``("timeout", None)`` when it did not finish by
    ``deadline`` (time.perf_counter; it is killed); ``("failed", None)`` when it died or wrote no value;
    ``("none", None)`` when no child was forked for it. The child is reaped either way. The first caller reads the
    pipe; the others (the host job's five collectors ask at once) wait for that answer and share it until
    :func:`discard`."""
    lock = _locks.get(job)
    if lock is None:
        return "none", None
    with lock:  # type: ignore[attr-defined]
        child = _children.pop(job, None)
        if child is None:  # taken by another collector of this collection, or never forked
            return _handed.get(job, ("none", None))
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
        _handed[job] = (state, value)
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
    it is still exiting (the GPU child's driver closes its NVML handles then: the answer is in, and a snap need
    not wait for that; a guard waits before it starts the benchmark, see settle)."""
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
    """Wait until the children that answered have exited, at most ``timeout`` seconds in all, then kill those
    still there: a guard calls this before it starts the benchmark, so that no child of the collection runs
    beside it (using a core, closing NVML handles, counted among the guard's descendants by the watch)."""
    import contextlib
    import signal
    import time

    deadline = time.perf_counter() + timeout
    while _exiting:
        pid, join, is_alive = _exiting.pop()
        join(max(0.0, deadline - time.perf_counter()))
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
    Once NVML has started, the thread does NVML's first-use work for each GPU (:func:`warm_devices`). Nothing under
    a replay. Returns the thread (or None); a failure is left to the collector's own calls to report."""
    if environ.get(NVML_REPLAY_ENV):
        return None
    import threading

    def begin() -> None:
        import contextlib

        with contextlib.suppress(Exception):  # no library, no driver: the collector's own call reports it
            library = _library()
            if library.nvmlInitWithFlags(0) == 0:  # NVML_SUCCESS
                warm_devices(library)

    thread = threading.Thread(target=begin, name="nvml-init", daemon=True)
    thread.start()
    return thread


def warm_devices(library) -> None:  # a ctypes.CDLL, unannotated as in _library
    """NVML's first-use work for each GPU, while pynvml and the collector are imported: a device's first handle
    (6.7 ms on an H100, then 0.01), its first applications clock (6.3 ms, then 1), enforced power limit (3 ms,
    then nothing) and ECC mode (1.9 ms, then 0.2: benchmarks/results/ab-h100-exit.txt). The answers are dropped:
    the collector asks for every fact itself, and NVML serves one call at a time, so a warming call the collector
    meets costs it at most that call. Each call releases the interpreter lock (ctypes)."""
    import ctypes

    count = ctypes.c_uint()
    if library.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return
    handles = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        if library.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
            handles.append(handle)
    value, other = ctypes.c_uint(), ctypes.c_uint()
    for handle in handles:
        library.nvmlDeviceGetApplicationsClock(handle, 0, ctypes.byref(value))  # NVML_CLOCK_GRAPHICS
        library.nvmlDeviceGetEnforcedPowerLimit(handle, ctypes.byref(value))
        library.nvmlDeviceGetEccMode(handle, ctypes.byref(value), ctypes.byref(other))
