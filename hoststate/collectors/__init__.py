"""Collectors: one module per source, each ``collect(ctx) -> Section``, run in the order of COLLECTORS.

A collector never raises and never hangs the snapshot: each runs in a worker thread under a
deadline; an exception becomes status ``error`` and an overrun becomes ``timeout``. Collectors run
concurrently; one that reads another's section names it in ``after``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from hoststate.errors import InputError
from hoststate.io import check_timeout
from hoststate.records import Record
from hoststate.snapshot import NAMES, STATUSES  # noqa: F401 - re-exported: the registry speaks the file contract

#: Seconds a collector may take by default (``--timeout``): a plain snap's, the one the children collecting ahead
#: use (hoststate.ahead).
TIMEOUT = 20.0


class Section(Record):
    """What one collector found: ``data`` becomes the snapshot table of the collector's name; ``notes`` are the
    lines snap prints on stderr besides the summary (e.g. "3 vLLM servers, none named")."""

    def __init__(self, status: str = "ok", data: dict[str, Any] | None = None,
                 unreadable: dict[str, str] | None = None, reason: str | None = None, took_ms: float = 0.0,
                 notes: list[str] | None = None) -> None:
        self.status = status
        self.data: dict[str, Any] = {} if data is None else data
        self.unreadable: dict[str, str] = {} if unreadable is None else unreadable
        self.reason = reason
        self.took_ms = took_ms
        self.notes: list[str] = [] if notes is None else notes

    def settle(self) -> Section:
        """``ok`` becomes ``partial`` when something could not be read; returns self."""
        if self.status == "ok" and self.unreadable:
            self.status = "partial"
        return self


class Context(Record):
    """What every collector may consult: the root prefix, the vLLM source options, deadlines.

    ``timeout``: seconds one collector may take before it is reported as ``timeout``; ``command_timeout``:
    seconds one subprocess (accel-config, ...) may take; ``nvml``: an object standing in for the ``pynvml``
    module (tests and replays), None for the real one; ``sections``: sections already collected, by name, for
    collectors that cross-check an earlier one; ``early``: a collector's section collected ahead of this
    collection for this context, or None (hoststate.ahead; set by hoststate.capture): the collector then runs
    here; ``ready``: by name, the event set when a section being collected is done (run_all; read by section).
    """

    def __init__(self, root: str = "/", vllm_pid: int | None = None, vllm_cmd: str | None = None,
                 vllm_log: str | None = None, vllm_url: str | None = None, vllm_version: str | None = None,
                 timeout: float = TIMEOUT, command_timeout: float = 5.0, nvml: Any = None,
                 sections: dict[str, Section] | None = None,
                 early: Callable[[str, Context], Section | None] | None = None,
                 ready: dict[str, Any] | None = None) -> None:
        self.root = root
        self.vllm_pid = vllm_pid
        self.vllm_cmd = vllm_cmd
        self.vllm_log = vllm_log
        self.vllm_url = vllm_url
        self.vllm_version = vllm_version
        self.timeout = timeout
        self.command_timeout = command_timeout
        self.nvml = nvml
        self.sections: dict[str, Section] = {} if sections is None else sections
        self.early = early
        self.ready: dict[str, Any] = {} if ready is None else ready

    def section(self, name: str) -> Section | None:
        """The section ``name`` of this collection, waited for (at most ``timeout`` seconds, once) while it is
        still being collected; None when it is not collected or did not finish in time."""
        event = self.ready.get(name)
        if event is not None and not event.wait(self.timeout):
            self.ready.pop(name, None)  # wedged: a second reader does not wait for it again
        return self.sections.get(name)

    @property
    def live(self) -> bool:
        """True when reading the running host; sources that cannot honour a root are skipped otherwise."""
        return self.root in ("", "/")


class CollectorInfo(NamedTuple):
    name: str
    module: str
    description: str
    #: Collectors whose sections this one reads (it starts when they are done, or when they time out).
    after: tuple[str, ...] = ()
    #: Collectors whose sections this one reads only where it needs them, through Context.section (it starts at
    #: once, and waits for them there).
    reads: tuple[str, ...] = ()


COLLECTORS: tuple[CollectorInfo, ...] = (
    CollectorInfo("system", "hoststate.collectors.system", "kernel, OS, CPU, NUMA, memory and tuning"),
    CollectorInfo("dsa", "hoststate.collectors.dsa", "Intel DSA/IAA devices, work queues, groups, engines"),
    CollectorInfo("accel_config", "hoststate.collectors.accel_config", "accel-config live and saved configuration",
                  after=("dsa",)),  # cross-checks the dsa section
    CollectorInfo("gpu", "hoststate.collectors.gpu", "NVIDIA GPUs, NVLink and topology through NVML"),
    CollectorInfo("vllm", "hoststate.collectors.vllm", "vLLM server arguments, environment, CUDA graph mode",
                  reads=("gpu",)),  # a server's world size above the host's GPU count is refused; no server, no wait
    CollectorInfo("env", "hoststate.collectors.env", "performance-relevant environment of this process",
                  reads=("packages",)),  # which vLLM reads the VLLM_* variables; none set, no wait
    CollectorInfo("packages", "hoststate.collectors.packages", "installed versions of the inference stack"),
)
assert tuple(c.name for c in COLLECTORS) == NAMES, "snapshot.NAMES is the file contract; keep it in step"


def _load(info: CollectorInfo) -> Any:
    return importlib.import_module(info.module)


def settle_coverage(section: Section, sources: tuple[Any, ...]) -> Section:
    """Failures recorded by source become entries by snapshot path (hoststate.coverage): values written under a
    path whose source failed are removed, ``ok`` becomes ``partial``, and ``absent`` declared while something
    could not be read becomes that failure's class (a denied bus directory is not an absent driver)."""
    from hoststate import coverage

    if not section.unreadable:
        return section
    section.unreadable = coverage.settle(sources, section.unreadable)
    hidden = coverage.patterns(section.unreadable)
    section.data = coverage.prune(section.data, [parts for parts, _cls, _detail in hidden])
    if not hidden or all(cls == "skipped" for _parts, cls, _detail in hidden):
        # nothing failed: an observed absence, or a fact left out by design (what a captured tree cannot give)
        if section.status == "partial" and not section.reason:
            section.status = "ok"
        return section
    if section.status in ("ok", "partial"):
        section.status = "partial"
    elif section.status == "absent":
        classes = [cls for _parts, cls, _detail in hidden]
        first = next(detail for _parts, cls, detail in hidden if cls == classes[0])
        section.status = "denied" if "denied" in classes else "timeout" if "timeout" in classes else "error"
        section.reason = f"could not tell whether it is absent: {first}"
    return section


