"""The floor `snap --only gpu` is compared with: a bare pynvml read of 10 fields per GPU, nothing else.

An interpreter, pynvml's import, nvmlInit, the calls and nvmlShutdown: what any Python reader of NVML pays.
Prints one line per GPU. Usage: python benchmarks/bare_nvml.py
"""

from __future__ import annotations

import pynvml as nv


def read(h: object) -> list[object]:
    """Ten fields of one GPU, each one NVML call (a failing one gives its error's name)."""
    calls = (
        lambda: nv.nvmlDeviceGetName(h),
        lambda: nv.nvmlDeviceGetUUID(h),
        lambda: nv.nvmlDeviceGetPciInfo(h).busId,
        lambda: nv.nvmlDeviceGetMemoryInfo(h).total,
        lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
        lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        lambda: nv.nvmlDeviceGetPowerUsage(h),
        lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        lambda: nv.nvmlDeviceGetPersistenceMode(h),
    )
    out = []
    for call in calls:
        try:
            out.append(call())
        except nv.NVMLError as err:
            out.append(type(err).__name__)
    return out


def main() -> None:
    nv.nvmlInit()
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            print(i, *read(nv.nvmlDeviceGetHandleByIndex(i)))
    finally:
        nv.nvmlShutdown()


if __name__ == "__main__":
    main()
