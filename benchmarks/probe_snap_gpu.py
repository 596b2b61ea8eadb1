"""Where `snap --only gpu` spends the time the bare pynvml read does not: fresh processes, each one step more.

    python3 benchmarks/probe_snap_gpu.py [--runs N]

Each row is a whole command, timed in alternating rounds (median); the step's cost is the difference to the row
before it. The bare read's rows (interpreter, pynvml's import, nvmlInit, the calls, nvmlShutdown) are the floor;
hoststate's rows add its imports, the collector in the child (hoststate.ahead), and the output: to stdout (no
file) and to a file (written atomically: a temporary file, fsync, rename, the directory's fsync).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import PY, alternate, median_ms, table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def steps(out: str) -> dict[str, list[str]]:
    nv = "import pynvml as n; "
    return {
        "interpreter": [PY, "-c", "pass"],
        "+ import pynvml": [PY, "-c", "import pynvml"],
        "+ nvmlInit": [PY, "-c", nv + "n.nvmlInit()"],
        "+ nvmlShutdown": [PY, "-c", nv + "n.nvmlInit(); n.nvmlShutdown()"],
        "bare read, 10 fields a GPU": [PY, os.path.join(HERE, "bare_nvml.py")],
        "hoststate --version": [PY, "-m", "hoststate", "--version"],
        "import hoststate.capture": [PY, "-c", "import hoststate.capture"],
        "snap --only gpu -o -": [PY, "-m", "hoststate", "snap", "-q", "--only", "gpu", "-o", "-"],
        "snap --only gpu -o FILE": [PY, "-m", "hoststate", "snap", "-q", "--only", "gpu", "--force", "-o", out],
        "snap -o FILE": [PY, "-m", "hoststate", "snap", "-q", "--force", "-o", out],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = alternate(steps(os.path.join(tmp, "s.toml")), args.runs)
    rows, last = [], None
    for name, values in times.items():
        ms = median_ms(values)
        step = f"{ms - last:+.1f} ms" if last is not None and name.startswith("+") else "-"
        rows.append([name, f"{ms:.1f} ms", step])
        last = ms
    print(f"median of {args.runs} alternating runs")
    print(table(rows, ["command", "median", "step"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
