"""Snap cost of the dsa collector against the number of DSA devices (1, 4, 16): should grow linearly.

Each generated device is an SPR DSA with 8 WQs (4 enabled shared user WQs), 4 groups and 4 engines,
laid out by tests/dsatree.py as the kernel lays it. Prints a table; asserts nothing (timing is a
measurement, not a test).

    python3 benchmarks/bench_dsa.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hoststate.collectors import Context, accel_config, dsa  # noqa: E402
from tests import dsatree  # noqa: E402


def devices(n: int) -> list[dsatree.Device]:
    out = []
    for k in range(n):
        dev = dsatree.Device(f"dsa{k}", f"0000:{0x10 + k:02x}:01.0", numa_node=k % 2, state="enabled",
                             wqs=[dsatree.WQ(i) for i in range(8)], engines={e: e for e in range(4)})
        for i in range(4):
            dev.wqs[i] = dsatree.WQ(i, state="enabled", type="user", size=32, priority=10, threshold=32, group_id=i,
                                    name=f"app{i}", driver_name="user", cdev_minor=4 * k + i)
        out.append(dev)
    return out


def measure(root: str, runs: int) -> tuple[float, float]:
    """Median ms of the dsa collector alone, and of dsa + accel_config (saved-vs-live comparison)."""
    dsa_ms, both_ms = [], []
    for _ in range(runs):
        ctx = Context(root=root)
        t0 = time.perf_counter()
        ctx.sections["dsa"] = dsa.collect(ctx)
        t1 = time.perf_counter()
        accel_config.collect(ctx)
        t2 = time.perf_counter()
        dsa_ms.append((t1 - t0) * 1000)
        both_ms.append((t2 - t0) * 1000)
    return statistics.median(dsa_ms), statistics.median(both_ms)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{'devices':>7} {'files':>6} {'dsa ms':>8} {'ms/device':>10} {'+accel_config ms':>17}")
    for n in (1, 4, 16):
        with tempfile.TemporaryDirectory(prefix="bench-dsa-") as tmp:
            dsatree.build(tmp, devices(n))
            files = sum(len(f) for _, _, f in os.walk(os.path.join(tmp, "sys")))
            dsa.collect(Context(root=tmp))  # warm the dentry cache once
            dsa_ms, both_ms = measure(tmp, args.runs)
            print(f"{n:>7} {files:>6} {dsa_ms:>8.2f} {dsa_ms / n:>10.2f} {both_ms:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
