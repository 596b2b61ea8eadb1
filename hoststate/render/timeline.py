"""A watched run drawn: one panel per GPU of a ``--watch-trace`` file, as one self-contained SVG (or HTML page).

Each panel has the SM clock, power and temperature as lines on scales shared by all GPUs (so eight panels compare
at a glance), the clock-event reasons as bands, the compute processes on the GPU (each new one marked where it
appeared, a foreign one in red), the NVML events (XIDs and the like), and the run's reasons as numbered dashed lines
where they first fired. The verdict is hoststate.watch's own: the trace is replayed through its sampler and judged
by its rules, whole for the verdict and prefix by prefix for where each reason fired; nothing here rates a run.

Plain SVG written by hand (docs/architecture.md says why no plotting library): no script, no font or stylesheet
fetched, hover text as SVG ``<title>``. Every string that came from the trace is XML-escaped, with the characters
XML cannot carry at all replaced, so another user's process or device name cannot inject markup.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import InputError
from hoststate.nvml import SAMPLED_REASONS
from hoststate.run import judge as run_judge
from hoststate.run import sampler as run_sampler
from hoststate.run import summary as run_summary
from hoststate.text import clean

#: The drawing's width and its parts, in px: labels on the left, the time axis in between.
WIDTH, LEFT, RIGHT = 1100, 170, 24
PLOT = WIDTH - LEFT - RIGHT
LINE_H, BAND_H, PROC_H, GAP = 46, 11, 16, 8
#: The three lines: (row index, label, unit, colour).
LINES = ((1, "SM clock", "MHz", "#1f5fa8"), (2, "power", "W", "#c2410c"), (3, "temperature", "°C", "#7c3aed"))
REASON_COLOURS = {
    "gpu_idle": "#c8c8c8", "sw_power_cap": "#e0a100", "hw_slowdown": "#b91c1c", "sync_boost": "#6d8ecf",
    "sw_thermal_slowdown": "#f97316", "hw_thermal_slowdown": "#991b1b", "hw_power_brake_slowdown": "#86198f",
}  # fmt: skip
VERDICT_COLOURS = {"clean": "#15803d", "degraded": "#b45309", "invalid": "#b91c1c"}
#: Prefixes judged at most on the first pass over a long trace (then the stretch before each first hit, halved until
#: one sample is left): where a reason fired costs about a hundred replays, not one per sample.
COARSE_PREFIXES = 100
#: Longest text taken from the trace onto the drawing (a name or an event's data); the rest is cut with "…".
MAX_TEXT = 90
#: Process appearances labelled per GPU; later ones are counted in the panel's title.
MAX_PROC_LABELS = 16

#: What XML reads as markup, as character references (xml.sax.saxutils would cost an import of urllib).
#: A tab or line break is a space: SVG text is one line, and XML would turn them into spaces in an attribute anyway.
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "\t": " ", "\n": " ",
                          "\r": " "})
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def cut(value: Any, limit: int = MAX_TEXT) -> str:
    """A string from the trace at most ``limit`` characters long (the rest as "…"), so one name cannot push the
    drawing apart."""
    s = str(value)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def text(value: Any) -> str:
    """``value`` as XML character data: a lone surrogate (``"\\ud800"`` in the trace's JSON) written ``\\uNNNN`` as
    hoststate.text does, characters XML 1.0 cannot hold as U+FFFD, then escaped (quotes too, so the same string
    is safe in an attribute), tabs and line breaks as spaces."""
    return _NOT_XML.sub("\ufffd", clean(str(value))).translate(_ESCAPES)


def _num(value: Any) -> float | None:
    """A finite number from the trace, else None (an unread value is drawn as a gap, never as zero)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# -- the verdict, from hoststate.watch ---------------------------------------------------------------------------


@dataclass
class Judged:
    """The run as hoststate.watch judges its trace: verdict, reasons, the summary, and where each reason fired
    (seconds from the run's start; None when only the whole run shows it)."""

    verdict: str
    reasons: list[dict[str, Any]]
    summary: dict[str, Any]
    fired: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _summary(trace: Mapping[str, Any], own_pids: set[int] | None, root: str) -> dict[str, Any]:
    # a long interval: the thread never samples on its own, stop() replays the whole trace at once; root: a folder
    # without proc/, so this machine's cgroup is not read into a recorded run
    sampler = run_sampler.Sampler(run_sampler.TraceSource(trace), interval=3600.0, root=root,
                            own_pids=(lambda: own_pids) if own_pids is not None else None)
    sampler.start()
    sampler.stop()
    return sampler.summary()


def _prefix(trace: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The trace as it stood at its sample ``k``: the samples, counter reads and events up to then."""
    samples = trace["samples"][: k + 1]
    t = samples[-1][0]
    counters = [c for c in trace["counters"] if c[0] <= t] or trace["counters"][:1]
    return {**trace, "samples": samples, "counters": counters,
            "events": [e for e in trace.get("events", []) if e[0] <= t]}


def _fired_metrics(trace: Mapping[str, Any], k: int, own: set[int] | None, root: str,
                   baseline: Mapping[str, Any] | None, rules: Sequence[run_judge.Rule]) -> set[str]:
    _, reasons = run_judge.judge(run_summary.metrics(_summary(_prefix(trace, k), own, root)), baseline, rules)
    return {r["metric"] for r in reasons}


def _first_fired(trace: Mapping[str, Any], wanted: set[str], own: set[int] | None, root: str,
                 baseline: Mapping[str, Any] | None, rules: Sequence[run_judge.Rule]) -> dict[str, int]:
    """metric -> the first sample at which the judge, given the trace up to it, names that metric.

    Every sample of a short trace is judged; a long one at :data:`COARSE_PREFIXES` marks, each first hit then
    narrowed down by halving the stretch since the previous mark."""
    n = len(trace["samples"])
    step = max(1, math.ceil(n / COARSE_PREFIXES))
    found: dict[str, int] = {}
    previous = -1
    for k in sorted(set(range(0, n, step)) | {n - 1}):
        for metric in _fired_metrics(trace, k, own, root, baseline, rules) & (wanted - set(found)):
            low, high = previous, k  # not fired at low (or before the run), fired at high
            while high - low > 1:
                mid = (low + high) // 2
                if metric in _fired_metrics(trace, mid, own, root, baseline, rules):
                    high = mid
                else:
                    low = mid
            found[metric] = high
        previous = k
        if wanted <= set(found):
            break
    return found


def judge_trace(trace: Mapping[str, Any], *, baseline: Mapping[str, Any] | None = None,
                own_pids: Iterable[int] | None = None, rules: Sequence[run_judge.Rule] = run_judge.RULES) -> Judged:
    """The verdict hoststate.watch gives this trace, and where each of its reasons fired.

    ``baseline``: a watched baseline run's metrics (hoststate.run_judge.baseline_metrics); ``own_pids``: the run's own
    processes, without which no process counts as foreign (the trace does not record whose they are).
    """
    # the trace names its run's own processes when guard --watch recorded it (own_pids)
    recorded = trace.get("own_pids") if isinstance(trace.get("own_pids"), list) else None
    own = {int(p) for p in own_pids} if own_pids is not None else set() if recorded is not None else None
    with tempfile.TemporaryDirectory(prefix="hoststate-timeline-") as root:
        summary = _summary(trace, own, root)
        verdict, reasons = run_judge.judge(run_summary.metrics(summary), baseline, rules)
        wanted = {r["metric"] for r in reasons}
        first = _first_fired(trace, wanted, own, root, baseline, rules) if wanted else {}
    t0 = run_start(trace)
    fired = {m: (float(trace["samples"][first[m]][0]) - t0 if m in first else None) for m in wanted}
    notes = ["judged from the trace alone: host changes between the snapshots before and after the run are in "
             "its record, not in its trace"]
    if baseline is None:
        notes.append("no watched baseline run (--baseline): rules that need one are not judged")
    if own is None:
        notes.append("the run's own processes not named (--own-pid, or own_pids in the trace): no process counts as "
                     "foreign")
    return Judged(verdict, reasons, summary, fired, notes)


# -- the trace as series -------------------------------------------------------------------------------------------


def run_start(trace: Mapping[str, Any]) -> float:
    """The run's time zero: its first counter read (taken before the first sample), else its first sample."""
    times = [float(c[0]) for c in trace.get("counters", [])[:1]] + [float(s[0]) for s in trace["samples"][:1]]
    return min(times)


@dataclass
class Gpu:
    """One GPU's samples as drawable series: times (s from the run's start) and one value list per quantity."""

    index: int
    label: str
    t: list[float] = field(default_factory=list)
    sm: list[float | None] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)
    temp: list[float | None] = field(default_factory=list)
    reasons: list[int | None] = field(default_factory=list)
    pids: list[list[str]] = field(default_factory=list)


def _gpu_label(i: int, info: Mapping[str, Any]) -> str:
    if not isinstance(info, Mapping):
        return f"GPU {i}"
    parts = (f"GPU {cut(info.get('index', i), 8)}", cut(info.get("name", ""), 40), cut(info.get("uuid", ""), 48))
    return " ".join(p for p in parts if p)


def series(trace: Mapping[str, Any]) -> list[Gpu]:
    """Per GPU, the sampled rows of the trace (``[reasons, sm_mhz, power_mw, temperature_c, pstate, [pids]]``)."""
    infos = list(trace.get("gpus", []))
    width = max([len(infos)] + [len(s[1]) for s in trace["samples"] if isinstance(s[1], list)])
    gpus = [Gpu(i, _gpu_label(i, infos[i] if i < len(infos) else {})) for i in range(width)]
    t0 = run_start(trace)
    for t, rows in trace["samples"]:
        for i, gpu in enumerate(gpus):
            row = rows[i] if isinstance(rows, list) and i < len(rows) and isinstance(rows[i], list) else []
            reasons, sm, power, temp, _pstate, pids = (list(row) + [None] * 6)[:6]
            gpu.t.append(float(t) - t0)
            gpu.sm.append(_num(sm))
            power_w = _num(power)
            gpu.power.append(power_w / 1000 if power_w is not None else None)
            gpu.temp.append(_num(temp))
            gpu.reasons.append(int(reasons) if _num(reasons) is not None else None)
            gpu.pids.append([cut(p, 24) for p in pids] if isinstance(pids, list) else [])
    return gpus


def _nice_ceiling(value: float) -> float:
    """The next round number at or above ``value`` (1, 2, 2.5, 5 times a power of ten), for an axis."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value)


def _scale(values: Iterable[float | None], floor_at_zero: bool = True) -> tuple[float, float]:
    got = [v for v in values if v is not None]
    if not got:
        return 0.0, 1.0
    if floor_at_zero:
        return 0.0, _nice_ceiling(max(got))
    low, high = 10 * math.floor(min(got) / 10), 10 * math.ceil(max(got) / 10)
    return float(low), float(high if high > low else low + 10)


def _ticks(span: float) -> list[float]:
    step = _nice_ceiling(span / 8)
    return [i * step for i in range(int(span // step) + 1)]


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.3g}"


# -- drawing -------------------------------------------------------------------------------------------------------


class Svg:
    """SVG elements appended as strings: every attribute value and tooltip passes through :func:`text`; ``body`` is
    markup already built from :func:`text` (a label's text, tspans)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, tag: str, body: str | None = None, tip: str | None = None, **attrs: Any) -> None:
        attr = "".join(f' {k.rstrip("_").replace("_", "-")}="{text(v)}"' for k, v in attrs.items())
        inner = (f"<title>{text(tip)}</title>" if tip else "") + (body or "")
        self.parts.append(f"<{tag}{attr}>{inner}</{tag}>" if inner else f"<{tag}{attr}/>")

    def label(self, x: float, y: float, value: Any, **attrs: Any) -> None:
        self.add("text", text(value), x=_c(x), y=_c(y), **attrs)


def _c(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


@dataclass
class Frame:
    """Where time goes on the page: the run's span in seconds onto the plot's width."""

    span: float

    def x(self, t: float) -> float:
        return LEFT + PLOT * min(max(t, 0.0), self.span) / self.span


def _polyline_runs(gpu_t: Sequence[float], values: Sequence[float | None]) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in zip(gpu_t, values, strict=False):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, v))
    return [r for r in runs if r]


def _thinned(run: list[tuple[float, float]], frame: Frame) -> list[tuple[float, float]]:
    """A run of more points than two a pixel column, as each column's lowest and highest point in time order: the
    same line on the page, a file that stops growing with the run's length."""
    if len(run) <= 2 * PLOT:
        return run
    columns: dict[int, list[tuple[float, float]]] = {}
    for point in run:
        columns.setdefault(int(frame.x(point[0])), []).append(point)
    out: list[tuple[float, float]] = []
    for points in columns.values():
        low, high = min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])
        out.extend(sorted({low, high}))
    return out


