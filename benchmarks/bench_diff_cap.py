"""`hoststate diff` of two snapshots at the 8 MiB input cap: time and peak memory grow linearly with the input.

    python benchmarks/bench_diff_cap.py [--runs 3]

Setup writes pairs of snapshots of 1, 2, 4 and 7.5 MiB (the cap is 8 MiB) whose every leaf differs (the worst
case for a diff: one finding per leaf), in three shapes: one wide table (env), deep nesting (a vLLM argument
tree) and long lists. Each pair is diffed by a fresh `hoststate diff --format json` process; the table gives
the median wall time, the peak resident memory of that process and the growth exponent between the smallest and
largest pair (1.0 is linear). Measures only; never passes or fails on time.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.common import PY, machine, table  # noqa: E402

MIB = 1 << 20


def _base(body: dict) -> dict:
    import datetime as dt

    from hoststate.digest import digest

    meta = {"schema": 1, "version": "0.1.0", "taken_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
    snap = {"hoststate": meta, "collectors": {k: {"status": "ok", "took_ms": 1.0} for k in body}, **body}
    meta["digest"] = digest(snap)
    return snap


def shaped(shape: str, n: int, side: int) -> dict:
    """A snapshot of about ``n`` leaves of the given shape; ``side`` changes every value."""
    if shape == "wide":
        return _base({"env": {f"VAR_{i:07d}_PADDING": f"value-{side}-{i}" for i in range(n)}})
    if shape == "deep":
        args: dict = {}
        for i in range(n):
            node = args
            for level in f"{i:06d}"[:4]:
                node = node.setdefault(f"k{level}", {})
            node[f"leaf{i}"] = i * (side + 1)
        return _base({"vllm": {"args": args}})
    per = 200
    return _base({"packages": {f"pkg{i}": [f"item-{side}-{i}-{j}" for j in range(per)] for i in range(n // per)}})


def write_pair(workdir: str, shape: str, target: int) -> tuple[str, str, int]:
    from hoststate.snapshot import to_toml

    n, paths = 1000, []
    while True:
        text = to_toml(shaped(shape, n, 0))
        if target * 0.9 <= len(text.encode()) <= target:
            break
        n = int(n * target / max(len(text.encode()), 1))
    for side in (0, 1):
        path = os.path.join(workdir, f"{shape}-{target}-{side}.toml")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(to_toml(shaped(shape, n, side)))
        paths.append(path)
    return paths[0], paths[1], os.path.getsize(paths[0])


#: The diff command, reporting its own peak resident memory (VmHWM, kB) when it exits: Linux keeps ru_maxrss
#: across exec, so a child's would start from this process's size.
_PROBE = ("import sys\nfrom hoststate.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
          "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')), "
          "file=sys.stderr)")


def run_once(a: str, b: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh diff process."""
    start = time.perf_counter()
    done = subprocess.run([PY, "-c", _PROBE, "diff", a, b, "--format", "json"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - start
    return wall, int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hoststate-bench-cap-") as workdir:
        for shape in ("wide", "deep", "lists"):
            points = []
            for mib in (1, 2, 4, 7.5):  # the last just under the 8 MiB cap
                a, b, size = write_pair(workdir, shape, int(mib * MIB))
                runs = sorted(run_once(a, b) for _ in range(args.runs))
                wall, rss = runs[len(runs) // 2]
                points.append((size, wall, rss))
                rows.append([shape, f"{size / MIB:.1f}", f"{wall:.2f}", f"{rss:.0f}", ""])
            (s0, t0, _), (s1, t1, _) = points[0], points[-1]
            rows[-1][-1] = f"{math.log(t1 / t0) / math.log(s1 / s0):.2f}"
    print(f"machine: {machine()}")
    print(table(rows, ["shape", "MiB per side", "median s", "peak RSS MiB", "time exponent"]))


if __name__ == "__main__":
    main()
