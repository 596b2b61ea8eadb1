"""Coverage by declaration: what a collector could not read is never absent, removed or a guessed value.

The conformance tests find the collectors themselves: every entry of the registry
(hoststate.collectors.COLLECTORS) must declare ``SOURCES`` and have a bench here, a way of snapping it from recorded
input (a real fixture tree read through ``--root``, a real H200 NVML replay, the files its options name) in which
each thing it reads can be failed in turn. A collector added to the registry without both fails here; one that is
known not to conform is listed in GAPS with what it lacks, a strict xfail that fails once it conforms.

Each read is failed with each class its bench can inject (denied, missing, error, timeout: EACCES, ENOENT, EIO, a
stall past the deadline; NVML NoPermission, Unknown, Timeout). Compared with the clean snapshot under a policy that
reports every leaf, the faulted one may differ only by ``unreadable`` findings of the injected class (and the
collector's status): no value is removed, added or changed. An ENOENT where the collector's table declares the
absence observable (a probe such as /dev/dsa) is the one exception, and only there.
"""

from __future__ import annotations

import copy
import errno
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hoststate import collectors, coverage
from hoststate.capture import collect
from hoststate.collectors import Context
from hoststate.diff import compare
from hoststate.nvml_replay import load_data
from hoststate.policy import Policy, parse_rules
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, REPO
from tests.faults import inject, reader_faults

EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "invalidating", "reason": "any"},
                                     {"path": "hoststate.**", "severity": "ignore", "reason": "bookkeeping"}]},
                           "exact.toml"))
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
    """The collector's module and those of the collectors it reads after (accel_config re-reads the dsa tree)."""
    info = next(i for i in collectors.COLLECTORS if i.name == name)
    return [module(n) for n in (name, *info.after)]


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
        return self.snap(name, seen=seen), _shapes(seen)

    def faults(self, name: str, cls: str) -> Iterator[Fault]:
        _clean, shapes = self.clean(name)
        assert len(shapes) >= 2, shapes
        for rel in shapes:
            if not _declared_absent(name, rel, ERRNOS[cls]):
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
        return snap, [*self.files, *_shapes(seen)]

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
    "accel_config": TreeBench(),
    "gpu": NvmlBench(),
    "vllm": InputsBench({"vllm_cmd": f"vllm serve Qwen/Qwen3-30B-A3B-FP8 --config {CONFIG}", "vllm_log": LOG,
                         "vllm_version": "0.12.0"}, (LOG, CONFIG)),
    "env": NothingBench(),
}
#: Known not to conform, by (collector, test), each with what it lacks: a strict xfail, so the entry must go once
#: the collector conforms. A new collector is never listed here.
GAPS: dict[tuple[str, str], str] = {
    ("env", "sources"): "reads only os.environ but declares no SOURCES (SOURCES = () would say it reads no file)",
    ("packages", "sources"): "declares no SOURCES: a dist-info folder it cannot list is dropped "
                             "(packages._local_listdir returns None), so an unreadable site-packages reads as "
                             "'none of the inference stack is installed'",
    ("packages", "bench"): "reads this interpreter's sys.path, never a --root tree: no recorded input to fault "
                           "until it records what it could not list",
    ("packages", "faults"): "no bench (above)",
    ("vllm", "faults"): "an unreadable --vllm-log removes vllm.cudagraph.{attention_backends,captures,config_line,"
                        "mismatch} (SOURCES' --vllm-log row lands only observed.**, cudagraph.observed.**, version*);"
                        " an unreadable --config adds vllm.args_error",
}


def _gap(name: str, test: str) -> list[Any]:
    why = GAPS.get((name, test))
    return [pytest.mark.xfail(reason=why, strict=True, raises=AssertionError)] if why else []


def _params(test: str, classes: bool = False) -> list[Any]:
    out = []
    for name in registered():
        bench = BENCHES.get(name)
        for cls in (bench.classes if bench is not None else ("any",)) if classes else (None,):
            args = (name, cls) if classes else (name,)
            out.append(pytest.param(*args, marks=_gap(name, test), id="-".join(a for a in args if a)))
    return out


def _shapes(paths: set[str]) -> list[str]:
    """One path of each shape (digits folded): every kind of file, not every instance of it. The host name is
    the snapshot's bookkeeping (hoststate.hostname), not a collector's read."""
    out: dict[str, str] = {}
    for rel in sorted(paths - {"proc/sys/kernel/hostname"}):
        out.setdefault(re.sub(r"\d+", "N", rel), rel)
    return sorted(out.values())


