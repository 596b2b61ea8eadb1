"""What NVML's slow queries cost on a live GPU, and whether threads or nvmlDeviceGetFieldValues help.

Prints GPU 0's sysfs NUMA node and CPU list, fifteen of the GPU collector's slowest queries (memory affinity,
application, default and maximum clocks, power limits, ECC mode, performance state) timed from one thread and
split over 2-16 threads (best of 3, after a first pass), and the ECC facts as one call each against one
nvmlDeviceGetFieldValues, and the application, default and maximum clocks against nvmlDeviceGetClock by clock id
(values and time of each). Usage: python benchmarks/probe_nvml_costs.py
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml as nv

ECC_FIELDS = ("NVML_FI_DEV_ECC_CURRENT", "NVML_FI_DEV_ECC_PENDING", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL",
              "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_FI_DEV_ECC_SBE_AGG_TOTAL", "NVML_FI_DEV_ECC_DBE_AGG_TOTAL")


def best_ms(fn: Callable[[], object], n: int = 3) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def slow_queries(h: Any) -> list[Callable[[], object]]:
    clocks = (nv.NVML_CLOCK_GRAPHICS, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM)
    return [lambda: nv.nvmlDeviceGetMemoryAffinity(h, 64, 0),
            *[lambda c=c: nv.nvmlDeviceGetApplicationsClock(h, c) for c in clocks],
            *[lambda c=c: nv.nvmlDeviceGetMaxClockInfo(h, c) for c in (*clocks, nv.NVML_CLOCK_VIDEO)],
            *[lambda c=c: nv.nvmlDeviceGetDefaultApplicationsClock(h, c) for c in clocks],
            lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), lambda: nv.nvmlDeviceGetEccMode(h),
            lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h), lambda: nv.nvmlDeviceGetPerformanceState(h)]


def run_all(calls: list[Callable[[], object]]) -> None:
    for call in calls:
        with contextlib.suppress(nv.NVMLError):
            call()


def in_threads(calls: list[Callable[[], object]], k: int) -> Callable[[], None]:
    def go() -> None:
        threads = [threading.Thread(target=run_all, args=(calls[i::k],)) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return go


def main() -> None:
    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        domain, rest = bus.split(":", 1)
        for name in ("numa_node", "local_cpulist"):
            try:
                with open(f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest.lower()}/{name}") as fh:
                    print(name, fh.read().strip())
            except OSError as err:
                print(name, err)
        calls = slow_queries(h)
        print(f"slow calls sequential ({len(calls)})    {best_ms(lambda: run_all(calls)):.2f} ms")
        for k in (2, 4, 8, 16):
            print(f"slow calls in {k} threads        {best_ms(in_threads(calls, k)):.2f} ms")
        ids = [getattr(nv, name) for name in ECC_FIELDS if hasattr(nv, name)]
        print(f"field values ECC ({len(ids)})          {best_ms(lambda: nv.nvmlDeviceGetFieldValues(h, ids)):.2f} ms")
        counters = [lambda a=a, b=b: nv.nvmlDeviceGetTotalEccErrors(h, a, b) for a in (0, 1) for b in (0, 1)]
        print(f"4 TotalEccErrors               {best_ms(lambda: run_all(counters)):.2f} ms")
        print(f"EccMode                        {best_ms(lambda: nv.nvmlDeviceGetEccMode(h)):.2f} ms")
        print(f"MemoryAffinity                 {best_ms(lambda: nv.nvmlDeviceGetMemoryAffinity(h, 64, 0)):.2f} ms")
        clocks(h)
    finally:
        nv.nvmlShutdown()


#: (the collector's call, nvmlDeviceGetClock's clock id) for the same fact (nvmlClockId_t).
CLOCK_PAIRS = (("nvmlDeviceGetApplicationsClock", 1), ("nvmlDeviceGetDefaultApplicationsClock", 2),
               ("nvmlDeviceGetMaxClockInfo", 3))


def _value(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except nv.NVMLError as err:
        return type(err).__name__


def clocks(h: Any) -> None:
    """Each clock fact read both ways: the two values (they must agree) and the time of each (best of 3)."""
    for name, clock_id in CLOCK_PAIRS:
        for kind in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
            c = getattr(nv, kind)
            old = lambda c=c, name=name: getattr(nv, name)(h, c)  # noqa: E731
            new = lambda c=c, clock_id=clock_id: nv.nvmlDeviceGetClock(h, c, clock_id)  # noqa: E731
            short = name[len("nvmlDeviceGet"):]
            print(f"{short:28} {kind[11:]:9} {_value(old)!s:>18} {best_ms(lambda f=old: _value(f)):6.2f} ms | "
                  f"GetClock id {clock_id} {_value(new)!s:>18} {best_ms(lambda f=new: _value(f)):6.2f} ms")


if __name__ == "__main__":
    main()
