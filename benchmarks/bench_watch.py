"""Record watch traces on a real NVIDIA GPU host and measure what the sampler costs.

    PYTHONPATH=. python3 benchmarks/bench_watch.py OUTDIR

Needs nvidia-ml-py and PyTorch with a GPU. Writes to OUTDIR:

- ``idle.json``, ``dense-a.json``, ``dense-b.json``, ``foreign.json``: watch traces (hoststate-watch-trace/1)
  of the GPU idle, under a dense bf16 matmul loop (twice), and under the same loop while a second process
  runs its own matmuls on the GPU for part of the run. fixtures/watch/ holds the ones recorded on an H200.
- ``cost.json``: NVML call costs, the sampler's CPU time per rate and GPU count (``replicate`` reads the
  GPU that many times a sample, standing in for a host with that many GPUs), the matmul rate with the sampler
  on and off (alternating windows), and a CPU-bound load's rate on every core with the sampler on and off.

The sampler runs in this process, as it does inside ``hoststate guard --watch``; the loads are child processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hoststate.nvml import import_pynvml  # noqa: E402
from hoststate.watch import LiveSource, Sampler  # noqa: E402

N = 8192
MATMUL = r"""
import signal, sys, time, torch
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
out, seconds = sys.argv[1], float(sys.argv[2])
a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize()
end = time.monotonic() + seconds; n = 0; rows = []
try:
    while time.monotonic() < end:
        for _ in range(10): a @ b
        torch.cuda.synchronize(); n += 10; rows.append((time.monotonic(), n))
finally:
    open(out, "w").write("\n".join(f"{t} {k}" for t, k in rows))
""".replace("N, N", f"{N}, {N}")
SPIN = r"""
import sys, time
out, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds; n = 0; rows = []
while True:
    for _ in range(20000): n += 1
    t = time.monotonic(); rows.append((t, n))
    if t >= end: break