def _declared_absent(name: str, rel: str, err: int) -> bool:
    """Whether the table of a collector that reads ``rel`` declares this errno there an observed absence."""
    for mod in readers(name):
        _paths, src = coverage.lands(getattr(mod, "SOURCES", ()), rel)
        if src is not None and errno.errorcode[err] in src.absent:
            return True
    return False


# -- the registry: every collector declares its sources and has a bench ------------------------------------------


def missing_conformance(name: str) -> list[str]:
    """What keeps a registered collector out of these tests: [] when it declares SOURCES and has a bench."""
    out = []
    if not hasattr(module(name), "SOURCES"):
        out.append(f"{name}: its module declares no SOURCES (what it reads -> where it lands)")
    if name not in BENCHES:
        out.append(f"{name}: no bench in tests/test_coverage.py BENCHES (recorded input to fault it on)")
    return out


@pytest.mark.parametrize("name", _params("sources"))
def test_each_registered_collector_declares_its_sources(name: str) -> None:
    mod = module(name)
    assert hasattr(mod, "SOURCES"), f"{name}: {mod.__name__} declares no SOURCES"
    assert all(isinstance(s, coverage.Source) for s in mod.SOURCES), name


@pytest.mark.parametrize("name", _params("bench"))
def test_each_registered_collector_has_a_bench_that_reads_it(name: str) -> None:
    assert name in BENCHES, f"{name}: no bench in tests/test_coverage.py BENCHES (recorded input to fault it on)"
    snap, sites = BENCHES[name].clean(name)
    assert snap["collectors"][name]["status"] in ("ok", "partial"), snap["collectors"][name]
    assert sites, f"{name}: its bench gives nothing to fail"


def test_a_collector_added_to_the_registry_is_found_wanting(monkeypatch) -> None:
    """The registry is read, not a list here: a collector added to it (this one has no SOURCES, no bench) is
    named by missing_conformance, while every shipped one that is not a known gap is not."""
    import types

    dummy = types.ModuleType("hoststate_dummy_collector")
    dummy.collect = lambda ctx: collectors.Section(data={"x": 1})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, dummy.__name__, dummy)
    monkeypatch.setattr(collectors, "COLLECTORS",
                        (*collectors.COLLECTORS, collectors.CollectorInfo("dummy", dummy.__name__, "no test knows it")))
    assert "dummy" in registered()
    assert missing_conformance("dummy") == [
        "dummy: its module declares no SOURCES (what it reads -> where it lands)",
        "dummy: no bench in tests/test_coverage.py BENCHES (recorded input to fault it on)"]
    known = {name for name, _test in GAPS}
    assert [n for n in registered() if missing_conformance(n) and n not in known] == ["dummy"]


PLUGIN = """
import sys, types
from hoststate import collectors
dummy = types.ModuleType("hoststate_dummy_collector")
dummy.collect = lambda ctx: collectors.Section(data={"x": 1})
sys.modules[dummy.__name__] = dummy
collectors.COLLECTORS = (*collectors.COLLECTORS, collectors.CollectorInfo("dummy", dummy.__name__, "no test knows it"))
"""


