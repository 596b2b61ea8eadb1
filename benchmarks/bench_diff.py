"""`hoststate diff` of two 8-GPU / 4-DSA-device snapshots vs `python -m pyperf compare_to` on two result files.

    python benchmarks/bench_diff.py [--runs 21]

Setup writes, in a temporary directory, two synthetic snapshots of an 8-GPU / 4-DSA host (18 NVLinks per GPU,
8 WQs per device, full system/vLLM/packages tables; the second with a few drifts) and two pyperf result files
from `python -m pyperf timeit --fast -o`. Then both commands run alternately (A B A B ...) after a warm-up,
each as a fresh process as a user runs it; the table gives medians and the ratio (design.md target: <= 1.0).
Measures only; never passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "fixtures", "snapshots"))

from benchmarks.common import PY, alternate, machine, median_ms, table  # noqa: E402


def setup(workdir: str) -> dict[str, list[str]]:
    """Write the inputs; return the two commands to compare."""
    import subprocess

    from make import synthetic  # fixtures/snapshots/make.py

    from hoststate.snapshot import to_toml

    snap_a, snap_b = os.path.join(workdir, "a.toml"), os.path.join(workdir, "b.toml")
    with open(snap_a, "w", encoding="utf-8") as fh:
        fh.write(to_toml(synthetic()))
    with open(snap_b, "w", encoding="utf-8") as fh:
        fh.write(to_toml(synthetic(drift=True)))
    results = []
    for n, stmt in enumerate(("sum(range(100))", "sum(range(120))")):
        out = os.path.join(workdir, f"r{n}.json")
        subprocess.run([PY, "-m", "pyperf", "timeit", "--fast", "--quiet", "-o", out, stmt], check=True,
                       stdout=subprocess.DEVNULL)
        results.append(out)
    return {
        "hoststate diff --format json": [PY, "-m", "hoststate", "diff", snap_a, snap_b, "--format", "json"],
        "pyperf compare_to": [PY, "-m", "pyperf", "compare_to", *results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hoststate-bench-diff-") as workdir:
        commands = setup(workdir)
        sizes = {name: os.path.getsize(os.path.join(workdir, name)) for name in ("a.toml", "b.toml")}
        times = alternate(commands, args.runs)
    ref = median_ms(times["pyperf compare_to"])
    rows = [[name, f"{median_ms(v):.1f}", f"{min(v) * 1000:.1f}", f"{max(v) * 1000:.1f}", str(len(v)),
             f"{median_ms(v) / ref:.2f}"] for name, v in times.items()]
    print(f"machine: {machine()}")
    print(f"snapshots: {sizes['a.toml']} and {sizes['b.toml']} bytes (8 GPUs, 4 DSA devices x 8 WQs)")
    print(table(rows, ["command", "median ms", "min ms", "max ms", "runs", "ratio to pyperf"]))
    ratio = median_ms(times["hoststate diff --format json"]) / ref
    print(f"target (hoststate diff, default engine): ratio <= 1.0 -> {'met' if ratio <= 1.0 else 'NOT met'} "
          f"({ratio:.2f})")


if __name__ == "__main__":
    main()
