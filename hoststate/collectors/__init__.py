"""Collectors: one module per source, each ``collect(ctx) -> Section``, run in the order of COLLECTORS.

A collector never raises and never hangs the snapshot: each runs in a worker thread under a
deadline; an exception becomes status ``error`` and an overrun becomes ``timeout``.
"""

from __future__ import annotations

import importlib
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "absent", "partial", "error", "denied", "timeout", "skipped")


@dataclass
class Section:
    """What one collector found: ``data`` becomes the snapshot table of the collector's name."""

    status: str = "ok"
    data: dict[str, Any] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    took_ms: float = 0.0
    #: Lines snap prints on stderr besides the summary (e.g. "3 vLLM servers, none named").
    notes: list[str] = field(default_factory=list)

    def settle(self) -> Section:
        """``ok`` becomes ``partial`` when something could not be read; returns self."""
        if self.status == "ok" and self.unreadable:
            self.status = "partial"
        return self


@dataclass
class Context:
    """What every collector may consult: the root prefix, the vLLM source options, deadlines."""

    root: str = "/"
    vllm_pid: int | None = None
    vllm_cmd: str | None = None
    vllm_log: str | None = None
    vllm_url: str | None = None
    vllm_version: str | None = None
    #: Seconds one collector may take before it is reported as ``timeout``.
    timeout: float = 20.0
    #: Seconds one subprocess (accel-config, ...) may take.
    command_timeout: float = 5.0
    #: An object standing in for the ``pynvml`` module (tests and replays); None means the real one.
    nvml: Any = None
    #: Sections already collected, by name, for collectors that cross-check an earlier one.
    sections: dict[str, Section] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        """True when reading the running host; sources that cannot honour a root are skipped otherwise."""
        return self.root in ("", "/")


@dataclass(frozen=True)
class CollectorInfo:
    name: str
    module: str
    description: str


# Order matters: accel_config cross-checks the dsa section, so dsa runs first.
COLLECTORS: tuple[CollectorInfo, ...] = (
    CollectorInfo("system", "hoststate.collectors.system", "kernel, OS, CPU, NUMA, memory and tuning"),
    CollectorInfo("dsa", "hoststate.collectors.dsa", "Intel DSA/IAA devices, work queues, groups, engines"),
    CollectorInfo("accel_config", "hoststate.collectors.accel_config", "accel-config live and saved configuration"),
    CollectorInfo("gpu", "hoststate.collectors.gpu", "NVIDIA GPUs, NVLink and topology through NVML"),
    CollectorInfo("vllm", "hoststate.collectors.vllm", "vLLM server arguments, environment, CUDA graph mode"),
    CollectorInfo("env", "hoststate.collectors.env", "performance-relevant environment of this process"),
    CollectorInfo("packages", "hoststate.collectors.packages", "installed versions of the inference stack"),
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLLECTORS)


def _load(info: CollectorInfo) -> Callable[[Context], Section]:
    return importlib.import_module(info.module).collect


def run_one(info: CollectorInfo, ctx: Context) -> Section:
    """Run one collector in a daemon thread under ``ctx.timeout``; never raises."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["section"] = _load(info)(ctx)
        except BaseException as err:  # a collector bug must not cost the snapshot
            box["error"] = err
            box["trace"] = traceback.format_exc()

    start = time.perf_counter()
    worker = threading.Thread(target=target, name=f"collect-{info.name}", daemon=True)
    worker.start()
    worker.join(ctx.timeout)
    took = round((time.perf_counter() - start) * 1000, 1)
    if worker.is_alive():
        return Section(status="timeout", reason=f"did not finish within {ctx.timeout:g}s", took_ms=took)
    if "error" in box:
        err = box["error"]
        return Section(status="error", reason=f"{type(err).__name__}: {err}"[:300], took_ms=took)
    section = box["section"]
    section.took_ms = took
    return section


def run_all(ctx: Context, names: tuple[str, ...] | list[str] = NAMES) -> dict[str, Section]:
    """Run the named collectors in table order; those not named are ``skipped``."""
    wanted = set(names)
    for info in COLLECTORS:
        if info.name in wanted:
            ctx.sections[info.name] = run_one(info, ctx)
        else:
            ctx.sections[info.name] = Section(status="skipped", reason="not selected")
    return ctx.sections


def select(only: list[str] | None, skip: list[str] | None) -> tuple[str, ...]:
    """Collector names from ``--only``/``--skip``; an unknown name raises ValueError naming it."""
    for name in (only or []) + (skip or []):
        if name not in NAMES:
            raise ValueError(f"unknown collector {name!r} (known: {', '.join(NAMES)})")
    chosen = [n for n in NAMES if not only or n in only]
    return tuple(n for n in chosen if n not in (skip or []))