def _draw_line(svg: Svg, frame: Frame, gpu: Gpu, values: Sequence[float | None], top: float,
               scale: tuple[float, float], colour: str) -> None:
    low, high = scale

    def y(v: float) -> float:
        return top + LINE_H - LINE_H * (min(max(v, low), high) - low) / (high - low)

    runs = _polyline_runs(gpu.t, values)
    for run in (_thinned(r, frame) for r in runs):
        if len(run) == 1:
            svg.add("circle", cx=_c(frame.x(run[0][0])), cy=_c(y(run[0][1])), r="1.8", fill=colour)
        else:
            points = " ".join(f"{_c(frame.x(t))},{_c(y(v))}" for t, v in run)
            svg.add("polyline", points=points, fill="none", stroke=colour, stroke_width="1.4")
    if not runs:
        svg.label(LEFT + 6, top + LINE_H / 2 + 4, "not read", fill="#888888")


def _intervals(gpu: Gpu, frame: Frame, keep: Callable[[int], Any]) -> list[tuple[float, float]]:
    """Stretches [start, end) of the run where ``keep(i)`` holds for the samples, each sample lasting until the next
    (the last until the run's end), merged."""
    out: list[tuple[float, float]] = []
    for i, t in enumerate(gpu.t):
        end = gpu.t[i + 1] if i + 1 < len(gpu.t) else frame.span
        if keep(i):
            if out and abs(out[-1][1] - t) < 1e-9:
                out[-1] = (out[-1][0], end)
            else:
                out.append((t, end))
    return out