def _ahead(info: CollectorInfo, ctx: Context) -> Section | None:
    """The section collected ahead for this context (Context.early), timed where it was collected; None when
    there is none or it could not be had: the collector then runs here."""
    try:
        return ctx.early(info.name, ctx) if ctx.early is not None else None
    except Exception:
        return None


def _call(info: CollectorInfo, ctx: Context) -> Section:
    """The collector's section, or an ``error`` section for an exception (a bug must not cost the snapshot)."""
    start = time.perf_counter()
    try:
        module = _load(info)
        section = settle_coverage(getattr(module, "collect", module)(ctx), getattr(module, "SOURCES", ()))
    except BaseException as err:
        section = Section(status="error", reason=f"{type(err).__name__}: {err}"[:300])
    section.took_ms = round((time.perf_counter() - start) * 1000, 1)
    return section


def check_root(root: str | os.PathLike[str] | None) -> str:
    """``--root`` must be a host tree (holding sys or proc): a wrong directory would snap as an empty host."""
    root = os.fspath(root) if root else "/"
    if not os.path.isdir(root):
        raise InputError(f"--root {root}: not a directory")
    if not any(os.path.isdir(os.path.join(root, sub)) for sub in ("sys", "proc")):
        raise InputError(f"--root {root}: holds neither sys nor proc; give the top of a captured host tree")
    return root


def plan(*, root: str | os.PathLike[str] | None = "/", only: Sequence[str] | None = None,
         skip: Sequence[str] | None = None, timeout: float | None = TIMEOUT, vllm_pid: int | None = None,
         vllm_cmd: str | None = None, vllm_log: str | None = None, vllm_url: str | None = None,
         vllm_version: str | None = None) -> tuple[Context, tuple[str, ...]]:
    """The collectors' Context and the selected collector names, the one place a Context is built
    (hoststate.capture.context adds the section collected ahead; the child collecting it, gpu_section, plans a
    plain snap's); InputError on a bad root, selection or timeout."""
    root = check_root(root)
    timeout = check_timeout(TIMEOUT if timeout is None else timeout)
    try:
        names = select(list(only) if only else None, list(skip) if skip else None)
    except ValueError as err:
        raise InputError(str(err)) from err
    ctx = Context(root=root, vllm_pid=vllm_pid, vllm_cmd=vllm_cmd, vllm_log=vllm_log, vllm_url=vllm_url,
                  vllm_version=vllm_version, timeout=timeout)
    return ctx, names


def gpu_section() -> dict[str, Any]:
    """The GPU collector's section on a plain snap's Context (the live host, no --vllm-pid), as run_all's thread
    collects it, as its fields' plain values: what the child forked by hoststate.ahead hands over. Here rather than
    in hoststate.capture, whose imports the child would otherwise wait for."""
    from hoststate.ahead import NAME  # the collector read ahead; the child has imported hoststate.ahead already

    ctx, _names = plan(only=(NAME,))
    return vars(_call(next(c for c in COLLECTORS if c.name == NAME), ctx))


def host_sections() -> dict[str, dict[str, Any]]:
    """The host job's sections (hoststate.ahead.HOST_NAMES) on a plain snap's Context, collected as run_all
    collects them, as their fields' plain values: what the child forked for that job hands over."""
    from hoststate.ahead import HOST_NAMES

    ctx, names = plan(only=HOST_NAMES)
    sections = run_all(ctx, names)
    return {name: vars(sections[name]) for name in names}


