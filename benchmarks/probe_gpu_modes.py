"""Record the NVML modes and health calls the gpu collector reads (Confidential Computing, NVLink bandwidth mode,
clock offsets, workload power profiles, ECC counts, row remapping, page retirement) on a live GPU host, as JSON
(python benchmarks/probe_gpu_modes.py > OUT.json); fixtures/nvml/generate.py takes the H200's values from it."""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

sys.path.insert(0, ".")
from hoststate.nvml import import_pynvml  # noqa: E402


def _try(fn: Any, *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception as err:  # an NVMLError is recorded by name, as the replay spells it
        return {"error": type(err).__name__.removeprefix("NVMLError_")}
    if hasattr(value, "_fields_"):
        return {k: getattr(value, k) for k, _t in value._fields_}
    return list(value) if isinstance(value, tuple) else value


def main() -> int:
    n = import_pynvml()
    n.nvmlInit()
    out: dict[str, Any] = {"bindings": getattr(n, "__version__", None), "system": {}, "devices": []}
    out["system"]["nvmlSystemGetConfComputeState"] = _try(n.nvmlSystemGetConfComputeState)
    out["system"]["nvmlSystemGetNvlinkBwMode"] = _try(n.nvmlSystemGetNvlinkBwMode)
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        d: dict[str, Any] = {}
        d["nvmlDeviceGetGpcClkVfOffset"] = _try(n.nvmlDeviceGetGpcClkVfOffset, h)
        d["nvmlDeviceGetMemClkVfOffset"] = _try(n.nvmlDeviceGetMemClkVfOffset, h)
        d["nvmlDeviceGetTotalEccErrors"] = {"by_arg": {f"{e},{c}": _try(n.nvmlDeviceGetTotalEccErrors, h, e, c)
                                                       for e in (0, 1) for c in (0, 1)}}
        d["nvmlDeviceGetRemappedRows"] = _try(n.nvmlDeviceGetRemappedRows, h)
        d["nvmlDeviceGetRetiredPages"] = {"by_arg": {str(c): _try(n.nvmlDeviceGetRetiredPages, h, c) for c in (0, 1)}}
        d["nvmlDeviceGetRetiredPagesPendingStatus"] = _try(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        info = n.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
        info.version = n.nvmlWorkloadPowerProfileCurrentProfiles_v1
        res = _try(n.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles, h, ctypes.byref(info))
        d["nvmlDeviceWorkloadPowerProfileGetCurrentProfiles"] = res if isinstance(res, dict) else {
            k: {"mask": list(getattr(info, f"{k}ProfilesMask").mask)} for k in ("perf", "requested", "enforced")}
        out["devices"].append(d)
    n.nvmlShutdown()
    json.dump(out, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
