"""The command's garbage-collector settings side by side: each command as `python -m hoststate` runs it, and as
the same entry point runs it with Python's defaults (a young collection every 700 allocations, the exit's
collections over every object).

    python3 benchmarks/probe_gc.py [--runs N] [--only snap,show,diff,guard]

Each row times whole commands in alternating rounds (median): the entry point as shipped (hoststate.__main__:
YOUNG and gc.freeze at the end), and the same entry point with those two calls made to do nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import PY, alternate, median_ms, table  # noqa: E402

#: hoststate.__main__.main itself, with its two garbage-collector calls made to do nothing (so the probe stays in
#: step with the entry point whatever else it does).
DEFAULTS = ("import gc, sys; sys.argv[0] = 'hoststate'; gc.set_threshold = lambda *a: None; "
            "gc.freeze = lambda: None; from hoststate.__main__ import main; main()")


def commands(tmp: str) -> dict[str, list[str]]:
    a, b = os.path.join(tmp, "a.toml"), os.path.join(tmp, "b.toml")
    for path in (a, b):
        subprocess.run([PY, "-m", "hoststate", "snap", "-q", "--force", "-o", path], check=True)
    return {"snap": ["snap", "-q", "-o", "-"], "show": ["show", a], "diff": ["diff", a, b],
            "guard": ["guard", "--baseline", a, "--", "true"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in commands(tmp).items():
            if args.only and name not in args.only.split(","):
                continue
            times = alternate({"shipped": [PY, "-m", "hoststate", *argv], "defaults": [PY, "-c", DEFAULTS, *argv]},
                              args.runs)
            a, b = median_ms(times["shipped"]), median_ms(times["defaults"])
            rows.append([name, f"{a:.1f} ms", f"{b:.1f} ms", f"{a / b:.2f}"])
    print(f"hoststate entry point against Python's garbage-collector defaults, median of {args.runs} alternating runs")
    print(table(rows, ["command", "shipped", "gc defaults", "ratio"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
