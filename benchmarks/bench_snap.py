"""`hoststate snap` against `python -m pyperf collect_metadata`, side by side (design.md target: ratio <= 1.0).

Both are run as a user runs them: a fresh interpreter each time, alternating, medians over N runs.
Usage: python benchmarks/bench_snap.py [RUNS]
"""

from __future__ import annotations

import sys

from benchmarks.common import PY, alternate, machine, median_ms, table


def main(runs: int = 15) -> list[list[str]]:
    commands = {
        "hoststate snap (live host)": [PY, "-m", "hoststate", "snap"],
        "python -m pyperf collect_metadata": [PY, "-m", "pyperf", "collect_metadata"],
    }
    times = alternate(commands, runs)
    ref = median_ms(times["python -m pyperf collect_metadata"])
    rows = [[name, f"{median_ms(t):.1f}", f"{median_ms(t) / ref:.2f}"] for name, t in times.items()]
    print(f"snap vs pyperf collect_metadata, median of {runs} alternating runs on {machine()}")
    print(table(rows, ["command", "median ms", "ratio"]))
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