def _draw_bands(svg: Svg, frame: Frame, gpu: Gpu, top: float, shown: Sequence[tuple[int, str]]) -> None:
    for row, (bit, name) in enumerate(shown):
        y = top + row * BAND_H
        svg.label(LEFT - 6, y + BAND_H - 2, name, text_anchor="end", font_size="9", fill="#444444")
        svg.add("rect", x=LEFT, y=_c(y), width=PLOT, height=BAND_H - 2, fill="#f4f4f4")
        for start, end in _intervals(gpu, frame, lambda i, b=bit: gpu.reasons[i] is not None and gpu.reasons[i] & b):
            svg.add("rect", tip=f"{name}: {start:.1f}-{end:.1f} s", x=_c(frame.x(start)), y=_c(y),
                    width=_c(max(0.8, frame.x(end) - frame.x(start))), height=BAND_H - 2,
                    fill=REASON_COLOURS.get(name, "#888888"))


def _draw_processes(svg: Svg, frame: Frame, gpu: Gpu, top: float, foreign: set[str]) -> int:
    """The row of compute processes: grey while any is on the GPU, red while a foreign one is, a tick and its pid
    where each first appeared. Returns how many appearances went unlabelled."""
    svg.label(LEFT - 6, top + PROC_H - 5, "processes", text_anchor="end", font_size="9", fill="#444444")
    svg.add("rect", x=LEFT, y=_c(top), width=PLOT, height=PROC_H - 4, fill="#f4f4f4")
    for keep, colour, what in ((lambda i: bool(gpu.pids[i]), "#9ca3af", "compute processes on the GPU"),
                               (lambda i: bool(set(gpu.pids[i]) & foreign), "#dc2626", "a foreign process")):
        for start, end in _intervals(gpu, frame, keep):
            svg.add("rect", tip=f"{what}: {start:.1f}-{end:.1f} s", x=_c(frame.x(start)), y=_c(top + 4),
                    width=_c(max(0.8, frame.x(end) - frame.x(start))), height=PROC_H - 8, fill=colour)
    seen: set[str] = set()
    labelled = unlabelled = 0
    for i, pids in enumerate(gpu.pids):
        for pid in pids:
            if pid in seen:
                continue
            seen.add(pid)
            if labelled >= MAX_PROC_LABELS:
                unlabelled += 1
                continue
            x = frame.x(gpu.t[i])
            colour = "#dc2626" if pid in foreign else "#111111"
            svg.add("path", d=f"M{_c(x)},{_c(top)} l-3.5,-5 h7 z", fill=colour)
            svg.label(x + 4, top - 1 - 8 * (labelled % 2), f"pid {pid}" + (" (foreign)" if pid in foreign else ""),
                      font_size="9", fill=colour)
            labelled += 1
    return unlabelled


