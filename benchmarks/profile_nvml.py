"""Where the GPU collector's time goes on a live host: NVML's init and each binding function, timed in process.

Prints the import of pynvml, nvmlInit, and per function its calls and total milliseconds (largest first), over one
run of the GPU collector through a timing stand-in for the pynvml module. Usage: python benchmarks/profile_nvml.py
"""

from __future__ import annotations

import collections
import os
import sys
import time
import types
from typing import Any


class Timed(types.ModuleType):
    """pynvml, with every nvml* function timed (a module, so the collector treats it as the live bindings)."""

    def __init__(self, real: Any):
        super().__init__("pynvml")
        self._real = real
        self.totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (name.startswith("nvml") and callable(value)):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                entry = self.totals[name]
                entry[0] += 1
                entry[1] += (time.perf_counter() - start) * 1000

        return timed


def main() -> int:
    start = time.perf_counter()
    import pynvml

    imported = (time.perf_counter() - start) * 1000
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script
    from hoststate.collectors import Context, gpu

    timed = Timed(pynvml)
    start = time.perf_counter()
    section = gpu.collect(Context(nvml=timed))
    took = (time.perf_counter() - start) * 1000
    calls = sum(int(n) for n, _ in timed.totals.values())
    in_nvml = sum(ms for _, ms in timed.totals.values())
    print(f"import pynvml {imported:.1f} ms; gpu collector {took:.1f} ms ({section.status}), {calls} NVML calls "
          f"{in_nvml:.1f} ms, the rest (Python) {took - in_nvml:.1f} ms")
    for name, (n, ms) in sorted(timed.totals.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:48} {int(n):5d} calls {ms:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
