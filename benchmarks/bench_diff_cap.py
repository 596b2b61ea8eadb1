"""`hoststate diff` of two snapshots at the 8 MiB input cap: time and peak memory grow linearly with the input.

    python benchmarks/bench_diff_cap.py [--runs 3] [--sizes 1 2 4 7.5] [--formats json text]

Setup writes pairs of snapshots of 1, 2, 4 and 7.5 MiB (the cap is 8 MiB), each with its digest, whose every
leaf differs (the worst case for a diff: one finding per leaf), in four shapes: one wide table (env), deep
nesting (a vLLM argument tree), long lists, and package versions each rated by another fact (a rule's
``listed_in``: the server's serving path). Each pair is diffed by a fresh `hoststate diff --format FORMAT`
process; the table gives the median wall time, the CPU time of that process (on a shared machine the wall time
follows the load, the CPU time does not), its peak resident memory and the growth exponent of CPU time between
the smallest and largest pair (1.0 is linear). Measures only; never passes or fails on time.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.common import PY, machine, table  # noqa: E402

MIB = 1 << 20
#: wide: one table; deep: a vLLM argument tree; lists: long lists; rated: packages rated by the serving path.
SHAPES = ("wide", "deep", "lists", "rated")


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
    if shape == "rated":  # every leaf a patch release that a rule rates by another fact (the serving path)
        return _base({"vllm": {"serving_path": ["torch"], "packages": {f"vllm-x{i:07d}": f"1.0.{side}"
                                                                        for i in range(n)}}})
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


def run_once(a: str, b: str, fmt: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system: what the diff itself needs, whatever else the machine runs) and
    peak RSS (MiB) of one fresh diff process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([PY, "-c", _PROBE, "diff", a, b, "--format", fmt], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=float, nargs="*", default=[1, 2, 4, 7.5], help="MiB per side")
    parser.add_argument("--formats", nargs="*", default=["json", "text"])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hoststate-bench-cap-") as workdir:
        for shape in SHAPES:
            pairs = [write_pair(workdir, shape, int(mib * MIB)) for mib in args.sizes]  # the last under the cap
            for fmt in args.formats:
                points = []
                for a, b, size in pairs:
                    runs = sorted(run_once(a, b, fmt) for _ in range(args.runs))
                    wall, cpu, rss = runs[len(runs) // 2]
                    points.append((size, cpu))
                    rows.append([shape, fmt, f"{size / MIB:.1f}", f"{wall:.2f}", f"{cpu:.2f}", f"{rss:.0f}", ""])
                if len(points) > 1:
                    (s0, t0), (s1, t1) = points[0], points[-1]
                    rows[-1][-1] = f"{math.log(t1 / t0) / math.log(s1 / s0):.2f}"
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(table(rows, ["shape", "format", "MiB per side", "median wall s", "CPU s", "peak RSS MiB",
                       "CPU exponent"]))


if __name__ == "__main__":
    main()