def _event_name(kind: Any) -> str:
    return dict(run_summary.EVENT_TYPES).get(kind, hex(kind) if isinstance(kind, int) else str(kind))


def _draw_events(svg: Svg, frame: Frame, events: Sequence[Sequence[Any]], top: float, bottom: float,
                 t0: float) -> None:
    for n, event in enumerate(events):
        t, _gpu, kind, data = (list(event) + [None] * 4)[:4]
        at = float(t) - t0
        what = f"{cut(_event_name(kind), 30)} {cut(data, 40)}"
        svg.add("line", tip=f"event at {at:.1f} s: {what}", x1=_c(frame.x(at)), x2=_c(frame.x(at)), y1=_c(top),
                y2=_c(bottom), stroke="#dc2626", stroke_width="2")
        x = frame.x(at)
        svg.label(x + 3, top + 10 + 10 * (n % 3), what, font_size="9", fill="#dc2626", font_weight="bold")


def _draw_marks(svg: Svg, frame: Frame, judged: Judged, top: float, bottom: float) -> None:
    """Each reason's dashed line where it fired, its number in a circle on top (moved right past the circles of
    reasons that fired at about the same time)."""
    taken: list[float] = []
    for n, reason in enumerate(judged.reasons, 1):
        at = judged.fired.get(reason["metric"])
        x = frame.x(frame.span if at is None else at)
        cx = x
        while any(abs(cx - other) < 15 for other in taken):
            cx += 15
        taken.append(cx)
        colour = VERDICT_COLOURS.get(reason["verdict"], "#111111")
        tip = f"{n}. {reason['text']} (" + ("the whole run" if at is None else f"fired at {at:.1f} s") + ")"
        svg.add("line", tip=tip, x1=_c(x), x2=_c(x), y1=_c(top), y2=_c(bottom), stroke=colour, stroke_width="1.5",
                stroke_dasharray="5,3")
        svg.add("circle", tip=tip, cx=_c(cx), cy=_c(top), r="7", fill=colour)
        svg.label(cx, top + 3.5, n, text_anchor="middle", font_size="10", fill="#ffffff", font_weight="bold")