#: The collector whose thread starts first (see run_all).
FIRST = "gpu"
#: Seconds a collector's thread runs alone before the next one starts (see run_all).
STAGGER = 0.02


def run_all(ctx: Context, names: tuple[str, ...] | list[str] = NAMES,
            finish: Callable[[str, Section], object] | None = None) -> dict[str, Section]:
    """Run the named collectors, each in its own daemon thread, started one after another: the next when the
    last has finished or has run STAGGER seconds (NVML and subprocesses wait on the kernel while the others parse
    files); those not named are ``skipped``.

    Each collector has ``ctx.timeout`` seconds from its own start (a collector with ``after`` waits at
    most that long for each of them first); one that overruns is recorded as ``timeout`` and its thread
    is abandoned, so a wedged device or driver never holds the snapshot. Returns sections in table order.
    ``finish`` (redaction, rating for the digest) runs on each collector's name and section in its thread, while
    slower collectors still wait; a failing ``finish`` is left for the caller to redo.
    """
    wanted = set(names)
    lock = threading.Lock()
    finished: dict[str, Section] = {}
    done: dict[str, threading.Event] = {}
    final = False

    def here(info: CollectorInfo, waits: list[tuple[str, threading.Event]]) -> Section:
        if waits:  # import while the dependency runs (NVML waits without the GIL); a failure is _call's to report
            with contextlib.suppress(BaseException):
                _load(info)
        for dep, event in waits:
            if not event.wait(ctx.timeout):
                # The dependency is wedged: say so to this collector, or it would read the dependency's
                # source itself (accel_config re-reads the dsa tree) and wedge on it too.
                with lock:
                    if dep not in finished:
                        ctx.sections[dep] = Section(status="timeout", reason=f"did not finish within {ctx.timeout:g}s")
        return _call(info, ctx)

    def work(info: CollectorInfo, waits: list[tuple[str, threading.Event]]) -> None:
        section = _ahead(info, ctx)  # collected with its dependencies, ahead: nothing to import or wait for
        if section is None:
            section = here(info, waits)
        if finish is not None:
            with contextlib.suppress(BaseException):
                finish(info.name, section)
        with lock:
            if not final:  # a collector that already timed out keeps its ``timeout`` section
                finished[info.name] = section
                ctx.sections[info.name] = section
        done[info.name].set()

    for info in COLLECTORS:
        if info.name in wanted:
            done[info.name] = threading.Event()
    ctx.ready = dict(done)  # Context.section: a collector that reads another's section only where it needs it
    # NVML's start (pynvml's import, nvmlInit) is the longest wait of a GPU host: its thread starts first, so the
    # other collectors run while it waits without the interpreter lock. Each thread runs alone until it finishes
    # or STAGGER has passed: most collectors are Python that holds the lock, and threads that only take turns with
    # it cost more than running one after another (a snap's collection on the 2-core VM: 81 ms all at once, 66 ms
    # one at a time, docs/performance.md); one that waits (NVML, accel-config, a wedged file) lets the next start.
    starts: dict[str, float] = {}
    previous: threading.Event | None = None
    for info in sorted((i for i in COLLECTORS if i.name in wanted), key=lambda i: i.name != FIRST):
        if previous is not None:
            previous.wait(STAGGER)
        waits = [(dep, done[dep]) for dep in info.after if dep in done]
        starts[info.name] = time.perf_counter()
        threading.Thread(target=work, args=(info, waits), name=f"collect-{info.name}", daemon=True).start()
        previous = done[info.name]
    for info in COLLECTORS:
        if info.name in done:
            budget = ctx.timeout * (1 + len(info.after) + len(info.reads))
            done[info.name].wait(max(0.0, starts[info.name] + budget - time.perf_counter()))
    with lock:
        final = True
        ctx.ready = {}  # the collection's events end with it: the Context copies and compares as before
        out: dict[str, Section] = {}
        for info in COLLECTORS:
            if info.name not in wanted:
                out[info.name] = Section(status="skipped", reason="not selected")
            elif info.name in finished:
                out[info.name] = finished[info.name]
            else:
                took = round((time.perf_counter() - starts[info.name]) * 1000, 1)
                out[info.name] = Section(status="timeout", reason=f"did not finish within {ctx.timeout:g}s",
                                         took_ms=took)
        ctx.sections.clear()
        ctx.sections.update(out)
    return out


def run_one(info: CollectorInfo, ctx: Context) -> Section:
    """One collector alone, under the same deadline and error handling as in a snapshot."""
    return run_all(ctx, (info.name,))[info.name]


def select(only: list[str] | None, skip: list[str] | None) -> tuple[str, ...]:
    """Collector names from ``--only``/``--skip``; an unknown name raises ValueError naming it."""
    for name in (only or []) + (skip or []):
        if name not in NAMES:
            raise ValueError(f"unknown collector {name!r} (known: {', '.join(NAMES)})")
    chosen = [n for n in NAMES if not only or n in only]
    return tuple(n for n in chosen if n not in (skip or []))
