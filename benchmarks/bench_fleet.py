"""`hoststate fleet` over 100 and 1,000 snapshot files: wall time, per-file cost, and the 1000/100 ratio (linear ≈ 10).

The files are copies of a realistic snapshot (fixtures/snapshots/big-a.toml: 8 GPUs with NVLink, 4 DSA devices,
vLLM; ~56 kB of TOML), each with its own hostname and time, and one planted kernel drift per 50 hosts, so the run
also diffs outlier groups. The command is run as a user runs it (`python -m hoststate fleet DIR --format json`),
alternating the two sizes; the table shows medians. design.md's target: linear, seconds not minutes, on 2 cores.

    python -m benchmarks.bench_fleet [--runs N] [--jobs J]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import pathlib
import sys
import tempfile
import time

from benchmarks.common import PY, alternate, machine, median_ms, table

REPO = pathlib.Path(__file__).resolve().parent.parent
SOURCE = REPO / "fixtures" / "snapshots" / "big-a.toml"
SIZES = (100, 1000)


def write_fleet(directory: str, n: int) -> int:
    """``n`` files from the source snapshot; returns the size of one file in bytes."""
    from hoststate.digest import digest
    from hoststate.snapshot import load, to_toml

    base = load(str(SOURCE))
    os.makedirs(directory, exist_ok=True)
    size = 0
    for i in range(n):
        snap = copy.deepcopy(base)
        snap["hoststate"]["hostname"] = f"node{i:04d}"
        snap["hoststate"]["taken_at"] = base["hoststate"]["taken_at"] + dt.timedelta(seconds=i)
        if i % 50 == 7:
            snap["system"]["kernel"]["release"] = f"6.8.0-{i}-generic"
        snap["hoststate"]["digest"] = digest(snap)
        text = to_toml(snap)
        size = len(text.encode("utf-8"))
        with open(os.path.join(directory, f"node{i:04d}.toml"), "w", encoding="utf-8") as fh:
            fh.write(text)
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size (default 3)")
    parser.add_argument("--jobs", type=int, default=0, help="passed to `fleet --jobs` (0: one per usable CPU)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hoststate-bench-fleet-") as tmp:
        start = time.perf_counter()
        sizes = {n: write_fleet(os.path.join(tmp, str(n)), n) for n in SIZES}
        took = time.perf_counter() - start
        print(f"generated {sum(SIZES)} files from {SOURCE.name} in {took:.1f} s", file=sys.stderr)
        commands = {n: [PY, "-m", "hoststate", "fleet", os.path.join(tmp, str(n)), "--format", "json",
                        "--jobs", str(args.jobs)] for n in SIZES}
        times = alternate(commands, args.runs, warmup=1)
    medians = {n: median_ms(times[n]) for n in SIZES}
    rows = [[str(n), f"{sizes[n] / 1024:.0f} kB", f"{medians[n] / 1000:.2f} s", f"{medians[n] / n:.1f} ms"]
            for n in SIZES]
    print(f"hoststate fleet, median of {args.runs} runs, jobs={args.jobs or 'auto'}; {machine()}")
    print(table(rows, ["snapshots", "file size", "wall time", "per file"]))
    print(f"ratio 1000/100: {medians[1000] / medians[100]:.1f} (linear: 10; start-up makes small runs "
          f"relatively dearer, so the ratio sits below 10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
