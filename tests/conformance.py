"""The collector registry as the conformance tests see it: every collector of hoststate.collectors.COLLECTORS, the
bench each is faulted on (recorded input: a fixture tree through --root, a real NVML replay, the files its options
name), and the collectors known not to conform (GAPS). tests/test_coverage.py and tests/test_faults_all.py
parametrize over registered(), read at collection, so a collector added to the registry is in them at once."""

from __future__ import annotations

import copy
import errno
import importlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hoststate import collectors, coverage
from hoststate.capture import collect
from hoststate.collectors import Context
from hoststate.nvml_replay import load_data
from tests.conftest import FIXTURES, HOSTS
from tests.faults import inject, reader_faults

TREE = str(HOSTS / "seed-experiment")
H200 = FIXTURES / "nvml" / "h200.json"
ERRNOS = {"denied": errno.EACCES, "missing": errno.ENOENT, "error": errno.EIO}
NVML_ERRORS = {"denied": "NoPermission", "error": "Unknown", "timeout": "Timeout"}


def registered() -> list[str]:
    """The registry's collector names, read when asked (a test may add one)."""
    return [info.name for info in collectors.COLLECTORS]


def module(name: str) -> Any:
    return importlib.import_module(next(i.module for i in collectors.COLLECTORS if i.name == name))


def readers(name: str) -> list[Any]:
    """The collector's module and those of the collectors whose sections it reads (accel_config re-reads the dsa
    tree)."""
    info = next(i for i in collectors.COLLECTORS if i.name == name)
    return [module(n) for n in (name, *info.after, *info.reads)]


def _alone(snap: dict, name: str) -> dict:
    snap["collectors"] = {name: snap["collectors"][name]}  # this collector alone, on both sides
    return snap


# -- benches: how each collector is snapped from recorded input, and what can fail there -------------------------


@dataclass(frozen=True)
class Fault:
    site: str  # what was failed: a root-relative file, an NVML call, a file an option names
    cls: str  # the class the collector must record it as
    snap: dict = field(repr=False)
    recorded: tuple[str, str] | None = None  # (key, reason) the collector's unreadable table must hold


@dataclass(frozen=True)
class TreeBench:
    """A fixture tree read through --root: every kind of file the collector opened (hoststate.io.Reader) fails."""

    root: str = TREE
    classes: tuple[str, ...] = ("denied", "missing", "error")

    def snap(self, name: str, fault: tuple[str, int] | None = None, seen: set[str] | None = None,
             timeout: float = 20.0) -> dict:
        with reader_faults(fault, seen):  # a negative errno stalls past the deadline: the collector is abandoned
            return _alone(collect(Context(root=self.root, timeout=timeout), (name,)), name)

    def clean(self, name: str) -> tuple[dict, list[str]]:
        seen: set[str] = set()
        return self.snap(name, seen=seen), shapes_of(seen)

    def faults(self, name: str, cls: str) -> Iterator[Fault]:
        _clean, shapes = self.clean(name)
        assert len(shapes) >= 2, shapes
        for rel in shapes:
            if not declared_absent(name, rel, ERRNOS[cls]):
                err = ERRNOS[cls]
                yield Fault(rel, cls, self.snap(name, (rel, err)), (rel, errno.errorcode[err]))


@dataclass(frozen=True)
class NvmlBench:
    """A real NVML replay: every call (system and device) fails in turn with the NVML error of the class."""

    replay: Path = H200
    classes: tuple[str, ...] = ("denied", "error", "timeout")

    def snap(self, name: str, data: dict | None = None) -> dict:
        data = json.loads(self.replay.read_text()) if data is None else data
        return _alone(collect(Context(root=TREE, nvml=load_data(data, str(self.replay))), (name,)), name)

    def clean(self, name: str) -> tuple[dict, list[str]]:
        data = json.loads(self.replay.read_text())
        calls = [f"system {k}" for k in data["system"]] + [f"device {k}" for k in data["devices"][0]["calls"]]
        return self.snap(name), calls

    def faults(self, name: str, cls: str) -> Iterator[Fault]:
        data = json.loads(self.replay.read_text())
        _clean, calls = self.clean(name)
        assert len(calls) >= 30
        for site in calls:
            where, call = site.split(" ", 1)
            broken = copy.deepcopy(data)
            table = broken["system"] if where == "system" else broken["devices"][0]["calls"]
            table[call] = {"error": NVML_ERRORS[cls]}
            yield Fault(site, cls, self.snap(name, broken))