open(out, "w").write("\n".join(f"{t} {k}" for t, k in rows[::20] + rows[-1:]))
"""


def start(code: str, out: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, out, str(seconds)])


def rate(path: str, t0: float, t1: float) -> float:
    """Units of work per second between t0 and t1 from a (time, cumulative count) file."""
    with open(path) as fh:
        rows = [tuple(map(float, line.split())) for line in fh if line.strip()]
    inside = [r for r in rows if t0 <= r[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def record(name: str, out: str, seconds: float, description: str, own=None, during=None) -> dict:
    nvml = import_pynvml()
    s = Sampler(LiveSource(nvml), interval=1.0, checkpoint=10.0, record=True, own_pids=own).start()
    t_end = time.monotonic() + seconds
    if during:
        during(s)
    time.sleep(max(0.0, t_end - time.monotonic()))
    s.stop()
    trace = s.trace(description)
    trace["summary"] = s.summary()
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump(trace, fh, indent=1)
    print(name, json.dumps(trace["summary"]["metrics"]), flush=True)
    return trace


def nvml_costs() -> dict:
    nvml = import_pynvml()
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    ids = [74, 75, 76, 77, 78, 79, 80, 81, 269, 270, 271, 83, 94, 3, 4, 142, 143, 144, 145, 38, 45, 52, 59]
    calls = {
        "CurrentClocksEventReasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "ClockInfo(SM)": lambda: nvml.nvmlDeviceGetClockInfo(h, 1),
        "PowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "Temperature": lambda: nvml.nvmlDeviceGetTemperature(h, 0),
        "PerformanceState": lambda: nvml.nvmlDeviceGetPerformanceState(h),
        "ComputeRunningProcesses": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h),
        f"FieldValues({len(ids)} ids)": lambda: nvml.nvmlDeviceGetFieldValues(h, ids),
    }
    out = {}
    for name, fn in calls.items():
        times = []
        for _ in range(200 if "Field" not in name else 50):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
        times.sort()
        out[name] = {"median_us": round(statistics.median(times), 1), "p99_us": round(times[int(len(times) * .99)], 1)}
    nvml.nvmlShutdown()
    return out


def sampler_window(seconds: float, interval: float, replicate: int) -> dict:
    s = Sampler(LiveSource(import_pynvml(), replicate=replicate), interval=interval, checkpoint=3600.0).start()
    t0 = time.monotonic()
    time.sleep(seconds)
    t1 = time.monotonic()
    s.stop()
    sm = s.summary()
    return {"t0": t0, "t1": t1, "interval_s": interval, "gpus": replicate, "samples": sm["samples"],
            "missed": sm["missed_samples"], "cpu_s": sm["sampler_cpu_s"],
            "cpu_share_of_core": round(sm["sampler_cpu_s"] / (t1 - t0), 6)}


def alternate(load_file: str, plan: list[tuple[str, float, float, int]]) -> list[dict]:
    rows = []
    for label, seconds, interval, replicate in plan:
        if label == "off":
            t0 = time.monotonic()
            time.sleep(seconds)
            w = {"t0": t0, "t1": time.monotonic()}
        else:
            w = sampler_window(seconds, interval, replicate)
        w["label"] = label
        rows.append(w)
    return rows


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-watch-")
    cost: dict = {"host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    cost["nvml_calls_idle"] = nvml_costs()
    record("idle", out, 20, "one H200, idle (no process on the GPU)")

    load_file = os.path.join(work, "matmul.txt")
    load = start(MATMUL, load_file, 400)
    time.sleep(8)
    own = lambda: {load.pid}  # noqa: E731
    record("dense-a", out, 30, f"one H200 under a bf16 {N}^3 matmul loop (first run)", own)
    record("dense-b", out, 30, f"one H200 under a bf16 {N}^3 matmul loop (second run)", own)
    cost["nvml_calls_loaded"] = nvml_costs()

    def second_process(_s: Sampler) -> None:
        time.sleep(10)
        subprocess.Popen([sys.executable, "-c", MATMUL, os.path.join(work, "foreign-load.txt"), "10"])

    record("foreign", out, 30, f"one H200 under a bf16 {N}^3 matmul loop; a second process runs its own "
           "matmuls on it from about 10 s in", own, second_process)
    plan = [("off", 8, 0, 0), ("on", 8, 1.0, 8)] * 4 + [("on", 8, 0.1, 8), ("off", 8, 0, 0), ("on", 8, 0.01, 8),
                                                       ("off", 8, 0, 0), ("on", 8, 1.0, 1)]
    windows = alternate(load_file, plan)
    load.terminate()
    load.wait()
    for w in windows:
        w["matmul_tflops"] = round(rate(load_file, w["t0"], w["t1"]) * 2 * N**3 / 1e12, 1)
    cost["gpu_bound"] = windows

    cpus = os.cpu_count() or 1
    spin_files = [os.path.join(work, f"spin{i}.txt") for i in range(cpus)]
    spinners = [start(SPIN, f, 62) for f in spin_files]
    time.sleep(2)
    windows = alternate("", [("off", 6, 0, 0), ("on", 6, 1.0, 8)] * 4 + [("on", 6, 0.01, 8), ("off", 6, 0, 0)])
    for p in spinners:
        p.wait()
    for w in windows:
        w["spin_mops_total"] = round(sum(rate(f, w["t0"], w["t1"]) for f in spin_files) / 1e6, 2)
    cost["cpu_bound"] = windows
    with open(os.path.join(out, "cost.json"), "w") as fh:
        json.dump(cost, fh, indent=1)
    print(json.dumps(cost, indent=1))


if __name__ == "__main__":
    main()


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f}-{max(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def cost_rows(cost: dict) -> list[str]:
    """docs/performance.md's table rows, computed from a cost.json (a test keeps the doc and the file in step):
    rate, GPUs read a sample, the sampler's CPU (% of one core) under the matmul and under the CPU load, each
    load's rate with the sampler on / off (medians of the windows), samples skipped."""
    configs: dict[tuple[float, int], dict[str, list[float]]] = {}
    off: dict[str, list[float]] = {"gpu_bound": [], "cpu_bound": []}
    for phase, unit in (("gpu_bound", "matmul_tflops"), ("cpu_bound", "spin_mops_total")):
        for w in cost[phase]:
            if w["label"] == "off":
                off[phase].append(w[unit])
                continue
            c = configs.setdefault((w["interval_s"], w["gpus"]), {k: [] for k in (
                "gpu_bound", "cpu_bound", "cpu_gpu_bound", "cpu_cpu_bound", "missed", "samples")})
            c[f"cpu_{phase}"].append(w["cpu_share_of_core"] * 100)
            c[phase].append(w[unit])
            c["missed"].append(w["missed"])
            c["samples"].append(w["samples"] + w["missed"])
    rows = []
    for (interval, gpus), c in sorted(configs.items(), key=lambda kv: (kv[0][1], -kv[0][0])):
        loads = [f"{_median(c[p]):.1f} / {_median(off[p]):.1f}" if c[p] else "-" for p in ("gpu_bound", "cpu_bound")]
        rows.append(f"| {1 / interval:g} Hz | {gpus} | {_span(c['cpu_gpu_bound'])} | {_span(c['cpu_cpu_bound'])} "
                    f"| {loads[0]} | {loads[1]} | {sum(c['missed'])} of {sum(c['samples'])} |")
    return rows
