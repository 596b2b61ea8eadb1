"""Draw the timelines docs/watch.md shows (docs/img/timeline-*.svg) from the H200 traces in fixtures/watch/.

Run it after a change of the drawing makes tests/test_timeline.py's currency test fail, then look at the SVGs:
    python scripts/draw_timelines.py            # rewrite docs/img/timeline-*.svg
    python scripts/draw_timelines.py --check    # only list what is stale (exit 1 if anything is)

Besides the recorded traces it draws one it builds: :func:`eight_gpus`, the foreign trace's real readings spread
over eight GPUs with a thermal slowdown, an XID and a lost GPU added, to show (and test) a full host's page.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hoststate.render.timeline import judge_trace, render  # noqa: E402
from hoststate.snapshot import load  # noqa: E402
from hoststate.watch import baseline_metrics, load_trace  # noqa: E402

WATCH = "fixtures/watch"
BASE_RUN = f"{WATCH}/h200-base-run.toml"
OWN_PID = 481  # the matmul loop the H200 recordings started (tests/test_watch.py)
#: name -> (trace, watched baseline run or None, the run's own pids or None): what docs/watch.md shows.
DRAWINGS: dict[str, tuple[str, str | None, list[int] | None]] = {
    "h200-idle": (f"{WATCH}/h200-idle.json", None, None),
    "h200-dense-a": (f"{WATCH}/h200-dense-a.json", BASE_RUN, [OWN_PID]),
    "h200-dense-b": (f"{WATCH}/h200-dense-b.json", None, [OWN_PID]),
    "h200-foreign": (f"{WATCH}/h200-foreign.json", BASE_RUN, [OWN_PID]),
    "h200-guard-live": (f"{WATCH}/h200-guard-live.json", BASE_RUN, [571]),  # its loop, guard's own child
    "eight-gpus": ("", BASE_RUN, [OWN_PID + i for i in range(8)]),
}
OUT = REPO / "docs" / "img"
EIGHT_TITLE = f"8 GPUs built from {WATCH}/h200-foreign.json by scripts/draw_timelines.py (not a recording)"

THERMAL = 0x20  # nvmlClocksEventReasonSwThermalSlowdown
XID = 0x8  # nvmlEventTypeXidCriticalError


def eight_gpus() -> dict[str, Any]:
    """The foreign trace's H200 readings on eight GPUs: GPU i runs pid 481+i (the foreign pid stays on GPU 0 and
    joins GPU 6 too), GPU 3 is held by a software thermal slowdown from 12 s to 21 s (its violation counter
    grown to match), GPU 5 reports XID 79 at 20 s and is read as nothing after it."""
    real = json.loads((REPO / WATCH / "h200-foreign.json").read_text())
    trace = {k: copy.deepcopy(v) for k, v in real.items() if k != "summary"}
    foreign = {p for _, rows in real["samples"] for p in rows[0][5]} - {OWN_PID}
    trace["description"] = EIGHT_TITLE
    uuid = real["gpus"][0]["uuid"][:-2]
    trace["gpus"] = [{**real["gpus"][0], "index": i, "uuid": f"{uuid}{i:02d}"} for i in range(8)]
    t0 = real["samples"][0][0]
    thermal_s = [0.0] * len(real["samples"])
    samples = []
    for k, (t, rows) in enumerate(real["samples"]):
        reasons, sm, power, temp, pstate, pids = rows[0]
        out = []
        for i in range(8):
            mine = [OWN_PID + i] + ([p for p in pids if p in foreign] if i in (0, 6) else [])
            row = [reasons, sm - 15 * (i % 3), power - 4000 * i, temp + i % 4, pstate, mine]
            if i == 3 and 12 <= t - t0 < 21:
                row[0], row[1], row[3] = reasons | THERMAL, 1200 + 10 * (k % 3), 87
                thermal_s[k] = 1.0
            if i == 5 and t - t0 > 20:
                row = [None, None, None, None, None, []]
            out.append(row)
        samples.append([t, out])
    trace["samples"] = samples
    counters = []
    for t, rows in real["counters"]:
        held = sum(s for (st, _), s in zip(real["samples"], thermal_s, strict=True) if st < t)
        per_gpu = [dict(rows[0]) for _ in range(8)]
        per_gpu[3]["violation_sw_thermal_ns"] = rows[0]["violation_sw_thermal_ns"] + int(held * 1e9)
        counters.append([t, per_gpu])
    trace["counters"] = counters
    trace["events"] = [[t0 + 20.2, 5, XID, 79]]
    return trace


def draw(name: str) -> str:
    """The SVG of one drawing, as docs/img/timeline-NAME.svg holds it."""
    path, base, own = DRAWINGS[name]
    trace = eight_gpus() if name == "eight-gpus" else load_trace(str(REPO / path)).trace
    baseline = baseline_metrics(load(str(REPO / base))) if base else None
    judged = judge_trace(trace, baseline=baseline, own_pids=own)
    return render(trace, judged, EIGHT_TITLE if name == "eight-gpus" else path, "svg")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name in DRAWINGS:
        target = OUT / f"timeline-{name}.svg"
        drawn = draw(name)
        if target.exists() and target.read_text(encoding="utf-8") == drawn:
            continue
        stale += 1
        print(f"{target.relative_to(REPO)}: stale")
        if not check:
            target.write_text(drawn, encoding="utf-8")
    print(f"{stale} stale drawing(s)" + ("" if check else " rewritten"))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