def _draw_axis(svg: Svg, frame: Frame, top: float, bottom: float) -> None:
    for tick in _ticks(frame.span):
        x = frame.x(tick)
        svg.add("line", x1=_c(x), x2=_c(x), y1=_c(top), y2=_c(bottom), stroke="#e5e5e5")
        svg.label(x, bottom + 11, f"{_fmt(tick)} s", text_anchor="middle", font_size="9", fill="#555555")


@dataclass
class Layout:
    """What is common to all panels: the reasons shown as bands, the shared scales, the foreign pids."""

    bands: list[tuple[int, str]]
    scales: dict[int, tuple[float, float]]
    foreign: dict[int, set[str]]

    @property
    def panel_height(self) -> float:
        return 22 + 3 * (LINE_H + GAP) + len(self.bands) * BAND_H + 18 + PROC_H + 22


def _layout(gpus: Sequence[Gpu], summary: Mapping[str, Any]) -> Layout:
    seen = 0
    for gpu in gpus:
        for r in gpu.reasons:
            seen |= r or 0
    bands = [(bit, name) for bit, name in SAMPLED_REASONS if seen & bit] or list(SAMPLED_REASONS[:2])
    scales = {1: _scale(v for g in gpus for v in g.sm), 2: _scale(v for g in gpus for v in g.power),
              3: _scale((v for g in gpus for v in g.temp), floor_at_zero=False)}
    foreign: dict[int, set[str]] = {}
    for entry in summary.get("foreign_processes", []):
        for i in entry.get("gpus", []):
            foreign.setdefault(int(i), set()).add(str(entry["pid"]))
    return Layout(bands, scales, foreign)


def _panel_facts(summary_gpu: Mapping[str, Any]) -> str:
    """The GPU's line of the sampler's summary: clock range, power, hottest temperature, samples per pstate."""
    facts = []
    sm = summary_gpu.get("sm_mhz") or {}
    if sm:
        facts.append(f"SM {sm.get('min')}-{sm.get('max')} MHz")
    power = summary_gpu.get("power_w") or {}
    if power:
        facts.append(f"power mean {power.get('mean')} W, max {power.get('max')} W")
    if "temperature_max_c" in summary_gpu:
        facts.append(f"temperature max {summary_gpu['temperature_max_c']} °C")
    if summary_gpu.get("pstates"):
        facts.append(", ".join(f"{k}: {v} samples" for k, v in summary_gpu["pstates"].items()))
    return cut("; ".join(facts), 160)


