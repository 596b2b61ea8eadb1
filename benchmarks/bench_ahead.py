"""The GPU section collected ahead in a forked child (hoststate.ahead), against the same command without it.

    python benchmarks/bench_ahead.py [--runs 20]

Alternates, in one run: ``python -m hoststate snap`` (the installed command's path: the child forked at the
start), the same snap entered at hoststate.cli.main (no child: the collector runs in a thread of the parent),
and pyperf collect_metadata; then the same two for ``snap --only gpu`` against benchmarks/bare_nvml.py. Prints
medians and ratios; needs an NVIDIA driver (or HOSTSTATE_NVML_REPLAY) for the difference to show, since
elsewhere no child is forked and both paths are the same. Measures only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.common import PY, alternate, machine, median_ms, table  # noqa: E402

#: The CLI entered after its imports: no child is forked.
LATE = "import sys\nfrom hoststate.cli import main\nmain(sys.argv[1:])"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hoststate-bench-ahead-") as tmp:
        out = os.path.join(tmp, "s.toml")
        for label, extra, reference in (
                ("snap", [], [PY, "-m", "pyperf", "collect_metadata"]),
                ("snap --only gpu", ["--only", "gpu"], [PY, os.path.join(HERE, "bare_nvml.py")])):
            snap = ["snap", "-q", "--force", "-o", out, *extra]
            commands = {"ahead": [PY, "-m", "hoststate", *snap], "late": [PY, "-c", LATE, *snap], "ref": reference}
            times = alternate(commands, args.runs)
            ahead, late, ref = (median_ms(times[k]) for k in ("ahead", "late", "ref"))
            rows.append([label, f"{ahead:.1f} ms", f"{late:.1f} ms", f"{ref:.1f} ms", f"{ahead / ref:.2f}",
                         f"{late / ref:.2f}"])
    print(f"machine: {machine()}; {args.runs} alternating rounds")
    print(table(rows, ["command", "child ahead", "no child", "reference", "ratio ahead", "ratio no child"]))


if __name__ == "__main__":
    main()
