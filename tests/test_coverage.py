"""Coverage by declaration: what a collector could not read is never absent, removed or a guessed value.

The conformance tests inject EACCES, ENOENT and EIO on every kind of file each collector reads from a real
fixture tree (and a stall past the collector's deadline), and NoPermission, Unknown and Timeout on every NVML
call of a real H200 replay. Compared with the clean snapshot under a policy that reports every leaf, the faulted
one may differ only by ``unreadable`` findings of the injected class (and the collector's status): no value is
removed, added or changed. An ENOENT where the collector's table declares the absence observable (a probe such
as /dev/dsa) is the one exception, and only there.
"""

from __future__ import annotations

import copy
import errno
import json
import re
from pathlib import Path
from typing import Any

import pytest

from hoststate import coverage
from hoststate.capture import collect
from hoststate.collectors import Context, dsa, system
from hoststate.collectors import accel_config as accel
from hoststate.diff import compare
from hoststate.nvml_replay import load as load_replay
from hoststate.policy import Policy, parse_rules
from tests.conftest import FIXTURES, HOSTS
from tests.faults import reader_faults

EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "invalidating", "reason": "any"},
                                     {"path": "hoststate.**", "severity": "ignore", "reason": "bookkeeping"}]},
                           "exact.toml"))
TREE = str(HOSTS / "seed-experiment")
MODULES = {"dsa": dsa, "system": system, "accel_config": accel}
ERRNOS = {errno.EACCES: "denied", errno.ENOENT: "missing", errno.EIO: "error"}


def _snap(name: str, fault: tuple[str, int] | None = None, seen: set[str] | None = None, **ctx: Any) -> dict:
    with reader_faults(fault, seen):  # a negative errno stalls past the deadline: the collector is abandoned
        snap = collect(Context(root=TREE, **ctx), (name,))
    snap["collectors"] = {name: snap["collectors"][name]}  # this collector alone, on both sides
    return snap


def _shapes(paths: set[str]) -> list[str]:
    """One path of each shape (digits folded): every kind of file, not every instance of it. The host name is
    the snapshot's bookkeeping (hoststate.hostname), not a collector's read."""
    out: dict[str, str] = {}
    for rel in sorted(paths - {"proc/sys/kernel/hostname"}):
        out.setdefault(re.sub(r"\d+", "N", rel), rel)
    return sorted(out.values())


def _declared_absent(name: str, rel: str, err: int) -> bool:
    """Whether the table of the collector that reads ``rel`` declares this errno there an observed absence
    (accel_config's cross-checks read the DSA tree through the dsa collector)."""
    for module in (MODULES[name], dsa) if name == "accel_config" else (MODULES[name],):
        _paths, src = coverage.lands(module.SOURCES, rel)
        if src is not None and errno.errorcode[err] in src.absent:
            return True
    return False


@pytest.fixture(scope="module")
def reads() -> dict[str, tuple[dict, list[str]]]:
    out = {}
    for name in MODULES:
        seen: set[str] = set()
        out[name] = (_snap(name, seen=seen), _shapes(seen))
    return out


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("err", list(ERRNOS))
def test_every_read_failure_is_unreadable_with_its_class(reads: dict, name: str, err: int) -> None:
    clean, shapes = reads[name]
    assert len(shapes) >= (10 if name != "accel_config" else 2)
    checked = 0
    for rel in shapes:
        faulted = _snap(name, (rel, err))
        entry = faulted["collectors"][name]
        assert entry["status"] in ("ok", "partial", "absent", "denied", "error"), (rel, entry)
        declared = coverage.failures(entry.get("unreadable", {}))
        if _declared_absent(name, rel, err):
            continue  # an observed absence, declared so by the collector's table
        assert declared.get(rel) == errno.errorcode[err], (rel, entry)
        assert "not a declared source" not in str(entry.get("unreadable")), (rel, entry)
        for f in compare(clean, faulted, EXACT).findings:
            if f.change == "coverage":
                continue
            assert f.change == "unreadable", (rel, f)
            assert f"({ERRNOS[err]})" in str(f.new), (rel, f)
        checked += 1
    assert checked >= len(shapes) // 2


@pytest.mark.parametrize("name", list(MODULES))
def test_a_collector_past_its_deadline_hides_everything_it_would_have_read(reads: dict, name: str) -> None:
    clean, shapes = reads[name]
    faulted = _snap(name, (shapes[0], -1), timeout=0.3)
    assert faulted["collectors"][name]["status"] == "timeout"
    findings = [f for f in compare(clean, faulted, EXACT).findings if f.change != "coverage"]
    assert findings and all(f.change == "unreadable" and "(timeout)" in str(f.new) for f in findings)


# -- NVML: every call of a real H200 replay ------------------------------------------------------------------

H200 = FIXTURES / "nvml" / "h200.json"
NVML_ERRORS = {"NoPermission": "denied", "Unknown": "error", "Timeout": "timeout"}


def _gpu_snap(data: dict, tmp_path: Path) -> dict:
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(data))
    snap = collect(Context(root=TREE, nvml=load_replay(str(path))), ("gpu",))
    snap["collectors"] = {"gpu": snap["collectors"]["gpu"]}
    return snap


def test_every_nvml_call_failure_is_unreadable_with_its_class(tmp_path: Path) -> None:
    data = json.loads(H200.read_text())
    clean = _gpu_snap(data, tmp_path)
    assert clean["collectors"]["gpu"]["status"] in ("ok", "partial")
    calls = [("system", k) for k in data["system"]] + [("device", k) for k in data["devices"][0]["calls"]]
    assert len(calls) >= 30
    for where, call in calls:
        for error, cls in NVML_ERRORS.items():
            broken = copy.deepcopy(data)
            table = broken["system"] if where == "system" else broken["devices"][0]["calls"]
            table[call] = {"error": error}
            faulted = _gpu_snap(broken, tmp_path)
            text = str(faulted["collectors"]["gpu"].get("unreadable", {}))
            assert "not a declared source" not in text, (call, text)
            for f in compare(clean, faulted, EXACT).findings:
                if f.change == "coverage":
                    continue
                assert f.change == "unreadable" and f"({cls})" in str(f.new), (call, error, f)


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
