"""GPU collector costs: live against ``nvidia-smi -q -x``, per NVML call, and on replayed hosts.

    python benchmarks/bench_gpu.py live [--rounds 15]     # snap --only gpu, full snap, nvidia-smi -q -x
    python benchmarks/bench_gpu.py profile [--runs 5]     # where the collector's time goes, per NVML call
    python benchmarks/bench_gpu.py replay [--runs 20]     # fake NVML: 1, 8 and 64 GPUs (+ the real H200 replay)

``live`` runs the commands alternately (A B C A B C ...) after one warm-up each, so drift in the
host (page cache, clocks) hits every command alike, and reports medians and the ratio to
nvidia-smi (target: at most 1.0). Every number is wall time of a fresh process, as a user sees it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _time(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    took = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return took


def _alternate(
    commands: dict[str, list[str]], rounds: int, env: dict[str, str] | None = None
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():  # warm-up: page cache, driver state
        _time(argv, env)
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(_time(argv, env))
    return times


def _report(times: dict[str, list[float]], reference: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ref = statistics.median(times[reference]) if reference else None
    for name, values in times.items():
        med = statistics.median(values)
        row = {"median_ms": round(med, 1), "min_ms": round(min(values), 1), "max_ms": round(max(values), 1),
               "n": len(values)}  # fmt: skip
        if ref and name != reference:
            row["ratio_to_" + reference] = round(med / ref, 3)
        out[name] = row
        extra = f"  ratio {row['ratio_to_' + reference]:.2f}" if ref and name != reference else ""
        print(f"{name:28} median {med:8.1f} ms  (min {min(values):.1f}, max {max(values):.1f}, n={len(values)}){extra}")
    return out


def live(args: argparse.Namespace) -> dict[str, Any]:
    py = sys.executable
    commands = {
        "python3 -c pass (floor)": [py, "-c", "pass"],
        "hoststate snap --only gpu": [py, "-m", "hoststate", "snap", "--only", "gpu"],
        "hoststate snap (all)": [py, "-m", "hoststate", "snap"],
        "nvidia-smi -q -x": ["nvidia-smi", "-q", "-x"],
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    return _report(_alternate(commands, args.rounds, env), "nvidia-smi -q -x")


class _TimedNvml:
    """Stands in for pynvml and times every nvml* call (per function name)."""

    def __init__(self, real: Any):
        from hoststate.collectors.gpu import _bindings_version

        self._real = real
        self.bindings_version = _bindings_version(real)
        self.times: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not name.startswith("nvml") or not callable(attr):
            return attr

        def timed(*a: Any) -> Any:
            start = time.perf_counter()
            try:
                return attr(*a)
            finally:
                self.times.setdefault(name, []).append((time.perf_counter() - start) * 1000)

        return timed


def profile(args: argparse.Namespace) -> dict[str, Any]:
    from hoststate.collectors import Context
    from hoststate.collectors.gpu import collect
    from hoststate.nvml import import_pynvml

    start = time.perf_counter()
    real = import_pynvml()
    import_ms = (time.perf_counter() - start) * 1000
    totals: dict[str, list[float]] = {}
    walls = []
    for _ in range(args.runs):
        proxy = _TimedNvml(real)
        start = time.perf_counter()
        section = collect(Context(nvml=proxy))
        walls.append((time.perf_counter() - start) * 1000)
        for name, values in proxy.times.items():
            totals.setdefault(name, []).append(sum(values))
        calls = sum(len(v) for v in proxy.times.values())
    rows = sorted(((statistics.median(v), k) for k, v in totals.items()), reverse=True)
    print(f"import pynvml (in this process): {import_ms:.1f} ms; collect median {statistics.median(walls):.1f} ms "
          f"over {args.runs} runs, {calls} NVML calls per run, status {section.status}")
    for med, name in rows[:15]:
        print(f"  {name:48} {med:7.2f} ms")
    return {"import_ms": round(import_ms, 1), "collect_median_ms": round(statistics.median(walls), 1),
            "calls_per_run": calls, "per_call_ms": {k: round(m, 3) for m, k in rows}}  # fmt: skip


def replay(args: argparse.Namespace) -> dict[str, Any]:
    from hoststate.capture import collect
    from hoststate.collectors import Context
    from hoststate.nvml_replay import load_data, synthetic_hgx
    from hoststate.snapshot import to_toml

    hosts: dict[str, dict[str, Any]] = {f"{n} GPU(s) synthetic HGX": synthetic_hgx(n) for n in (1, 8, 64)}
    with open(os.path.join(REPO, "fixtures", "nvml", "h200.json"), encoding="utf-8") as fh:
        hosts["real H200 replay"] = json.load(fh)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in hosts.items():
            walls = []
            for _ in range(args.runs):
                nvml = load_data(data)
                start = time.perf_counter()
                snap = collect(Context(nvml=nvml), names=("gpu",))
                text = to_toml(snap)
                walls.append((time.perf_counter() - start) * 1000)
            path = os.path.join(tmp, "replay.json")
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            env = {**os.environ, "HOSTSTATE_NVML_REPLAY": path,
                   "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}  # fmt: skip
            proc = _alternate({"cli": [sys.executable, "-m", "hoststate", "snap", "--only", "gpu"]}, args.cli_runs, env)
            cli = statistics.median(proc["cli"])
            med = statistics.median(walls)
            print(f"{label:28} collect+to_toml median {med:8.1f} ms ({nvml.calls} NVML calls, {len(text) // 1024} KiB "
                  f"TOML); `snap --only gpu` process median {cli:.1f} ms")
            out[label] = {"in_process_ms": round(med, 1), "nvml_calls": nvml.calls, "toml_kib": len(text) // 1024,
                          "cli_ms": round(cli, 1)}  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["live", "profile", "replay"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cli-runs", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    result = {"live": live, "profile": profile, "replay": replay}[args.mode](args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"mode": args.mode, "python": sys.version.split()[0], "result": result}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