def _draw_panel(svg: Svg, frame: Frame, gpu: Gpu, layout: Layout, top: float, judged: Judged,
                events: Sequence[Sequence[Any]], t0: float) -> None:
    summaries = judged.summary.get("gpus", [])
    summary_gpu = summaries[gpu.index] if gpu.index < len(summaries) else {}
    svg.add("rect", x="4", y=_c(top), width=WIDTH - 8, height=_c(layout.panel_height - 6), fill="none",
            stroke="#d4d4d4", rx="4")
    svg.add("text", f'<tspan font-weight="bold">{text(gpu.label)}</tspan><tspan fill="#555555">   '
            f"{text(_panel_facts(summary_gpu))}</tspan>", x="12", y=_c(top + 15), font_size="11.5")
    y = top + 24
    plot_top = y
    _draw_axis(svg, frame, plot_top, plot_top + layout.panel_height - 50)
    for row, name, unit, colour in LINES:
        low, high = layout.scales[row]
        svg.label(LEFT - 6, y + LINE_H / 2 + 4, f"{name} ({unit})", text_anchor="end", fill=colour,
                  font_weight="bold")
        svg.label(LEFT - 6, y + 9, _fmt(high), text_anchor="end", font_size="9", fill="#777777")
        svg.label(LEFT - 6, y + LINE_H, _fmt(low), text_anchor="end", font_size="9", fill="#777777")
        svg.add("line", x1=LEFT, x2=LEFT + PLOT, y1=_c(y + LINE_H), y2=_c(y + LINE_H), stroke="#bbbbbb")
        _draw_line(svg, frame, gpu, [gpu.sm, gpu.power, gpu.temp][row - 1], y, (low, high), colour)
        y += LINE_H + GAP
    _draw_bands(svg, frame, gpu, y, layout.bands)
    y += len(layout.bands) * BAND_H + 18
    more = _draw_processes(svg, frame, gpu, y, layout.foreign.get(gpu.index, set()))
    if more:
        svg.label(LEFT + PLOT, y - 2, f"+{more} more processes", text_anchor="end", font_size="9")
    bottom = y + PROC_H
    mine = [e for e in events if len(e) > 1 and (e[1] == gpu.index or not isinstance(e[1], int))]
    _draw_events(svg, frame, mine, plot_top, bottom, t0)
    _draw_marks(svg, frame, judged, plot_top, bottom)


def _header(svg: Svg, title: str, trace: Mapping[str, Any], judged: Judged) -> float:
    svg.label(12, 22, f"hoststate timeline: {title}", font_size="15", font_weight="bold")
    y = 40.0
    if trace.get("description"):
        svg.label(12, y, cut(trace["description"], 160), fill="#444444")
        y += 16
    summary = judged.summary
    interval = _num(trace.get("interval_s"))
    svg.label(12, y, f"{len(summary.get('gpus', []))} GPU(s), {summary.get('seconds')} s, "
              f"{summary.get('samples')} samples" + (f" every {interval:g} s" if interval else "") + ", "
              f"{len(trace.get('counters', []))} counter reads, {len(trace.get('events', []))} event(s)",
              fill="#444444")
    y += 24
    colour = VERDICT_COLOURS.get(judged.verdict, "#111111")
    svg.label(12, y, f"run verdict: {judged.verdict}", font_size="17", font_weight="bold", fill=colour)
    y += 20
    for n, reason in enumerate(judged.reasons, 1):
        at = judged.fired.get(reason["metric"])
        where = "over the whole run" if at is None else f"first at {at:.1f} s"
        svg.label(24, y, f"{n}. {reason['verdict'].upper()}  {reason['text']} ({where})",
                  fill=VERDICT_COLOURS.get(reason["verdict"], "#111111"))
        y += 16
    unreadable = trace.get("unreadable") if isinstance(trace.get("unreadable"), Mapping) else {}
    if unreadable:
        why = sorted({cut(v, 40) for v in unreadable.values()})
        fields = sorted({cut(str(k).split("/", 1)[-1], 40) for k in unreadable})
        svg.label(24, y, cut(f"not readable on this host ({', '.join(why)}): {', '.join(fields)}", 200),
                  font_size="10", fill="#666666")
        y += 14
    for note in judged.notes:
        svg.label(24, y, note, font_size="10", fill="#666666")
        y += 14
    return y + 6


