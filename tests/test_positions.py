"""GPUs compare by position (PCI bus id, else NVML index), never by UUID or serial: in diff, digest and fleet.

Snapshots come from the gpu collector reading replayed NVML hosts (fixtures/nvml/hgx-h100-8*.json): the same
8-GPU HGX with other UUIDs, serials, MIG UUIDs and fabric cluster UUID; with one GPU of another model; with a
GPU lost or missing; with NVML's index order permuted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hoststate import nvml_replay, positions
from hoststate.capture import collect
from hoststate.collectors import Context
from hoststate.diff import compare
from hoststate.digest import digest
from hoststate.fleet import run_fleet
from hoststate.snapshot import load, to_toml
from tests.conftest import FIXTURES, HOSTS

HGX = FIXTURES / "nvml" / "hgx-h100-8.json"
MIG_GPU = 2


def hgx() -> dict[str, Any]:
    return json.loads(HGX.read_text())


def with_mig(data: dict[str, Any], prefix: str = "a") -> dict[str, Any]:
    """GPU 2 in MIG mode with two MIG devices whose UUIDs start with ``prefix``."""
    dev = data["devices"][MIG_GPU]
    dev["calls"]["nvmlDeviceGetMigMode"] = [1, 1]
    dev["calls"]["nvmlDeviceGetMaxMigDeviceCount"] = 7
    dev["mig_devices"] = [
        {"calls": {"nvmlDeviceGetUUID": f"MIG-{prefix}{slot}000000-0000-0000-0000-000000000000",
                   "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "nvmlDeviceGetGpuInstanceId": slot + 1,
                   "nvmlDeviceGetComputeInstanceId": 0, "nvmlDeviceGetMemoryInfo": {"total": 40 << 30}}}
        for slot in range(2)
    ]
    return data


def other_identities(data: dict[str, Any]) -> dict[str, Any]:
    """The same host with other boards: new UUIDs, serials, MIG UUIDs and fabric cluster UUID."""
    data = copy.deepcopy(data)
    for i, dev in enumerate(data["devices"]):
        dev["calls"]["nvmlDeviceGetUUID"] = f"GPU-ffff{i:04d}-0000-4000-8000-00000000{i:04d}"
        dev["calls"]["nvmlDeviceGetSerial"] = f"99999999{i:05d}"
        for m in dev.get("mig_devices", []):
            m["calls"]["nvmlDeviceGetUUID"] = m["calls"]["nvmlDeviceGetUUID"].replace("MIG-a", "MIG-b")
    data["device_defaults"]["nvmlDeviceGetGpuFabricInfoV"]["clusterUuid"] = list(range(16))
    return data


def snap(data: dict[str, Any], tmp_path: Path, name: str) -> dict[str, Any]:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    ctx = Context(root=str(HOSTS / "seed-baseline"), nvml=nvml_replay.load(str(path)))
    result = collect(ctx, ("gpu",))
    assert result["collectors"]["gpu"]["status"] in ("ok", "partial"), result["collectors"]["gpu"]
    # GPUs only: the collectors not run are left out of both sides (skipped on both, each would be a warning).
    result["collectors"] = {"gpu": result["collectors"]["gpu"]}
    return result


def invalidating(a: dict, b: dict) -> list:
    return [f for f in compare(a, b).findings if f.severity == "invalidating"]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[dict, dict]:
    base = with_mig(hgx())
    return snap(base, tmp_path, "a"), snap(other_identities(base), tmp_path, "b")


def test_nodes_differing_only_in_uuids_and_serials_match(pair: tuple[dict, dict], tmp_path: Path) -> None:
    a, b = pair
    assert set(a["gpu"]["devices"]).isdisjoint(b["gpu"]["devices"])  # the layout on disk still keys by UUID
    assert a["gpu"]["devices"][next(iter(a["gpu"]["devices"]))]["uuid"].startswith("GPU-")
    assert a["hoststate"]["digest"] == b["hoststate"]["digest"] == digest(a) == digest(b)
    result = compare(a, b)
    assert invalidating(a, b) == [] and result.verdict != "invalidating"
    changed = {f.path: f for f in result.findings}
    bus = a["gpu"]["devices"][next(iter(a["gpu"]["devices"]))]["pci_bus_id"]
    for leaf in ("uuid", "serial"):
        f = changed[f'gpu.devices."{bus}".{leaf}']
        assert f.severity == "info" and f.change == "changed"
    mig_bus = next(d["pci_bus_id"] for d in a["gpu"]["devices"].values() if d["index"] == MIG_GPU)
    mig = changed[f'gpu.devices."{mig_bus}".mig_devices.slot0.uuid']
    assert mig.severity == "info" and mig.old.startswith("MIG-a") and mig.new.startswith("MIG-b")
    assert changed[f'gpu.fabric."{bus}".cluster_uuid'].severity == "info"
    assert all(f.severity == "info" for f in result.findings), [f.path for f in result.findings]
    # fleet: one group, no outlier
    for name, s in (("a", a), ("b", b)):
        (tmp_path / f"{name}.toml").write_text(to_toml(s))
    report = run_fleet([str(tmp_path / "a.toml"), str(tmp_path / "b.toml")], jobs=1)
    assert len(report.groups) == 1 and report.exit_code == 0 and not report.warnings


def test_a_different_model_in_one_slot_is_invalidating(tmp_path: Path) -> None:
    base = hgx()
    other = other_identities(base)
    other["devices"][3]["calls"]["nvmlDeviceGetName"] = "NVIDIA H200"
    a, b = snap(base, tmp_path, "a"), snap(other, tmp_path, "b")
    assert digest(a) != digest(b)
    bus3 = base["devices"][3]["calls"]["nvmlDeviceGetPciInfo"]["busId"]
    [f] = invalidating(a, b)
    assert (f.path, f.old, f.new) == (f'gpu.devices."{bus3}".name', "NVIDIA H100 80GB HBM3", "NVIDIA H200")


def test_another_mig_layout_is_invalidating(tmp_path: Path) -> None:
    base = with_mig(hgx())
    other = other_identities(base)
    other["devices"][MIG_GPU]["mig_devices"][1]["calls"]["nvmlDeviceGetName"] = "NVIDIA H100 80GB HBM3 MIG 2g.20gb"
    a, b = snap(base, tmp_path, "a"), snap(other, tmp_path, "b")
    assert digest(a) != digest(b)
    [f] = invalidating(a, b)
    assert f.path.endswith(".mig_devices.slot1.name")


@pytest.mark.parametrize("how", ["lost", "missing"])
def test_a_gpu_missing_from_its_slot_is_invalidating(tmp_path: Path, how: str) -> None:
    base = hgx()
    other = other_identities(base)
    if how == "lost":
        other["devices"][5] = {"handle_error": "GpuIsLost"}
    else:
        del other["devices"][5]
        other["system"]["nvmlDeviceGetCount"] = 7
    a, b = snap(base, tmp_path, "a"), snap(other, tmp_path, "b")
    assert digest(a) != digest(b)
    found = {f.path: f for f in invalidating(a, b)}
    if how == "lost":  # NVML still counts it: GPU5 could not be read (the bus ids differ, so GPUs pair by index)
        name = found["gpu.devices.GPU5.name"]
        assert name.change == "unreadable" and "GpuIsLost" in name.new
        assert "gpu.devices.GPU4.name" not in found and "gpu.devices.GPU6.name" not in found
    else:  # NVML counts 7: the last index is gone
        assert found["gpu.count"].old == 8 and found["gpu.count"].new == 7
        assert found["gpu.devices.GPU7.name"].change == "removed"


def test_nvml_index_order_permuted_pairs_by_bus_id(tmp_path: Path) -> None:
    """Same boards in the same slots, enumerated in another order: only the index changes (a warning)."""
    base = hgx()
    permuted = copy.deepcopy(base)
    permuted["devices"] = base["devices"][4:] + base["devices"][:4]
    a, b = snap(base, tmp_path, "a"), snap(permuted, tmp_path, "b")
    assert digest(a) == digest(b)
    result = compare(a, b)
    assert invalidating(a, b) == []
    assert {f.path.rsplit(".", 1)[-1] for f in result.findings} == {"index"}
    assert all(f.severity == "warning" for f in result.findings)


def test_an_unreadable_gpu_field_maps_to_its_position(tmp_path: Path) -> None:
    base = hgx()
    other = other_identities(base)
    other["devices"][1]["calls"]["nvmlDeviceGetPowerManagementLimit"] = {"error": "NoPermission"}
    a, b = snap(base, tmp_path, "a"), snap(other, tmp_path, "b")
    bus1 = base["devices"][1]["calls"]["nvmlDeviceGetPciInfo"]["busId"]
    [f] = invalidating(a, b)
    assert (f.path, f.change) == (f'gpu.devices."{bus1}".power_limit_mw', "unreadable")
    assert "NoPermission" in f.new


def test_hosts_on_other_bus_ids_pair_by_index(tmp_path: Path) -> None:
    """Two VMs with the same GPUs at other bus ids: paired by index; the bus id is a warning, nothing invalidating."""
    base = hgx()
    moved = other_identities(base)
    for dev in moved["devices"]:
        dev["calls"]["nvmlDeviceGetPciInfo"]["busId"] = dev["calls"]["nvmlDeviceGetPciInfo"]["busId"].replace(
            "00000000:", "00000001:")
    a, b = snap(base, tmp_path, "a"), snap(moved, tmp_path, "b")
    result = compare(a, b)
    assert invalidating(a, b) == []
    bus = {f.path: f for f in result.findings}["gpu.devices.GPU0.pci_bus_id"]
    assert bus.severity == "warning" and bus.new.startswith("00000001:")
    # the digest keys by bus id, so fleet keeps them apart, and says why the outlier has nothing invalidating
    assert digest(a) != digest(b)
    for name, s in (("a", a), ("b", b)):
        (tmp_path / f"{name}.toml").write_text(to_toml(s))
    report = run_fleet([str(tmp_path / "a.toml"), str(tmp_path / "b.toml")], jobs=1, reference=str(tmp_path / "a.toml"))
    assert [o["findings"] for o in report.outliers] == [[]]
    assert any("PCI bus ids" in w["message"] for w in report.warnings)


def test_positions_never_change_the_input_and_leave_other_shapes_alone(pair: tuple[dict, dict]) -> None:
    a, _ = pair
    before = copy.deepcopy(a)
    keyed = positions.canonical(a)
    assert a == before
    assert all(not k.startswith("GPU-") for k in keyed["gpu"]["devices"])
    assert all("GPU-" not in k for k in keyed["collectors"]["gpu"].get("unreadable", {}))  # entries follow positions
    for odd in ({}, {"gpu": 3}, {"gpu": {"devices": {"x": 1}}}, {"gpu": {"devices": {"a": {"index": True}}}},
                {"gpu": {"devices": {"a": {"index": 0}, "b": {"index": 0}}}}):
        assert positions.canonical(odd) == odd


def test_real_h200_snapshots_of_two_hosts(tmp_path: Path) -> None:
    """The two real H200 VMs: the same GPU model at the same bus id; another board (UUID, serial, board revision)
    in another HGX module slot. Comparable, with equal digests."""
    a = load(str(FIXTURES / "real" / "h200-snapshot.toml"))
    b = load(str(FIXTURES / "real" / "h200-host2-snapshot.toml"))
    findings = {f.path: f for f in compare(a, b).findings}
    gpu = 'gpu.devices."00000000:00:06.0"'
    assert {p: f.severity for p, f in findings.items() if p.startswith(gpu)} == {
        f"{gpu}.uuid": "info", f"{gpu}.serial": "info", f"{gpu}.module_id": "info",
        f"{gpu}.board_part_number": "warning"}
    assert not any(f.severity == "invalidating" for f in findings.values())
    assert digest(a) == digest(b)
