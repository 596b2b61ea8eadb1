"""GPU modes and memory health through NVML (hoststate/collectors/gpu.py): Confidential Computing, the NVLink
bandwidth mode, clock offsets, workload power profiles, ECC error counts, row remapping and page retirement.

The H200 replay carries the values a live H200 answered (fixtures/real/h200-gpu-modes.json, recorded by
benchmarks/probe_gpu_modes.py); variants of it give a GPU with memory faults and one with CC and profiles on, and
the default policy rates each change.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hoststate.collectors import Context, run_all
from hoststate.diff import compare
from hoststate.nvml_replay import load as load_replay
from hoststate.policy import default_policy
from tests.conftest import FIXTURES

H200 = FIXTURES / "nvml" / "h200.json"
UUID = "GPU-bfeb625c-90a3-3bdc-4357-0cfe0a730e11"


def _snap(data: dict[str, Any], tmp_path: Path, name: str = "replay.json") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    sec = run_all(Context(root=str(tmp_path), nvml=load_replay(str(path))), ("gpu",))["gpu"]
    entry: dict[str, Any] = {"status": sec.status, **({"unreadable": sec.unreadable} if sec.unreadable else {})}
    return {"hoststate": {}, "collectors": {"gpu": entry}, "gpu": sec.data}


def test_the_h200_records_its_modes_and_a_clean_memory(tmp_path: Path) -> None:
    snap = _snap(json.loads(H200.read_text()), tmp_path)
    gpu = snap["gpu"]
    assert gpu["conf_compute"] == {"environment": "unavailable", "enabled": False, "dev_tools_mode": False}
    assert gpu["nvlink_bw_mode"] == 0
    dev = gpu["devices"][UUID]
    assert (dev["clock_offset_gpc_mhz"], dev["clock_offset_mem_mhz"]) == (0, 0)
    assert dev["health"] == {
        "ecc_errors_corrected_volatile": 0, "ecc_errors_corrected_aggregate": 0,
        "ecc_errors_uncorrected_volatile": 0, "ecc_errors_uncorrected_aggregate": 0,
        "remapped_rows_corrected": 0, "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": False, "remapped_rows_failure": False,
    }
    unreadable = snap["collectors"]["gpu"]["unreadable"]
    # Hopper remaps rows and has no page retirement nor power profiles: observed absences, status stays ok
    assert unreadable[f"devices.{UUID}.health.retired_pages_dbe"].startswith("absent: NotSupported")
    assert unreadable[f"devices.{UUID}.workload_power_profiles.**"].startswith("absent: NotSupported")
    assert snap["collectors"]["gpu"]["status"] == "ok"


def _faulty(base: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    calls = data["devices"][0]["calls"]
    calls["nvmlDeviceGetTotalEccErrors"] = {"by_arg": {"0,0": 12, "0,1": 40, "1,0": 1, "1,1": 3}}
    calls["nvmlDeviceGetRemappedRows"] = [2, 1, 1, 0]
    calls["nvmlDeviceGetGpcClkVfOffset"] = 150
    data["system"]["nvmlSystemGetConfComputeState"] = {"environment": 2, "ccFeature": 1, "devToolsMode": 0}
    calls["nvmlDeviceWorkloadPowerProfileGetCurrentProfiles"] = {
        "perfProfilesMask": {"mask": [0b1011, 0, 0, 0, 0, 0, 0, 0]},
        "requestedProfilesMask": {"mask": [0b10, 0, 0, 0, 0, 0, 0, 0]},
        "enforcedProfilesMask": {"mask": [0b10, 0, 0, 0, 0, 0, 0, 1]},
    }
    return data


def test_faults_and_modes_are_recorded_and_rated(tmp_path: Path) -> None:
    base = json.loads(H200.read_text())
    before = _snap(base, tmp_path, "a.json")
    after = _snap(_faulty(base), tmp_path, "b.json")
    dev = after["gpu"]["devices"][UUID]
    assert dev["health"]["ecc_errors_uncorrected_volatile"] == 1
    assert dev["health"]["remapped_rows_pending"] is True and dev["health"]["remapped_rows_uncorrected"] == 1
    assert dev["workload_power_profiles"] == {"requested": [1], "enforced": [1, 224]}
    assert after["gpu"]["conf_compute"]["environment"] == "production"
    found = {f.path: f.severity for f in compare(before, after, default_policy()).findings}
    d = 'gpu.devices."00000000:00:06.0"'  # the diff keys GPUs by PCI bus id
    assert found[f"{d}.health.ecc_errors_uncorrected_volatile"] == "invalidating"
    assert found[f"{d}.health.remapped_rows_pending"] == "invalidating"
    assert found[f"{d}.health.ecc_errors_corrected_volatile"] == "info"
    assert found[f"{d}.health.ecc_errors_uncorrected_aggregate"] == "warning"
    assert found[f"{d}.clock_offset_gpc_mhz"] == "invalidating"
    assert found["gpu.conf_compute.enabled"] == "invalidating"
    assert found[f"{d}.workload_power_profiles.enforced"] == "invalidating"
    assert found[f"{d}.health.remapped_rows_corrected"] == "warning"