def _legend(svg: Svg, y: float, layout: Layout) -> float:
    x = 12.0
    items = [(colour, f"{name} ({unit})") for _, name, unit, colour in LINES]
    items += [(REASON_COLOURS.get(name, "#888888"), name) for _, name in layout.bands]
    items += [("#9ca3af", "processes"), ("#dc2626", "foreign process / event")]
    for colour, name in items:
        width = 24 + 6.2 * len(name)  # about DejaVu Sans at 10 px
        if x + width > WIDTH - RIGHT:
            x, y = 12.0, y + 14
        svg.add("rect", x=_c(x), y=_c(y - 9), width="12", height="10", fill=colour)
        svg.label(x + 16, y, name, font_size="10")
        x += width
    return y + 14


def render_svg(trace: Mapping[str, Any], judged: Judged, title: str) -> str:
    """The whole drawing as one ``<svg>`` element (no XML declaration: :func:`render` adds what the file needs)."""
    gpus = series(trace)
    layout = _layout(gpus, judged.summary)
    t0 = run_start(trace)
    ends = [float(s[0]) for s in trace["samples"][-1:]] + [float(c[0]) for c in trace.get("counters", [])[-1:]]
    frame = Frame(max(max(ends) - t0, 1e-3))
    svg = Svg()
    y = _header(svg, title, trace, judged)
    y = _legend(svg, y, layout) + 8
    events = [e for e in trace.get("events", []) if isinstance(e, list)]
    for gpu in gpus:
        _draw_panel(svg, frame, gpu, layout, y, judged, events, t0)
        y += layout.panel_height
    height = math.ceil(y + 4)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="11">'
            f'<title>{text(f"hoststate timeline: {title}: {judged.verdict}")}</title>'
            f'<rect width="100%" height="100%" fill="#ffffff"/>' + "\n".join(svg.parts) + "</svg>\n")


#: The page around the drawing: nothing to fetch and no script allowed (its Content-Security-Policy says so).
HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{title}</title>
<style>body {{ margin: 12px; background: #ffffff; }} svg {{ max-width: 100%; height: auto; }}</style>
</head><body>
{svg}</body></html>
"""


def render(trace: Mapping[str, Any], judged: Judged, title: str, kind: str = "svg") -> str:
    """The timeline as a standalone SVG file (``kind="svg"``) or an HTML page with the SVG inline (``"html"``)."""
    svg = render_svg(trace, judged, title)
    if kind == "html":
        return HTML.format(title=text(f"hoststate timeline: {title}: {judged.verdict}"), svg=svg)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg


def kind_of(path: str | None, fmt: str | None) -> str:
    """``svg`` or ``html``: the --format given, else the output file's suffix (stdout: svg)."""
    if fmt:
        return fmt
    return "html" if path and path.lower().endswith((".html", ".htm")) else "svg"


def _is_time(value: Any) -> bool:
    return _num(value) is not None


def check_trace(trace: Mapping[str, Any], source: str) -> None:
    """Refuse a trace whose samples, counter reads or events are not ``[t, ...]`` lists with a finite time (the
    sampler would record them as its own errors; a drawing needs their times)."""
    parts = (("samples", 2), ("counters", 2), ("events", 4))
    for key, size in parts:
        entries = trace.get(key, [])
        if not isinstance(entries, list):
            raise InputError(f"{source}: watch trace: {key} is not a list")
        for i, entry in enumerate(entries):
            if not (isinstance(entry, list) and len(entry) >= size and _is_time(entry[0])):
                raise InputError(f"{source}: watch trace: {key}[{i}] is not [time, ...] with a finite time")


def timeline(path: str, *, kind: str = "svg", baseline: Mapping[str, Any] | None = None,
             own_pids: Iterable[int] | None = None, rules: Sequence[run_judge.Rule] = run_judge.RULES,
             title: str | None = None) -> tuple[str, Judged]:
    """The trace file ``path`` drawn, and the judgment drawn with it."""
    try:
        trace = run_sampler.load_trace(path).trace
    except (TypeError, KeyError, IndexError, AttributeError) as err:  # events that cannot even be sorted by time
        raise InputError(f"{path}: not a watch trace: {type(err).__name__}: {err}") from err
    check_trace(trace, path)
    judged = judge_trace(trace, baseline=baseline, own_pids=own_pids, rules=rules)
    return render(trace, judged, title or path, kind), judged
