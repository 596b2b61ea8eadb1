"""The peer-to-peer path between GPUs (hoststate/collectors/system.py ``_p2p``): IOMMU group and default domain
type of each GPU, ACS on every bridge between a GPU and its root port, read through --root from a sysfs tree
(fixtures/hosts/hgx-p2p, laid out by fixtures/gen_p2p.py), with every file failed in turn."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from hoststate import coverage, io
from hoststate.collectors import Section, settle_coverage, system
from hoststate.diff import compare
from hoststate.policy import Policy, default_policy, parse_rules
from tests.conftest import HOSTS
from tests.faults import reader_faults

TREE = HOSTS / "hgx-p2p"
EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "invalidating", "reason": "any"}]}, "exact.toml"))
SW0 = "sys/devices/pci0000:95/0000:95:01.0/0000:96:00.0/0000:97:00.0"


def _snap(root: Path | str = TREE, fault: tuple[str, int] | None = None, seen: set[str] | None = None,
          ) -> dict[str, Any]:
    with reader_faults(fault, seen):
        sec = Section()
        sec.data = {"p2p": system._p2p(io.Reader(str(root), sec.unreadable))}
        sec = settle_coverage(sec.settle(), system.SOURCES)
    entry: dict[str, Any] = {"status": sec.status, **({"unreadable": sec.unreadable} if sec.unreadable else {})}
    return {"collectors": {"system": entry}, "system": sec.data}


def test_the_tree_reads_as_its_p2p_path() -> None:
    snap = _snap()
    assert snap["collectors"]["system"]["status"] == "ok"
    p2p = snap["system"]["p2p"]
    assert sorted(p2p["gpus"]) == ["0000:18:00.0", "0000:19:00.0", "0000:98:00.0", "0000:99:00.0"]  # not the NIC
    assert p2p["gpus"]["0000:18:00.0"] == {"iommu_group": "41", "iommu_type": "DMA-FQ",
                                           "bridges": ["0000:15:01.0", "0000:16:00.0", "0000:17:00.0"]}
    assert p2p["gpus"]["0000:99:00.0"]["iommu_type"] == "identity"
    b = p2p["bridges"]
    assert b["0000:17:00.0"] == {"acs_capability": True, "acs": ["SV", "RR", "CR", "UF"], "acs_redirect": True}
    assert b["0000:97:01.0"] == {"acs_capability": True, "acs": [], "acs_redirect": False}
    assert b["0000:16:00.0"] == {"acs_capability": False}  # the switch's upstream port has no ACS


def _shapes(paths: set[str]) -> list[str]:
    return sorted({re.sub(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d|\d+", "N", p): p for p in paths}.values())


@pytest.mark.parametrize("err", [errno.EACCES, errno.ENOENT, errno.EIO])
def test_every_read_failure_is_unreadable_with_its_class(err: int) -> None:
    seen: set[str] = set()
    clean = _snap(seen=seen)
    shapes = _shapes(seen)
    assert len(shapes) >= 6, shapes
    cls = {errno.EACCES: "denied", errno.ENOENT: "missing", errno.EIO: "error"}[err]
    checked = 0
    for rel in shapes:
        faulted = _snap(fault=(rel, err))
        unreadable = faulted["collectors"]["system"].get("unreadable", {})
        assert "not a declared source" not in str(unreadable), (rel, unreadable)
        _paths, src = coverage.lands(system.SOURCES, rel)
        assert src is not None, rel
        if errno.errorcode[err] in src.absent:
            continue  # an observed absence (no IOMMU group, a kernel before 5.11), declared so
        assert coverage.failures(unreadable).get(rel) == errno.errorcode[err], (rel, unreadable)
        for f in compare(clean, faulted, EXACT).findings:
            if f.change != "coverage":
                assert f.change == "unreadable" and f"({cls})" in str(f.new), (rel, f)
        checked += 1
    assert checked >= len(shapes) // 2


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "t"
    shutil.copytree(TREE, tree, symlinks=True)
    return tree


def test_an_unprivileged_read_of_config_space_is_unreadable_not_no_acs(tmp_path: Path) -> None:
    """Without root, sysfs gives the first 64 bytes of config space: ACS is then unknown, never "none"."""
    tree = _copy(tmp_path)
    config = tree / SW0 / "config"
    config.write_bytes(config.read_bytes()[:64])
    snap = _snap(tree)
    unreadable = snap["collectors"]["system"]["unreadable"]
    assert "need root" in unreadable['p2p.bridges."0000:97:00.0".**'], unreadable
    assert "0000:97:00.0" not in snap["system"]["p2p"]["bridges"]


def test_acs_redirect_turned_on_is_invalidating(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    config = bytearray((tree / SW0 / "config").read_bytes())
    config[0x148 + 6] = 0x1D  # SV, RR, CR, UF: what the kernel enables on a downstream port with an IOMMU on
    (tree / SW0 / "config").write_bytes(bytes(config))
    found = {f.path: f.severity for f in compare(_snap(), _snap(tree), default_policy()).findings}
    assert found['system.p2p.bridges."0000:97:00.0".acs_redirect'] == "invalidating", found
    assert found['system.p2p.bridges."0000:97:00.0".acs'] == "warning", found


def test_a_gpu_without_an_iommu_on_the_root_bus(tmp_path: Path) -> None:
    """As on the H200 VM this was checked on: its GPU 0000:00:06.0 sits on the root bus (no bridge) and has no
    iommu_group link (no virtual IOMMU)."""
    gpu = tmp_path / "sys/devices/pci0000:00/0000:00:06.0"
    gpu.mkdir(parents=True)
    (gpu / "class").write_text("0x030200\n")
    (gpu / "vendor").write_text("0x10de\n")
    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:06.0", bus / "0000:00:06.0")
    snap = _snap(tmp_path)
    assert snap["system"]["p2p"] == {"gpus": {"0000:00:06.0": {"iommu_group": "none", "bridges": []}}}
    assert snap["collectors"]["system"]["status"] == "ok"


def test_a_host_without_nvidia_gpus_records_nothing() -> None:
    assert _snap(HOSTS / "seed-experiment")["system"]["p2p"] == {}


def test_acs_control_walks_the_capability_chain() -> None:
    assert system.acs_control(bytes(4096)) is None
    with pytest.raises(ValueError):
        system.acs_control(bytes(256))
    looped = bytearray(4096)
    looped[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # points at itself
    assert system.acs_control(bytes(looped)) is None
