"""Commands side by side, as the A/B rows of docs/performance.md and benchmarks/results/ab-*.txt were taken.

``python -m benchmarks.ab ROUNDS NAME=COMMAND [NAME=COMMAND ...]`` runs each command (split as a shell would,
without one) as a fresh process: three warm-up runs each, then ROUNDS rounds, every other round in the reverse
order, so that load drift hits all alike. It prints, for each, the median and first quartile of the whole
process's wall time and the median of the CPU time the process itself used (wait4: its children's are not
counted); then, for each command after the first, the median of its ratios to the first, round by round. A
command that fails stops the run: a timing of an error is not a timing. ``--samples=FILE`` first writes every
round's wall times there as JSON, by command name.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time


def run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv``; SystemExit when it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{shlex.join(argv)}: exit {code}")
    return wall, usage.ru_utime + usage.ru_stime


def main(args: list[str]) -> None:
    samples = None
    if args and args[0].startswith("--samples="):
        samples, args = args[0].removeprefix("--samples="), args[1:]
    if len(args) < 2 or not args[0].isdigit() or not all("=" in a for a in args[1:]):
        raise SystemExit(__doc__)
    rounds = int(args[0])
    commands = {name: shlex.split(cmd) for name, cmd in (a.split("=", 1) for a in args[1:])}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():
        for _ in range(3):
            run(argv)
    for n in range(rounds):
        order = list(commands.items())
        for name, argv in order if n % 2 == 0 else reversed(order):
            w, c = run(argv)
            wall[name].append(w)
            cpu[name].append(c)
    if samples:
        with open(samples, "w", encoding="utf-8") as f:
            json.dump(wall, f)
    for name in commands:
        q1 = statistics.quantiles(wall[name])[0] if rounds > 1 else wall[name][0]
        print(f"{name:10} wall median {statistics.median(wall[name]) * 1000:7.1f} ms  q1 {q1 * 1000:7.1f}  "
              f"cpu(self only) median {statistics.median(cpu[name]) * 1000:6.1f}")
    # Each round ran every command once, side by side: the median of the rounds' ratios is not moved by a drift
    # in load that lasts a few rounds, nor by which of two speeds a whole run happened to land on more often.
    first, *others = commands
    for name in others:
        paired = [a / b for a, b in zip(wall[name], wall[first], strict=True)]
        deciles = statistics.quantiles(paired, n=10) if rounds > 1 else paired * 9
        print(f"{name:10} / {first}: median of the {rounds} rounds' ratios {statistics.median(paired):.3f} "
              f"(deciles 1 and 9: {deciles[0]:.3f}, {deciles[-1]:.3f})")


if __name__ == "__main__":
    main(sys.argv[1:])
