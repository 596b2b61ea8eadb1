"""Guard's own overhead (`guard --baseline B -- true` minus `true`) against `snap` + `diff` run separately.

Guard does in one process what a script would otherwise do in two (snap to a file, diff it against the baseline),
so its overhead should be at most that pair's. Fresh interpreters, as a user runs them; the commands alternate
round by round so load drift hits all alike; medians over RUNS rounds. On the seed fixture trees through --root:
the baseline host state (comparable) and the experiment's (8 DSA WQs enabled; guard with --accept '**' so the
command runs, diff exits 1).
Usage: python benchmarks/bench_guard.py [RUNS]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks.common import PY, machine, median_ms, table, time_command

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS = os.path.join(os.path.dirname(HERE), "fixtures", "hosts")
HOSTSTATE = [PY, "-m", "hoststate"]


def _commands(baseline: str, root: str, current: str, accept: list[str]) -> dict[str, list[str]]:
    true = shutil.which("true") or "/bin/true"
    return {
        "true": [true],
        "guard -- true": [*HOSTSTATE, "guard", "--baseline", baseline, "--root", root, *accept, "--", true],
        "snap -o": [*HOSTSTATE, "snap", "--root", root, "-o", current, "--force"],
        "diff": [*HOSTSTATE, "diff", baseline, current],
    }


def measure(baseline: str, root: str, current: str, accept: list[str], runs: int) -> dict[str, float]:
    commands = _commands(baseline, root, current, accept)
    for argv in commands.values():  # warm-up round (page cache, .pyc)
        time_command(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    pair: list[float] = []
    overhead: list[float] = []
    for _ in range(runs):
        took = {name: time_command(argv) for name, argv in commands.items()}
        for name, value in took.items():
            times[name].append(value)
        pair.append(took["snap -o"] + took["diff"])
        overhead.append(took["guard -- true"] - took["true"])
    out = {name: median_ms(values) for name, values in times.items()}
    out["snap + diff"] = median_ms(pair)
    out["guard overhead"] = median_ms(overhead)
    return out


def main(runs: int = 15) -> list[list[str]]:
    base_tree, exp_tree = os.path.join(HOSTS, "seed-baseline"), os.path.join(HOSTS, "seed-experiment")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        baseline, current = os.path.join(tmp, "baseline.toml"), os.path.join(tmp, "current.toml")
        subprocess.run([*HOSTSTATE, "snap", "--root", base_tree, "-o", baseline], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Under --root the gpu, packages and vllm collectors are skipped on both sides: unreadable, so accepted.
        skipped = ["--accept", "gpu", "--accept", "packages", "--accept", "vllm"]
        cases = [("seed-baseline (comparable)", base_tree, skipped),
                 ("seed-experiment (accepted)", exp_tree, ["--accept", "**"])]
        for name, tree, accept in cases:
            m = measure(baseline, tree, current, accept, runs)
            rows.append([name, f"{m['true']:.1f}", f"{m['guard -- true']:.1f}", f"{m['guard overhead']:.1f}",
                         f"{m['snap -o']:.1f}", f"{m['diff']:.1f}", f"{m['snap + diff']:.1f}",
                         f"{m['guard overhead'] / m['snap + diff']:.2f}"])
    print(f"guard overhead vs snap + diff, median of {runs} alternating rounds on {machine()}")
    print(table(rows, ["host tree", "true ms", "guard -- true ms", "guard overhead ms", "snap ms", "diff ms",
                       "snap + diff ms", "overhead / (snap + diff)"]))
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
