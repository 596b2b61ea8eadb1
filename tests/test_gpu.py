"""gpu collector: replays of recorded hosts through the fake NVML (real pynvml error classes)."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hoststate.capture import collect
from hoststate.collectors import COLLECTORS, Context, run_one
from hoststate.collectors import gpu as gpu_collector
from hoststate.coverage import failures
from hoststate.nvml_replay import ReplayError, load, load_data, synthetic_hgx
from hoststate.snapshot import loads, to_toml
from tests.conftest import FIXTURES, PYTHONPATH, REPO

NVML = FIXTURES / "nvml"
REAL = FIXTURES / "real"
H200_UUID = "GPU-bfeb625c-90a3-3bdc-4357-0cfe0a730e11"
GPU_INFO = next(c for c in COLLECTORS if c.name == "gpu")


def _replay_data(name: str) -> dict[str, Any]:
    return json.loads((NVML / name).read_text())


def snap_of(nvml: Any, **ctx: Any) -> dict[str, Any]:
    """A full snapshot of the gpu collector alone, through TOML and back (what a file holds)."""
    return loads(to_toml(collect(Context(nvml=nvml, **ctx), names=("gpu",))))


def _check_script() -> Any:
    spec = importlib.util.spec_from_file_location("check_nvidia_smi", REPO / "scripts" / "check_nvidia_smi.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the real H200 -------------------------------------------------------------------------------


#: What a Hopper GPU answers NotSupported among the modes and health calls: it remaps rows instead of retiring
#: pages, and has no workload power profiles (a live H200: fixtures/real/h200-gpu-modes.json).
HOPPER_ABSENT = ("workload_power_profiles", "health/retired_pages_sbe", "health/retired_pages_dbe",
                 "health/retired_pages_pending")


def test_h200_replay_layout_and_values():
    nvml = load(str(NVML / "h200.json"))
    snap = snap_of(nvml)
    status = snap["collectors"]["gpu"]
    # NVLink on one passthrough GPU is NotSupported: recorded, but the host is fully described.
    assert status["status"] == "ok"
    absent = ("nvlink", *HOPPER_ABSENT)
    assert failures(status["unreadable"]) == {f"{H200_UUID}/{key}": "NotSupported" for key in absent}
    gpu = snap["gpu"]
    assert gpu["driver_version"] == "580.159.04"
    assert gpu["cuda_driver_version"] == "13.0"
    assert gpu["nvml_version"] == "13.580.159.04"
    assert gpu["bindings_version"] == "13.610.43"
    assert gpu["count"] == 1
    dev = gpu["devices"][H200_UUID]
    expected = {
        "index": 0, "name": "NVIDIA H200", "pci_bus_id": "00000000:00:06.0", "serial": "1653924092642",
        "pci_device_id": "0x233510DE", "pci_subsystem_id": "0x18BF10DE",
        "board_part_number": "692-2G520-0282-001", "vbios_version": "96.00.A5.00.1A",
        "inforom_image_version": "G520.0282.02.02", "gsp_firmware_mode": True, "gsp_firmware_version": "580.159.04",
        "architecture": "Hopper", "compute_capability": "9.0", "memory_total_bytes": 150754820096,
        "persistence_mode": True, "compute_mode": "default", "ecc_mode_current": True, "ecc_mode_pending": True,
        "mig_mode_current": False, "mig_mode_pending": False, "power_limit_mw": 700000,
        "power_default_limit_mw": 700000, "power_enforced_limit_mw": 700000, "power_min_limit_mw": 200000,
        "power_max_limit_mw": 700000, "clocks_applications_sm_mhz": 1980, "clocks_applications_mem_mhz": 3201,
        "clocks_default_applications_sm_mhz": 1980, "clocks_max_sm_mhz": 1980, "clocks_max_mem_mhz": 3201,
        "pcie_max_link_gen": 5, "pcie_max_link_width": 16, "cpu_affinity": "0-15", "memory_affinity": "0",
        "virtualization_mode": "passthrough", "module_id": 5,
    }  # fmt: skip
    assert {k: dev.get(k) for k in expected} == expected
    assert len(dev["clocks_event_reasons_supported"]) == 9  # 511: all nine reasons
    assert dev["nvlink"] == {"links_total": 0, "links_active": 0, "peers": 0}
    assert gpu["fabric"] == {H200_UUID: {"state": "not_supported"}}  # success with state 0 is a value
    assert "topology" not in gpu and "p2p" not in gpu  # one GPU: no pairs
    obs = dev["observed"]
    assert obs["clocks_sm_mhz"] == 345 and obs["temperature_gpu_c"] == 36 and obs["pstate"] == "P0"
    assert obs["clocks_event_reasons"] == ["gpu_idle"] and obs["processes"] == []
    # volatile readings only under observed
    assert not any(k in dev for k in ("temperature_gpu_c", "power_draw_mw", "pstate"))
    assert nvml.init_calls == 1 and nvml.shutdown_calls == 1


@pytest.mark.parametrize(
    "snapshot, xml_file",
    [
        pytest.param(None, "h200-recorded-nvidia-smi-q.xml", id="replay-vs-recorded-smi"),
        pytest.param("h200-snapshot.toml", "h200-nvidia-smi-q.xml", id="real-h200-snap-vs-smi"),
        pytest.param("h200-host2-snapshot.toml", "h200-host2-nvidia-smi-q.xml", id="second-real-h200-snap-vs-smi"),
    ],
)
def test_h200_agrees_with_nvidia_smi(snapshot, xml_file):
    """The check script kept for real hosts, run on the replay of the recorded host and on the
    snapshot taken on a real H200 (fixtures/real), each against nvidia-smi -q -x of that host."""
    check = _check_script()
    snap = loads((REAL / snapshot).read_text()) if snapshot else snap_of(load(str(NVML / "h200.json")))
    rows = check.compare(snap, (REAL / xml_file).read_text())
    assert [r for r in rows if not r[4]] == []
    assert len(rows) >= 35
    labels = {r[1] for r in rows}
    for field in ("name", "uuid", "pci_bus_id", "vbios_version", "memory_total (MiB)", "power_limit (W, requested)",
                  "clocks_applications_graphics_mhz", "clocks_max_sm_mhz", "pcie_max_link_gen"):  # fmt: skip
        assert field in labels


def test_h200_replay_independent_xml_parse():
    """Not trusting the check script alone: read the recorded nvidia-smi XML directly."""
    gpu_xml = ET.parse(REAL / "h200-recorded-nvidia-smi-q.xml").getroot().find("gpu")
    assert gpu_xml is not None
    dev = snap_of(load(str(NVML / "h200.json")))["gpu"]["devices"][H200_UUID]
    assert dev["name"] == gpu_xml.findtext("product_name")
    assert dev["uuid"] == gpu_xml.findtext("uuid")
    assert dev["pci_bus_id"] == gpu_xml.get("id")
    assert dev["vbios_version"] == gpu_xml.findtext("vbios_version")

    def num(path: str) -> float:
        return float(gpu_xml.findtext(path).split()[0])  # "143771 MiB", "700.00 W", "1980 MHz"

    assert dev["memory_total_bytes"] == num("fb_memory_usage/total") * 2**20
    assert dev["power_limit_mw"] / 1000 == num("gpu_power_readings/requested_power_limit")
    assert dev["power_min_limit_mw"] / 1000 == num("gpu_power_readings/min_power_limit")
    assert dev["clocks_applications_graphics_mhz"] == num("applications_clocks/graphics_clock")
    assert dev["clocks_max_sm_mhz"] == num("max_clocks/sm_clock")
    assert dev["observed"]["clocks_sm_mhz"] == num("clocks/sm_clock")


def test_real_h200_snapshot_committed_is_a_valid_snapshot():
    snap = loads((REAL / "h200-snapshot.toml").read_text())
    assert snap["collectors"]["gpu"]["status"] == "ok"
    (dev,) = snap["gpu"]["devices"].values()
    assert dev["name"] == "NVIDIA H200" and dev["architecture"] == "Hopper"
    assert dev["nvlink"]["links_active"] == 0


# -- synthetic HGX H100 ---------------------------------------------------------------------------


def test_hgx_h100_nv18_everywhere():
    snap = snap_of(load(str(NVML / "hgx-h100-8.json")))
    assert snap["collectors"]["gpu"]["status"] == "ok"
    gpu = snap["gpu"]
    assert gpu["count"] == 8 and len(gpu["devices"]) == 8
    topo = gpu["topology"]
    assert sorted(topo) == [f"GPU{i}" for i in range(8)]
    for a in range(8):
        assert topo[f"GPU{a}"] == {f"GPU{b}": "NV18" for b in range(8) if b != a}
    for dev in gpu["devices"].values():
        nv = dev["nvlink"]
        assert (nv["links_active"], nv["links_total"], nv["peers"]) == (18, 18, 7)
        link = nv["links"]["0"]
        assert link["state"] == "active" and link["version"] == 4 and link["remote_device_type"] == "switch"
        assert link["p2p_supported"] is True
        assert gpu["fabric"][dev["uuid"]]["state"] == "completed"
        assert gpu["fabric"][dev["uuid"]]["status"] == "Success"
    assert gpu["p2p"]["nvlink"]["GPU0"]["GPU7"] == "ok"
    assert set(gpu["p2p"]) == {"read", "write", "nvlink", "atomics"}
    devs = sorted(gpu["devices"].values(), key=lambda d: d["index"])
    assert devs[0]["cpu_affinity"] == "0-55,112-167" and devs[7]["memory_affinity"] == "1"


def test_hgx_h100_one_link_down():
    gpu = snap_of(load(str(NVML / "hgx-h100-8-link-down.json")))["gpu"]
    devs = sorted(gpu["devices"].values(), key=lambda d: d["index"])
    nv3 = devs[3]["nvlink"]
    assert (nv3["links_active"], nv3["links_total"]) == (17, 18)
    assert nv3["links"]["7"] == {"state": "inactive"}
    assert gpu["topology"]["GPU3"] == {f"GPU{b}": "NV17" for b in range(8) if b != 3}
    assert gpu["topology"]["GPU0"]["GPU3"] == "NV17" and gpu["topology"]["GPU0"]["GPU1"] == "NV18"


def test_hgx_h100_one_gpu_lost_keeps_the_others():
    nvml = load(str(NVML / "hgx-h100-8-gpu-lost.json"))
    snap = snap_of(nvml)
    status = snap["collectors"]["gpu"]
    assert status["status"] == "partial"
    # besides what Hopper does not support (page retirement, power profiles), only GPU 5 failed
    assert {k: v for k, v in failures(status["unreadable"]).items() if v != "NotSupported"} == {
        "devices/5": "GpuIsLost"}
    assert "GPU 5: GpuIsLost" in status["reason"]
    gpu = snap["gpu"]
    assert gpu["count"] == 8
    assert sorted(d["index"] for d in gpu["devices"].values()) == [0, 1, 2, 3, 4, 6, 7]
    assert "GPU5" not in gpu["topology"] and gpu["topology"]["GPU4"]["GPU6"] == "NV18"
    assert nvml.init_calls == 1 and nvml.shutdown_calls == 1


def test_gpu_lost_midway_through_a_device():
    data = synthetic_hgx(2)
    data["devices"][1]["calls"]["nvmlDeviceGetEccMode"] = {"error": "GpuIsLost"}
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    assert sec.status == "partial"
    assert [d["index"] for d in sec.data["devices"].values()] == [0]
    gpu0 = data["devices"][0]["calls"]["nvmlDeviceGetUUID"]
    assert sec.unreadable == {f"{data['devices'][1]['calls']['nvmlDeviceGetUUID']}/ecc_mode": "GpuIsLost",
                              **{f"{gpu0}/{key}": "NotSupported" for key in HOPPER_ABSENT}}


# -- per-call errors -----------------------------------------------------------------------------


def test_h200_call_errors_fixture():
    status = snap_of(load(str(NVML / "h200-call-errors.json")))["collectors"]["gpu"]
    assert status["status"] == "partial"
    assert failures(status["unreadable"]) == {
        f"{H200_UUID}/power_limit_mw": "NoPermission",
        f"{H200_UUID}/gsp_firmware_mode": "FunctionNotFound",
        f"{H200_UUID}/ecc_mode": "NotSupported",
        f"{H200_UUID}/nvlink": "NotSupported",
        **{f"{H200_UUID}/{key}": "NotSupported" for key in HOPPER_ABSENT},
    }
    assert "FunctionNotFound, NoPermission" in status["reason"]


@pytest.mark.parametrize("error", ["NotSupported", "NoPermission", "FunctionNotFound", "Unknown"])
@pytest.mark.parametrize(
    "call, fields",
    [
        ("nvmlDeviceGetPowerManagementLimit", ["power_limit_mw"]),
        ("nvmlDeviceGetEccMode", ["ecc_mode_current", "ecc_mode_pending"]),
        ("nvmlDeviceGetMigMode", ["mig_mode_current", "mig_mode_pending"]),
        ("nvmlDeviceGetVbiosVersion", ["vbios_version"]),
        ("nvmlDeviceGetMaxPcieLinkGeneration", ["pcie_max_link_gen"]),
    ],
)
def test_per_call_error_is_recorded_by_name(call, fields, error):
    data = _replay_data("h200.json")
    data["devices"][0]["calls"][call] = {"error": error}
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    dev = sec.data["devices"][H200_UUID]
    for field in fields:
        assert field not in dev
    assert error in sec.unreadable.values()
    assert sec.status == ("ok" if error == "NotSupported" else "partial")
    assert dev["name"] == "NVIDIA H200"  # the rest is still read


def test_per_clock_error_keys_name_the_field():
    data = _replay_data("h200.json")
    by_arg = {"0": 1980, "1": {"error": "NoPermission"}, "2": 3201}
    data["devices"][0]["calls"]["nvmlDeviceGetApplicationsClock"] = {"by_arg": by_arg}
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    assert sec.unreadable[f"{H200_UUID}/clocks_applications_sm_mhz"] == "NoPermission"
    assert sec.data["devices"][H200_UUID]["clocks_applications_graphics_mhz"] == 1980


def test_function_missing_from_driver_falls_back_to_older_call():
    data = _replay_data("h200.json")
    calls = data["devices"][0]["calls"]
    calls["nvmlDeviceGetTemperatureV"] = {"error": "FunctionNotFound"}
    calls["nvmlDeviceGetTemperature"] = {"by_arg": {"0": 40}}
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    assert sec.data["devices"][H200_UUID]["observed"]["temperature_gpu_c"] == 40
    assert sec.status == "ok"


def test_function_missing_from_bindings():
    data = _replay_data("h200.json")
    data["absent_functions"] = ["nvmlDeviceGetGspFirmwareMode", "c_nvmlGpuFabricInfoV_t"]
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    assert sec.unreadable[f"{H200_UUID}/gsp_firmware_mode"] == "NotInBindings"
    assert sec.unreadable[f"{H200_UUID}/fabric"] == "NotInBindings"
    assert sec.status == "partial"


def test_fake_raises_real_pynvml_error_classes():
    import pynvml

    data = _replay_data("h200.json")
    data["devices"][0]["calls"]["nvmlDeviceGetSerial"] = {"error": "NoPermission"}
    nvml = load_data(data)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        nvml.nvmlDeviceGetSerial(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(handle, 0)
    assert nvml.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert nvml.nvmlDeviceGetGspFirmwareVersion(handle) == b"580.159.04"  # bytes, as the real binding


# -- MIG, PCIe-only topology -----------------------------------------------------------------------


def test_mig_instances_when_enabled():
    data = synthetic_hgx(2)
    dev0 = data["devices"][0]
    dev0["calls"]["nvmlDeviceGetMigMode"] = [1, 1]
    dev0["calls"]["nvmlDeviceGetMaxMigDeviceCount"] = 7
    dev0["mig_devices"] = [
        {"calls": {"nvmlDeviceGetUUID": f"MIG-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "nvmlDeviceGetName":
                   "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "nvmlDeviceGetGpuInstanceId": i + 1,
                   "nvmlDeviceGetComputeInstanceId": 0, "nvmlDeviceGetMemoryInfo": {"total": 42949672960}}}
        for i in range(2)
    ]  # fmt: skip
    sec = gpu_collector.collect(Context(nvml=load_data(data)))
    dev = sec.data["devices"][dev0["calls"]["nvmlDeviceGetUUID"]]
    assert dev["mig_mode_current"] is True
    mig = dev["mig_devices"]
    assert sorted(mig) == ["MIG-00000000-aaaa-bbbb-cccc-dddddddddddd", "MIG-00000001-aaaa-bbbb-cccc-dddddddddddd"]
    assert mig["MIG-00000001-aaaa-bbbb-cccc-dddddddddddd"]["gpu_instance_id"] == 2
    assert sec.status == "ok"  # empty MIG slots (NotFound) are not failures


def test_pcie_only_pairs_use_common_ancestor():
    data = synthetic_hgx(4)
    for dev in data["devices"]:
        dev["calls"]["nvmlDeviceGetNvLinkState"] = {"error": "NotSupported"}
    data["pairs"]["nvmlDeviceGetTopologyCommonAncestor"] = {"0,1": 10, "2,3": 20, "0,2": 30, "*": 50}
    gpu = gpu_collector.collect(Context(nvml=load_data(data))).data
    topo = gpu["topology"]
    assert topo["GPU0"] == {"GPU1": "PIX", "GPU2": "PHB", "GPU3": "SYS"}
    assert topo["GPU3"]["GPU2"] == "PXB"
    assert all(d["nvlink"]["peers"] == 0 for d in gpu["devices"].values())


# -- absent, skipped, init, timeout ----------------------------------------------------------------


@pytest.mark.parametrize("error, status", [("DriverNotLoaded", "absent"), ("LibraryNotFound", "absent"),
                                           ("NoPermission", "denied"), ("LibRmVersionMismatch", "error")])  # fmt: skip
def test_init_failure(error, status):
    data = _replay_data("h200.json")
    data["init"] = {"error": error}
    nvml = load_data(data)
    sec = gpu_collector.collect(Context(nvml=nvml))
    assert (sec.status, sec.reason) == (status, f"nvmlInit: {error}")
    assert sec.data == {} and nvml.calls == 1


def test_shutdown_even_when_reading_raises(monkeypatch):
    nvml = load(str(NVML / "h200.json"))

    def boom(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("collector bug")

    monkeypatch.setattr(gpu_collector, "_collect", boom)
    with pytest.raises(RuntimeError):
        gpu_collector.collect(Context(nvml=nvml))
    assert nvml.shutdown_calls == 1


def test_hung_driver_gives_timeout_and_the_snapshot_is_still_written():
    data = _replay_data("h200.json")
    data["devices"][0]["calls"]["nvmlDeviceGetEccMode"] = {"hang": 3}
    ctx = Context(nvml=load_data(data), timeout=0.2)
    sec = run_one(GPU_INFO, ctx)
    assert sec.status == "timeout"
    snap = loads(to_toml(collect(Context(nvml=load_data(data), timeout=0.2), names=("gpu",))))
    assert snap["collectors"]["gpu"]["status"] == "timeout"


def test_under_root_without_replay_is_skipped(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_collector.REPLAY_ENV, raising=False)
    sec = gpu_collector.collect(Context(root=str(tmp_path)))
    assert sec.status == "skipped" and "--root" in sec.reason


def test_under_root_with_replay_env(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_collector.REPLAY_ENV, str(NVML / "h200.json"))
    sec = gpu_collector.collect(Context(root=str(tmp_path)))
    assert sec.status == "ok" and H200_UUID in sec.data["devices"]


def test_bad_replay_file_is_an_error(tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    monkeypatch.setenv(gpu_collector.REPLAY_ENV, str(bad))
    sec = gpu_collector.collect(Context())
    assert sec.status == "error" and "not an NVML replay" in sec.reason
    with pytest.raises(ReplayError):
        load(str(tmp_path / "missing.json"))


def test_no_driver_is_absent_without_importing_pynvml(monkeypatch):
    monkeypatch.delenv(gpu_collector.REPLAY_ENV, raising=False)
    monkeypatch.setattr(gpu_collector, "DRIVER_MARKERS", ("/nonexistent/nvidiactl",))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    sec = gpu_collector.collect(Context())
    assert sec.status == "absent" and "no NVIDIA driver" in sec.reason
    assert "pynvml" not in sys.modules


def test_shadowing_pynvml_package_is_an_error(monkeypatch):
    import types

    monkeypatch.delenv(gpu_collector.REPLAY_ENV, raising=False)
    monkeypatch.setattr(gpu_collector, "DRIVER_MARKERS", ("/",))
    old = types.ModuleType("pynvml")
    old.__file__ = "/site-packages/pynvml/__init__.py"
    monkeypatch.setitem(sys.modules, "pynvml", old)
    sec = gpu_collector.collect(Context())
    assert sec.status == "error" and "uninstall pynvml" in sec.reason


def test_show_and_collector_import_never_import_pynvml():
    code = (
        "import sys, hoststate.collectors.gpu, hoststate.nvml_replay, hoststate.snapshot; "
        "print('pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


# -- the CLI and the synthetic generator ---------------------------------------------------------


def test_cli_snap_on_replay(tmp_path):
    env = {"HOSTSTATE_NVML_REPLAY": str(NVML / "hgx-h100-8-link-down.json"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": PYTHONPATH}  # fmt: skip
    out = tmp_path / "snap.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "hoststate", "snap", "--only", "gpu", "-o", str(out)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    snap = loads(out.read_text())
    assert snap["gpu"]["topology"]["GPU3"]["GPU0"] == "NV17"


@pytest.mark.parametrize("gpus", [1, 8, 64])
def test_synthetic_sizes(gpus):
    gpu = gpu_collector.collect(Context(nvml=load_data(synthetic_hgx(gpus)))).data
    assert len(gpu["devices"]) == gpus
    assert len(gpu.get("topology", {})) == (gpus if gpus > 1 else 0)


def test_committed_synthetic_fixtures_match_the_generator():
    assert _replay_data("hgx-h100-8.json") == json.loads(json.dumps(synthetic_hgx(8)))
    assert _replay_data("hgx-h100-8-link-down.json") == json.loads(json.dumps(synthetic_hgx(8, link_down=(3, 7))))
    assert _replay_data("hgx-h100-8-gpu-lost.json") == json.loads(json.dumps(synthetic_hgx(8, lost=5)))


# -- pure helpers ---------------------------------------------------------------------------------


def test_cpulist_and_event_reasons():
    assert gpu_collector.cpulist([65535, 0, 0, 0]) == "0-15"
    assert gpu_collector.cpulist([0b1011]) == "0-1,3"
    assert gpu_collector.cpulist([0, 1]) == "64"
    assert gpu_collector.cpulist([]) == ""
    assert gpu_collector.event_reasons(0x5) == ["gpu_idle", "sw_power_cap"]
    assert gpu_collector.event_reasons(0x200) == ["0x200"]


def test_keys_are_snake_case_and_values_toml_types():
    import re

    gpu = snap_of(load(str(NVML / "hgx-h100-8.json")))["gpu"]
    key_ok = re.compile(r"^([a-z][a-z0-9_]*|GPU-[0-9a-f-]+|MIG-[0-9a-f-]+|GPU\d+|\d+)$")

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                assert key_ok.match(k), f"{path}.{k}"
                walk(v, f"{path}.{k}")
        elif isinstance(value, list):
            for v in value:
                walk(v, path)
        else:
            assert isinstance(value, (str, int, float, bool)), path

    walk(copy.deepcopy(gpu), "gpu")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20)))
@example(raw=bytes(range(16)))
def test_a_cluster_uuid_is_written_as_the_uuid_module_writes_it(raw: bytes) -> None:
    """gpu._uuid_text against uuid.UUID: the same text for 16 bytes, ValueError for any other length."""
    import uuid

    from hoststate.collectors import gpu

    if len(raw) == 16:
        assert gpu._uuid_text(raw) == str(uuid.UUID(bytes=raw))
    else:
        with pytest.raises(ValueError):
            uuid.UUID(bytes=raw)
        with pytest.raises(ValueError):
            gpu._uuid_text(raw)


@pytest.mark.parametrize("numa_node, online, expected", [("1", "0-1", "1"), ("-1", "0", "0"), ("-1", "0-1", "nvml"),
                                                         (None, "0", "nvml")])
def test_memory_affinity_is_read_from_sysfs_where_it_says_plainly(tmp_path, numa_node, online, expected):
    """A live host's memory affinity comes from the GPU's numa_node in sysfs (NVML's first affinity query costs
    8-10 ms); where sysfs names no node and more than one is online, or has no file, NVML is asked. The replay
    answers "7" for NVML, which no sysfs tree here says, so the source shows."""
    from hoststate.io import Reader

    data = json.loads((NVML / "h200.json").read_text())
    device = data["devices"][0]["calls"]
    device["nvmlDeviceGetMemoryAffinity"] = [1 << 7]
    bus = device["nvmlDeviceGetPciInfo"]["busId"]
    bdf = gpu_collector._sysfs_bdf(bus)
    pci = tmp_path / "sys" / "bus" / "pci" / "devices" / bdf
    pci.mkdir(parents=True)
    if numa_node is not None:
        (pci / "numa_node").write_text(numa_node + "\n")
    (tmp_path / "sys" / "devices" / "system" / "node").mkdir(parents=True)
    (tmp_path / "sys" / "devices" / "system" / "node" / "online").write_text(online + "\n")
    section = gpu_collector._collect(load_data(data), sysfs=Reader(str(tmp_path)))
    (dev,) = section.data["devices"].values()
    assert dev["memory_affinity"] == ("7" if expected == "nvml" else expected)


# -- the clock-event reasons that are the hardware holding the clocks down ----------------------------------------


def _with_mask(mask: int) -> dict[str, Any]:
    data = _replay_data("h200.json")
    data["devices"][0]["calls"]["nvmlDeviceGetCurrentClocksEventReasons"] = mask
    return snap_of(load_data(data))


@pytest.mark.parametrize(("mask", "held"), [(0x8, ["hw_slowdown"]), (0x1 | 0x40, ["hw_thermal_slowdown"]),
                                            (0x80 | 0x8, ["hw_slowdown", "hw_power_brake_slowdown"]),
                                            (0x20 | 0x4, ["sw_thermal_slowdown"])])
def test_the_hardware_holding_the_clocks_down_is_a_warning(mask, held):
    """nvml.h: HW slowdown, HW thermal and power-brake slowdown cut the core clocks "by a factor of 2 or more"; a
    snapshot taken in that state is reviewed, not silently passed as one more volatile reading (observed.**)."""
    from hoststate.diff import compare

    idle, hot = _with_mask(0x1), _with_mask(mask)
    assert "clocks_held_by_hardware" not in idle["gpu"]["devices"][H200_UUID]
    assert hot["gpu"]["devices"][H200_UUID]["clocks_held_by_hardware"] == held
    rated = {f.path.rsplit(".", 1)[-1]: f.severity for f in compare(idle, hot).findings if f.path.startswith("gpu.")}
    assert rated == {"clocks_held_by_hardware": "warning"}
    assert {f.severity for f in compare(hot, idle).findings if f.path.startswith("gpu.")} == {"warning"}


@pytest.mark.parametrize("mask", [0x0, 0x4, 0x1 | 0x4, 0x10])
def test_idle_load_and_a_power_cap_are_not_the_hardware(mask):
    """What a healthy H200 shows sampled every second, idle (0x1) and under a dense matmul (0x4, sw_power_cap;
    fixtures/watch/h200-*.json), and a sync-boost group: no leaf, and nothing above ignore."""
    from hoststate.diff import compare

    other = _with_mask(mask)
    assert "clocks_held_by_hardware" not in other["gpu"]["devices"][H200_UUID]
    assert {f.severity for f in compare(_with_mask(0x1), other).findings if f.path.startswith("gpu.")} <= {"ignore"}


def test_no_healthy_sample_recorded_on_the_h200_has_a_hardware_reason():
    """The watch traces of a real H200 (idle, dense matmul, a foreign process): the bits HARDWARE_REASONS names
    never show, so the warning does not wobble between idle and load."""
    from hoststate.nvml import EVENT_REASONS, HARDWARE_REASONS

    bits = sum(bit for bit, name in EVENT_REASONS if name in HARDWARE_REASONS)
    masks = [row[0] for name in ("h200-idle", "h200-dense-a", "h200-dense-b", "h200-foreign")
             for _t, rows in json.loads((FIXTURES / "watch" / f"{name}.json").read_text())["samples"] for row in rows]
    assert len(masks) == 118 and {m & bits for m in masks} == {0} and {1, 4} <= set(masks)
