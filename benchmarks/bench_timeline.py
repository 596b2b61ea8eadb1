"""What drawing a watched run costs by hand-written SVG against matplotlib (docs/architecture.md).

    PYTHONPATH=. python3 benchmarks/bench_timeline.py [--mpl-python PYTHON]

PYTHON: an interpreter with matplotlib installed (a throwaway venv: hoststate does not depend on it). Prints, for
the 8-GPU trace scripts/draw_timelines.py builds: the import of each in a fresh process (median of alternating
runs, the bare interpreter subtracted), the time to draw, the drawing's size, and the installed size of
matplotlib with what it pulls in. The matplotlib figure draws only the three lines per GPU and the reason
bands, less than the timeline: its numbers are a lower bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternate, median_ms  # noqa: E402
from scripts.draw_timelines import eight_gpus  # noqa: E402

#: matplotlib's figure of the same data: 3 line plots and the reason bands per GPU, saved as SVG.
MPL = r"""
import json, sys, time
begin = time.perf_counter()
import matplotlib
matplotlib.use("svg")
import matplotlib.pyplot as plt
imported = time.perf_counter()
trace = json.load(open(sys.argv[1]))
t0 = trace["counters"][0][0]
t = [s[0] - t0 for s in trace["samples"]]
n = len(trace["gpus"])
fig, axes = plt.subplots(4 * n, 1, figsize=(11, 2.6 * n), sharex=True)
for i in range(n):
    rows = [s[1][i] for s in trace["samples"]]
    for k, (col, scale) in enumerate(((1, 1), (2, 1000), (3, 1))):
        axes[4 * i + k].plot(t, [r[col] / scale if r[col] is not None else float("nan") for r in rows])
    axes[4 * i + 3].fill_between(t, [1 if (r[0] or 0) & 4 else 0 for r in rows], step="post")
fig.savefig(sys.argv[2], format="svg")
print(json.dumps({"import_s": imported - begin, "draw_s": time.perf_counter() - imported}))
"""


def _du(paths: list[str]) -> int:
    out = subprocess.run(["du", "-sbc", *paths], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def main(argv: list[str]) -> None:
    mpl_python = argv[argv.index("--mpl-python") + 1] if "--mpl-python" in argv else sys.executable
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = os.path.join(tmp, "eight.json")
        with open(trace_path, "w") as fh:
            json.dump(eight_gpus(), fh)
        times = alternate({
            "bare": [sys.executable, "-c", "pass"],
            "timeline": [sys.executable, "-c", "import hoststate.render.timeline"],
            "mpl_bare": [mpl_python, "-c", "pass"],
            "matplotlib": [mpl_python, "-c", "import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot"],
        }, runs=7, env=env)
        begin = time.perf_counter()
        drawn = subprocess.run([sys.executable, "-m", "hoststate", "timeline", trace_path, "-o", "-", "--baseline",
                                "fixtures/watch/h200-base-run.toml", *[f"--own-pid={481 + i}" for i in range(8)]],
                               env=env, capture_output=True, check=True).stdout
        ours_s = time.perf_counter() - begin
        mpl_svg = os.path.join(tmp, "mpl.svg")
        mpl = json.loads(subprocess.run([mpl_python, "-c", MPL, trace_path, mpl_svg], capture_output=True,
                                        text=True, check=True).stdout)
        site = subprocess.run([mpl_python, "-c", "import matplotlib, os; print(os.path.dirname(os.path.dirname("
                               "matplotlib.__file__)))"], capture_output=True, text=True, check=True).stdout.strip()
        tools = ("pip", "setuptools", "_distutils", "distutils", "pkg_resources", "__pycache__")
        deps = [os.path.join(site, d) for d in os.listdir(site) if not d.startswith(tools)]
        names = sorted(d.removesuffix(".dist-info") for d in os.listdir(site)
                       if d.endswith(".dist-info") and not d.startswith(tools))
        print("| | hand-written SVG (hoststate.render.timeline) | matplotlib |")
        print("|---|---|---|")
        print(f"| import, fresh process | {median_ms(times['timeline']) - median_ms(times['bare']):.0f} ms "
              f"| {median_ms(times['matplotlib']) - median_ms(times['mpl_bare']):.0f} ms |")
        print(f"| draw 8 GPUs, 32 samples | {ours_s * 1000:.0f} ms (the whole command, judging included) "
              f"| {mpl['draw_s'] * 1000:.0f} ms (lines and one band only) |")
        print(f"| drawing's size | {len(drawn) / 1024:.0f} KiB | {os.path.getsize(mpl_svg) / 1024:.0f} KiB |")
        print(f"| installed | 0 (part of hoststate) | {_du(deps) / 2**20:.0f} MiB "
              f"({', '.join(names)}) |")


if __name__ == "__main__":
    main(sys.argv[1:])
