"""Coverage by declaration: what a collector could not read is never absent, removed or a guessed value.

The conformance tests find the collectors themselves: every entry of the registry
(hoststate.collectors.COLLECTORS) must declare ``SOURCES`` and have a bench in tests/conformance.py, a way of snapping
it from recorded input (a real fixture tree read through ``--root``, a real H200 NVML replay, the files its options
name) in which each thing it reads can be failed in turn. A collector added to the registry without both fails here;
one known not to conform is listed in GAPS with what it lacks, a strict xfail that fails once it conforms.

Each read is failed with each class its bench can inject (denied, missing, error, timeout: EACCES, ENOENT, EIO, a
stall past the deadline; NVML NoPermission, Unknown, Timeout). Compared with the clean snapshot under a policy that
reports every leaf, the faulted one may differ only by ``unreadable`` findings of the injected class (and the
collector's status): no value is removed, added or changed. An ENOENT where the collector's table declares the
absence observable (a probe such as /dev/dsa) is the one exception, and only there.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys

import pytest

from hoststate import collectors, coverage
from hoststate.diff import compare
from hoststate.policy import Policy, parse_rules
from tests.conformance import (
    BENCHES,
    GAPS,
    TreeBench,
    missing_conformance,
    module,
    params,
    registered,
)
from tests.conftest import FIXTURES, PYTHONPATH, REPO

EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "invalidating", "reason": "any"},
                                     {"path": "hoststate.**", "severity": "ignore", "reason": "bookkeeping"}]},
                           "exact.toml"))
# -- the registry: every collector declares its sources and has a bench ------------------------------------------


@pytest.mark.parametrize("name", params("sources"))
def test_each_registered_collector_declares_its_sources(name: str) -> None:
    mod = module(name)
    assert hasattr(mod, "SOURCES"), f"{name}: {mod.__name__} declares no SOURCES"
    assert all(isinstance(s, coverage.Source) for s in mod.SOURCES), name


@pytest.mark.parametrize("name", params("bench"))
def test_each_registered_collector_has_a_bench_that_reads_it(name: str) -> None:
    assert name in BENCHES, f"{name}: no bench in tests/conformance.py BENCHES (recorded input to fault it on)"
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
        "dummy: no bench in tests/conformance.py BENCHES (recorded input to fault it on)"]
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


@pytest.mark.parametrize(("name", "cls"), params("faults", classes=True))
def test_every_read_failure_is_unreadable_with_its_class_registered(name: str, cls: str) -> None:
    assert name in BENCHES, f"{name}: no bench in tests/conformance.py BENCHES"
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