def test_the_conformance_tests_parametrize_over_a_collector_added_to_the_registry(tmp_path) -> None:
    """A pytest run whose registry holds one more collector (a plugin adds it before collection) collects the
    conformance tests for it and fails them: a new collector cannot escape them."""
    (tmp_path / "dummy_registry.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), PYTHONPATH])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "dummy_registry",
                           "-k", "dummy and registered", "-rf", "tests/test_coverage.py"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    failed = set(re.findall(r"^FAILED tests/test_coverage.py::(\S+)", out, re.M))
    assert failed == {"test_each_registered_collector_declares_its_sources[dummy]",
                      "test_each_registered_collector_has_a_bench_that_reads_it[dummy]",
                      "test_every_read_failure_is_unreadable_with_its_class_registered[dummy-any]"}, out


# -- every read failure, for every registered collector ----------------------------------------------------------


@pytest.mark.parametrize(("name", "cls"), _params("faults", classes=True))
def test_every_read_failure_is_unreadable_with_its_class_registered(name: str, cls: str) -> None:
    assert name in BENCHES, f"{name}: no bench in tests/test_coverage.py BENCHES"
    bench = BENCHES[name]
    clean, _sites = bench.clean(name)
    checked = 0
    for fault in bench.faults(name, cls):
        entry = fault.snap["collectors"][name]
        assert entry["status"] in ("ok", "partial", "absent", "denied", "error", "timeout"), (fault.site, entry)
        text = str(entry.get("unreadable", {}))
        assert "not a declared source" not in text, (fault.site, entry)
        if fault.recorded is not None:
            key, reason = fault.recorded
            assert coverage.failures(entry.get("unreadable", {})).get(key) == reason, (fault.site, entry)
        for f in compare(clean, fault.snap, EXACT).findings:
            if f.change == "coverage":
                continue
            assert f.change == "unreadable" and f"({cls})" in str(f.new), (fault.site, f.path, f.change, f.new)
        checked += 1
    assert checked, f"{name}: nothing was failed"


@pytest.mark.parametrize("name", [n for n in registered() if isinstance(BENCHES.get(n), TreeBench)])
def test_a_collector_past_its_deadline_hides_everything_it_would_have_read(name: str) -> None:
    bench = BENCHES[name]
    clean, shapes = bench.clean(name)
    faulted = bench.snap(name, (shapes[0], -1), timeout=0.3)
    assert faulted["collectors"][name]["status"] == "timeout"
    findings = [f for f in compare(clean, faulted, EXACT).findings if f.change != "coverage"]
    assert findings and all(f.change == "unreadable" and "(timeout)" in str(f.new) for f in findings)


def _snap(name: str, fault: tuple[str, int] | None = None) -> dict:
    return TreeBench().snap(name, fault)


# -- the cases of the issue --------------------------------------------------------------------------------------


def test_a_denied_dsa_bus_is_not_an_absent_driver() -> None:
    """EACCES on /sys/bus/dsa/devices is recorded as denied, never as 'idxd driver not loaded'."""
    snap = _snap("dsa", ("sys/bus/dsa/devices", errno.EACCES))
    entry = snap["collectors"]["dsa"]
    assert entry["status"] == "denied" and "not loaded" not in entry["reason"]
    assert entry["unreadable"]["**"].startswith("denied: EACCES [sys/bus/dsa/devices]")


def test_eacces_on_system_files_is_unreadable_not_removed() -> None:
    clean = _snap("system")
    cpu0 = "sys/devices/system/cpu/cpu0"
    for rel, path in (("proc/sys/kernel/osrelease", "system.kernel.release"),
                      ("proc/cmdline", "system.kernel.cmdline"),
                      (f"{cpu0}/cpufreq/scaling_governor", "system.cpufreq.governor"),
                      (f"{cpu0}/cpufreq", "system.cpufreq")):
        faulted = _snap("system", (rel, errno.EACCES))
        found = {f.path: f for f in compare(clean, faulted).findings}
        hit = [f for p, f in found.items() if p == path or p.startswith(path + ".")]
        assert hit, (rel, sorted(found))
        assert all(f.change == "unreadable" and "(denied)" in str(f.new) for f in hit), (rel, hit)
        assert not any(f.change == "removed" for f in found.values()), rel


def test_summaries_count_failures_apart_from_observed_absences() -> None:
    """snap's and show's collector lines: NotSupported and declared absences are not "unreadable" (a real H200
    records five of them and reads everything it can)."""
    table = {"a": "absent: NotSupported [x]", "b": "denied: EACCES [y]", "c": "absent: ENXIO [z]", "d": "ENOENT"}
    assert coverage.described(table) == "  1 unreadable, 3 not present"
    assert coverage.described({"a": "absent: NotSupported [x]"}) == "  1 not present"
    assert coverage.described({}) == "" and coverage.described(None) == ""


def test_two_snapshots_of_the_real_h200_are_clean_and_declare_only_absences() -> None:
    """Snapped twice on the real H200 (fixtures/real/h200-coverage-*.toml): NVML's NotSupported fields are recorded
    as observed absences against their snapshot paths, the collector is ok, and the two snapshots compare clean."""
    from hoststate.snapshot import load

    a, b = (load(str(FIXTURES / "real" / f"h200-coverage-{s}.toml")) for s in "ab")
    gpu = a["collectors"]["gpu"]
    assert gpu["status"] == "ok" and gpu["unreadable"]
    assert all(coverage.parse_entry(v)[0] == "absent" for v in gpu["unreadable"].values())
    assert any(k.endswith("nvlink.**") for k in gpu["unreadable"])  # a passthrough H200 has no NVLink
    result = compare(a, b)
    assert result.verdict == "clean", [(f.path, f.change) for f in result.findings if f.severity != "info"]