@dataclass(frozen=True)
class InputsBench:
    """The files the collector's options name (a server's log, its --config file) and what it reads under the
    root: each fails at open in turn."""

    options: dict[str, str]
    files: tuple[str, ...]
    root: str = TREE
    classes: tuple[str, ...] = ("denied", "missing", "error")

    def snap(self, name: str, faults: dict[str, int] | None = None, fault: tuple[str, int] | None = None,
             seen: set[str] | None = None) -> dict:
        with reader_faults(fault, seen), inject(faults or {}):
            return _alone(collect(Context(root=self.root, **self.options), (name,)), name)

    def clean(self, name: str) -> tuple[dict, list[str]]:
        seen: set[str] = set()
        snap = self.snap(name, seen=seen)
        return snap, [*self.files, *shapes_of(seen)]

    def faults(self, name: str, cls: str) -> Iterator[Fault]:
        _clean, sites = self.clean(name)
        for site in sites:
            if site in self.files:
                yield Fault(site, cls, self.snap(name, faults={site: ERRNOS[cls]}))
            else:
                yield Fault(site, cls, self.snap(name, fault=(site, ERRNOS[cls])))


@dataclass(frozen=True)
class NothingBench:
    """A collector that reads no file (the process's own environment): with every open failing, its section is
    the clean one."""

    classes: tuple[str, ...] = ("denied", "error")

    def snap(self, name: str, err: int | None = None) -> dict:
        with inject({"": err} if err else {}):  # every path ends with ""
            return _alone(collect(Context(root=TREE), (name,)), name)

    def clean(self, name: str) -> tuple[dict, list[str]]:
        return self.snap(name), ["every open"]

    def faults(self, name: str, cls: str) -> Iterator[Fault]:
        yield Fault("every open", cls, self.snap(name, ERRNOS[cls]))


LOG = str(FIXTURES / "vllm" / "logs" / "v0.12.0-moe-tp8.log")
CONFIG = str(FIXTURES / "vllm" / "oracle" / "configs" / "tp8-piecewise.yaml")
#: How each registered collector is snapped from recorded input. A collector of the registry missing here fails.
BENCHES: dict[str, Any] = {
    "system": TreeBench(),
    "dsa": TreeBench(),
    "accel_config": TreeBench(str(HOSTS / "seed-experiment-saved")),  # a saved configuration to read too
    "gpu": NvmlBench(),
    "vllm": InputsBench({"vllm_cmd": f"vllm serve Qwen/Qwen3-30B-A3B-FP8 --config {CONFIG}", "vllm_log": LOG,
                         "vllm_version": "0.12.0"}, (LOG, CONFIG)),
    "env": NothingBench(),
}
#: Known not to conform, by (collector, test), each with what it lacks: a strict xfail, so the entry must go once
#: the collector conforms. A new collector is never listed here.
GAPS: dict[tuple[str, str], str] = {
    ("packages", "bench"): "reads this interpreter's sys.path, never a --root tree: no recorded input to fault "
                           "until it records what it could not list",
    ("packages", "faults"): "no bench (above)",
    ("vllm", "faults-denied"): "an unreadable model config.json changes vllm.cudagraph.declared_assumptions (its "
                               "text names the failed read) instead of marking what the model's facts decide "
                               "unreadable",
    ("vllm", "faults-error"): "as faults-denied: EIO on the model's config.json",
    ("vllm", "faults-missing"): "a missing --vllm-log leaves vllm.packages' skip entry (packages under --root) on "
                                "one side only: the skip is recorded under the log's server, not the section",
}


def _gap(name: str, test: str) -> list[Any]:
    why = GAPS.get((name, test))
    return [pytest.mark.xfail(reason=why, strict=True, raises=AssertionError)] if why else []


def params(test: str, classes: bool = False) -> list[Any]:
    out = []
    for name in registered():
        bench = BENCHES.get(name)
        for cls in (bench.classes if bench is not None else ("any",)) if classes else (None,):
            args = (name, cls) if classes else (name,)
            marks = _gap(name, f"{test}-{cls}") or _gap(name, test)  # a gap of one failure class, or of them all
            out.append(pytest.param(*args, marks=marks, id="-".join(a for a in args if a)))
    return out


def shapes_of(paths: set[str]) -> list[str]:
    """One path of each shape (digits folded): every kind of file, not every instance of it. The host name is
    the snapshot's bookkeeping (hoststate.hostname), not a collector's read."""
    out: dict[str, str] = {}
    for rel in sorted(paths - {"proc/sys/kernel/hostname"}):
        out.setdefault(re.sub(r"\d+", "N", rel), rel)
    return sorted(out.values())


def declared_absent(name: str, rel: str, err: int) -> bool:
    """Whether the table of a collector that reads ``rel`` declares this errno there an observed absence."""
    for mod in readers(name):
        _paths, src = coverage.lands(getattr(mod, "SOURCES", ()), rel)
        if src is not None and errno.errorcode[err] in src.absent:
            return True
    return False


def missing_conformance(name: str) -> list[str]:
    """What keeps a registered collector out of these tests: [] when it declares SOURCES and has a bench."""
    out = []
    if not hasattr(module(name), "SOURCES"):
        out.append(f"{name}: its module declares no SOURCES (what it reads -> where it lands)")
    if name not in BENCHES:
        out.append(f"{name}: no bench in tests/conformance.py BENCHES (recorded input to fault it on)")
    return out
