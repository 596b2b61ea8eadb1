"""Shared timing helpers for the benchmark scripts: alternating runs of whole commands, medians, ratios.

Benchmarks measure; they never pass or fail on time. Each script prints one table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

PY = sys.executable


def time_command(argv: list[str], *, env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``argv`` in seconds; output discarded; a failure is an error."""
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.decode()}")
    return took


def alternate(commands: dict[str, list[str]], runs: int, *, env: dict[str, str] | None = None,
              warmup: int = 1) -> dict[str, list[float]]:
    """Run the commands in turn, ``runs`` rounds, every other round in the reverse order (as benchmarks/ab.py), so
    that drift in machine load, and what one command leaves for the next, hit all of them alike."""
    for _ in range(warmup):
        for argv in commands.values():
            time_command(argv, env=env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    order = list(commands.items())
    for n in range(runs):
        for name, argv in order if n % 2 == 0 else order[::-1]:
            times[name].append(time_command(argv, env=env))
    return times


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def machine() -> str:
    import platform

    return f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"
