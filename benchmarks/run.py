"""The whole performance suite as one command printing one table (kept in docs/performance.md).

    python -m benchmarks.run [--runs N] [--quick] [--collect-env]

Every row times real commands as a user runs them (fresh interpreters, alternating with the reference so
load drift hits both alike, medians), or, for scaling rows, the work in process, with the growth exponent
(log of the time ratio over log of the size ratio: 1.0 is linear). The targets are shown beside each ratio;
nothing here passes or fails on time. `snap --only gpu` against a bare pynvml read (benchmarks/bare_nvml.py)
runs only where an NVIDIA driver is loaded. The per-area scripts (bench_snap, bench_diff, bench_guard,
bench_fleet, bench_dsa, bench_gpu, profile_nvml) print more detail for one area.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from benchmarks.common import PY, alternate, machine, median_ms, table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS = os.path.join(REPO, "fixtures", "hosts")
Row = list[str]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def _exponent(t_small: float, t_big: float, n_small: int, n_big: int) -> str:
    """Growth exponent k in t ~ n^k between two sizes (1.00: linear)."""
    return f"n^{math.log(t_big / t_small) / math.log(n_big / n_small):.2f}" if t_small > 0 and t_big > 0 else "-"


def _hs(*args: str) -> list[str]:
    return [PY, "-m", "hoststate", *args]


def _snap_to(path: str, *args: str) -> None:
    subprocess.run(_hs("snap", "-q", "-o", path, "--force", *args), check=True, stdout=subprocess.DEVNULL)


def _pyperf_results(tmp: str) -> list[str]:
    """Two pyperf result files, the input of `pyperf compare_to`."""
    out = []
    for n, stmt in enumerate(("sum(range(100))", "sum(range(120))")):
        path = os.path.join(tmp, f"r{n}.json")
        subprocess.run([PY, "-m", "pyperf", "timeit", "--fast", "--quiet", "-o", path, stmt], check=True,
                       stdout=subprocess.DEVNULL)
        out.append(path)
    return out


def row_snap_vs_pyperf(runs: int) -> list[Row]:
    times = alternate({"snap": [PY, "-m", "hoststate", "snap"],
                       "pyperf": [PY, "-m", "pyperf", "collect_metadata"]}, runs)
    a, b = median_ms(times["snap"]), median_ms(times["pyperf"])
    return [["snap, live host", f"{a:.0f} ms", "pyperf collect_metadata", f"{b:.0f} ms", _ratio(a, b), "<= 1.0"]]


def row_snap_gpu_vs_bare_nvml(runs: int) -> list[Row]:
    """`snap --only gpu` against the floor (benchmarks/bare_nvml.py: pynvml, nvmlInit and 10 reads per GPU), and
    against `nvidia-smi -q -x` (one C program) for scale; only where a driver is loaded."""
    smi = shutil.which("nvidia-smi")
    if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia")):
        return [["snap --only gpu", "-", "bare pynvml read", "no NVIDIA driver here", "-", "<= 1.3"]]
    commands = {"snap": _hs("snap", "--only", "gpu"), "bare": [PY, os.path.join(REPO, "benchmarks", "bare_nvml.py")]}
    if smi:
        commands["smi"] = [smi, "-q", "-x"]
    times = alternate(commands, runs)
    a, b = median_ms(times["snap"]), median_ms(times["bare"])
    rows = [["snap --only gpu", f"{a:.0f} ms", "bare pynvml read, 10 fields a GPU", f"{b:.0f} ms", _ratio(a, b),
             "<= 1.3"]]
    if smi:
        c = median_ms(times["smi"])
        rows.append(["snap --only gpu", f"{a:.0f} ms", "nvidia-smi -q -x", f"{c:.0f} ms", _ratio(a, c), "-"])
    return rows


def row_read_commands(runs: int) -> list[Row]:
    """diff of two snapshots of this host against `pyperf compare_to`; show and check of one against `pyperf
    show` of one result file."""
    with tempfile.TemporaryDirectory(prefix="bench-run-read-") as tmp:
        a, b = os.path.join(tmp, "a.toml"), os.path.join(tmp, "b.toml")
        _snap_to(a)
        _snap_to(b)
        results = _pyperf_results(tmp)
        times = alternate({"diff": _hs("diff", a, b), "show": _hs("show", a), "check": _hs("check", a),
                           "compare_to": [PY, "-m", "pyperf", "compare_to", *results],
                           "pyperf_show": [PY, "-m", "pyperf", "show", results[0]]}, runs)
    rows = []
    for name, what, ref_name, target in (
            ("diff", "diff, two snapshots of this host", "compare_to", "<= 1.0"),
            ("show", "show, one snapshot", "pyperf_show", "<= 0.7"),
            ("check", "check, one snapshot", "pyperf_show", "<= 0.7")):
        value, ref = median_ms(times[name]), median_ms(times[ref_name])
        shown = "pyperf compare_to" if ref_name == "compare_to" else "pyperf show"
        rows.append([what, f"{value:.0f} ms", shown, f"{ref:.0f} ms", _ratio(value, ref), target])
    return rows


def row_snap_vs_collect_env(runs: int) -> list[Row]:
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return [["snap, live host", "-", "torch.utils.collect_env", "torch not installed", "-", "-"]]
    except (ImportError, ValueError):
        return []
    times = alternate({"snap": [PY, "-m", "hoststate", "snap"],
                       "collect_env": [PY, "-m", "torch.utils.collect_env"]}, max(3, runs // 3))
    a, b = median_ms(times["snap"]), median_ms(times["collect_env"])
    return [["snap, live host", f"{a:.0f} ms", "python -m torch.utils.collect_env", f"{b:.0f} ms", _ratio(a, b), "-"]]


def row_diff_vs_compare_to(runs: int) -> list[Row]:
    sys.path.insert(0, os.path.join(REPO, "fixtures", "snapshots"))
    from benchmarks.bench_diff import setup

    with tempfile.TemporaryDirectory(prefix="bench-run-diff-") as tmp:
        commands = setup(tmp)
        times = alternate({k: commands[k] for k in ("hoststate diff --format json", "pyperf compare_to")}, runs)
    a, b = median_ms(times["hoststate diff --format json"]), median_ms(times["pyperf compare_to"])
    return [["diff, 8-GPU / 4-DSA snapshots", f"{a:.0f} ms", "pyperf compare_to", f"{b:.0f} ms", _ratio(a, b),
             "<= 1.0"]]


def row_guard_vs_snap(runs: int) -> list[Row]:
    """`guard --baseline B -- true` against `snap` on the live host (B: a snapshot of this host)."""
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="bench-run-guard-") as tmp:
        baseline = os.path.join(tmp, "b.toml")
        _snap_to(baseline)
        times = alternate({"guard": _hs("guard", "--baseline", baseline, "--", true), "snap": _hs("snap")}, runs)
    a, b = median_ms(times["guard"]), median_ms(times["snap"])
    # Each round ran both, side by side: the median of the rounds' own ratios is not moved by which of a host's two
    # speeds more of one command's runs happened to land on (the H100's snap: about 140 or about 165 ms).
    paired = statistics.median(g / s for g, s in zip(times["guard"], times["snap"], strict=True))
    return [["guard -- true, live host", f"{a:.0f} ms", "snap", f"{b:.0f} ms", _ratio(a, b), "<= 1.1"],
            ["guard -- true, round by round", f"{runs} rounds", "snap, same round", "-", f"{paired:.2f}",
             "<= 1.1"]]


def row_guard(runs: int) -> list[Row]:
    from benchmarks.bench_guard import measure

    with tempfile.TemporaryDirectory(prefix="bench-run-guard-") as tmp:
        tree = os.path.join(HOSTS, "seed-baseline")
        baseline, current = os.path.join(tmp, "b.toml"), os.path.join(tmp, "c.toml")
        subprocess.run([PY, "-m", "hoststate", "snap", "--root", tree, "-o", baseline], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        m = measure(baseline, tree, current, [], runs)
    return [["guard overhead (guard -- true minus true)", f"{m['guard overhead']:.0f} ms", "snap -o + diff",
             f"{m['snap + diff']:.0f} ms", _ratio(m["guard overhead"], m["snap + diff"]), "<= 1.0"]]


def row_fleet(runs: int) -> list[Row]:
    from benchmarks.bench_fleet import write_fleet

    out: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-run-fleet-") as tmp:
        for n in (100, 1000):
            write_fleet(os.path.join(tmp, str(n)), n)
        commands = {n: [PY, "-m", "hoststate", "fleet", os.path.join(tmp, str(n)), "--format", "json"]
                    for n in (100, 1000)}
        times = alternate(commands, max(1, runs // 5))
        out = {n: median_ms(t) for n, t in times.items()}
    return [["fleet, 1,000 snapshots", f"{out[1000] / 1000:.2f} s", "fleet, 100 snapshots",
             f"{out[100] / 1000:.2f} s", _exponent(out[100], out[1000], 100, 1000), "linear: n^1 or less"]]


def _in_process(fn: Callable[[], object], runs: int) -> float:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - start) * 1000)
    return statistics.median(walls)


def row_gpu_scaling(runs: int) -> list[Row]:
    from hoststate.capture import collect
    from hoststate.collectors import Context
    from hoststate.nvml_replay import load_data, synthetic_hgx

    cost = {}
    for n in (1, 8, 72):
        data = synthetic_hgx(n)
        cost[n] = _in_process(lambda data=data: collect(Context(nvml=load_data(data)), ("gpu",)), max(3, runs // 3))
    return [["gpu collector, 8 replayed GPUs", f"{cost[8]:.0f} ms", "1 GPU", f"{cost[1]:.1f} ms",
             _exponent(cost[1], cost[8], 1, 8), "per-GPU reads: n^1"],
            ["gpu collector, 72 replayed GPUs", f"{cost[72]:.0f} ms", "8 GPUs", f"{cost[8]:.0f} ms",
             _exponent(cost[8], cost[72], 8, 72), "P2P matrix: up to n^2"]]


def row_packages_scaling(runs: int) -> list[Row]:
    """The packages scan over a site-packages of 500 and 5,000 distributions (every tenth one of the stack's)."""
    from hoststate.collectors.packages import _local_listdir, _local_read, scan

    cost = {}
    with tempfile.TemporaryDirectory(prefix="bench-run-packages-") as tmp:
        for n in (500, 5000):
            site = os.path.join(tmp, str(n))
            for i in range(n):
                name = f"nvidia_lib{i}" if i % 10 == 0 else f"package_{i}"
                os.makedirs(os.path.join(site, f"{name}-1.{i}.0.dist-info"))
            found = scan([site], _local_listdir, _local_read)
            assert len(found) == n // 10, len(found)
            cost[n] = _in_process(lambda site=site: scan([site], _local_listdir, _local_read), runs)
    return [["packages scan, 5,000 distributions", f"{cost[5000]:.1f} ms", "500 distributions",
             f"{cost[500]:.1f} ms", _exponent(cost[500], cost[5000], 500, 5000), "linear: n^1"]]


def row_dsa_scaling(runs: int) -> list[Row]:
    sys.path.insert(0, REPO)
    from benchmarks.bench_dsa import devices
    from hoststate.collectors import Context, dsa
    from tests import dsatree

    cost = {}
    for n in (1, 4, 16):
        with tempfile.TemporaryDirectory(prefix="bench-run-dsa-") as tmp:
            dsatree.build(tmp, devices(n))
            dsa.collect(Context(root=tmp))
            cost[n] = _in_process(lambda tmp=tmp: dsa.collect(Context(root=tmp)), runs)
    return [["dsa collector, 16 devices", f"{cost[16]:.1f} ms", "4 devices", f"{cost[4]:.1f} ms",
             _exponent(cost[4], cost[16], 4, 16), "linear: n^1"],
            ["dsa collector, 4 devices", f"{cost[4]:.1f} ms", "1 device", f"{cost[1]:.1f} ms",
             _exponent(cost[1], cost[4], 1, 4), "linear: n^1"]]


def import_ms(args: list[str]) -> tuple[float, set[str]]:
    """Total import time (ms) of one command's process, and which heavy modules it loaded."""
    proc = subprocess.run([PY, "-X", "importtime", "-m", "hoststate", *args], capture_output=True, text=True)
    total, heavy = 0.0, set()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if not cumulative.strip().isdigit():
            continue  # the header line
        if not name.startswith("  "):  # top-level imports only, so nothing is counted twice
            total += int(cumulative) / 1000
        module = name.strip()
        if module.split(".")[0] in ("deepdiff", "pynvml", "psutil", "pyudev") or module == "urllib.request":
            heavy.add(module.split(".")[0] if module != "urllib.request" else module)
    return total, heavy


def row_imports(_runs: int) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-run-imports-") as tmp:
        snap = os.path.join(tmp, "s.toml")
        subprocess.run([PY, "-m", "hoststate", "snap", "-o", snap], check=True, capture_output=True)
        for args in (["show", snap], ["digest", snap], ["diff", snap, snap], ["snap"]):
            ms, heavy = import_ms(args)
            rows.append([f"imports of `hoststate {args[0]}`", f"{ms:.0f} ms", "heavy modules loaded",
                         ", ".join(sorted(heavy)) or "none", "-", "only what it uses"])
    return rows


SUITE: tuple[Callable[[int], list[Row]], ...] = (
    row_snap_vs_pyperf, row_snap_gpu_vs_bare_nvml, row_read_commands, row_guard_vs_snap, row_diff_vs_compare_to,
    row_fleet, row_gpu_scaling, row_packages_scaling, row_dsa_scaling, row_imports,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="alternating runs per comparison (default 15)")
    parser.add_argument("--quick", action="store_true", help="5 runs, for a smoke check")
    parser.add_argument("--only", metavar="ROWS", help="comma-separated row names, e.g. snap_vs_pyperf,fleet")
    parser.add_argument("--collect-env", action="store_true",
                        help="also time `python -m torch.utils.collect_env` (seconds a run where torch is installed)")
    args = parser.parse_args(argv)
    runs = 5 if args.quick else args.runs
    parser_only = args.only.split(",") if args.only else None
    suite = SUITE + ((row_snap_vs_collect_env,) if args.collect_env else ())
    suite = tuple(b for b in suite if not parser_only or b.__name__.removeprefix("row_") in parser_only)
    # As installed: bytecode (and the default policy's parsed copy, hoststate.parsed) is written on first use;
    # the package is compiled first, as `pip install` does. Otherwise every run would pay for compiling.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([PY, "-m", "compileall", "-q", os.path.join(REPO, "hoststate")], check=True,
                   stdout=subprocess.DEVNULL)
    rows: list[Row] = []
    for bench in suite:
        print(f"running {bench.__name__} ...", file=sys.stderr)
        rows.extend(bench(runs))
    print(f"hoststate benchmarks, median of {runs} alternating runs; {machine()}")
    print(table(rows, ["measure", "hoststate", "reference", "reference value", "ratio", "target"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
