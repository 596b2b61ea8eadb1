"""hoststate timeline: the H200 traces of fixtures/watch/ (and an 8-GPU trace built from one) drawn, parsed as
XML, judged by hoststate.watch's own rules, looked at in a real headless Chromium, hostile trace text escaped."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hoststate.render.timeline import COARSE_PREFIXES, LEFT, PLOT, judge_trace, render, render_svg, run_start, text
from hoststate.snapshot import load
from hoststate.text import clean
from hoststate.watch import baseline_metrics, judge, load_trace
from scripts.draw_timelines import DRAWINGS, OUT, draw, eight_gpus
from tests.conftest import FIXTURES, PACKAGE, PYTHONPATH, REPO, require

WATCH = FIXTURES / "watch"
SVG = "{http://www.w3.org/2000/svg}"
BASE_RUN = baseline_metrics(load(str(WATCH / "h200-base-run.toml")))
#: The four recorded runs docs/watch.md names, as drawn there (baseline run, own pids).
RECORDED = ("h200-idle", "h200-dense-a", "h200-dense-b", "h200-foreign")


def drawn(name: str) -> tuple[dict, object, str]:
    """(trace, judgment, SVG) of one of scripts/draw_timelines.py's drawings."""
    path, base, own = DRAWINGS[name]
    trace = eight_gpus() if name == "eight-gpus" else load_trace(str(REPO / path)).trace
    judged = judge_trace(trace, baseline=BASE_RUN if base else None, own_pids=own)
    return trace, judged, draw(name)


def texts(svg: str) -> list[str]:
    """Every text node of the drawing, as a viewer shows it (tspans joined)."""
    root = ET.fromstring(svg.split("\n", 1)[1] if svg.startswith("<?xml") else svg)
    return ["".join(el.itertext()) for el in root.iter(f"{SVG}text")]


def hs(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})


# -- the drawing as data -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DRAWINGS))
def test_each_drawing_is_valid_svg_with_one_panel_per_gpu_and_its_verdict(name: str) -> None:
    trace, judged, svg = drawn(name)
    root = ET.fromstring(svg.split("\n", 1)[1])
    assert root.tag == f"{SVG}svg" and int(root.get("height")) > 200
    shown = texts(svg)
    assert f"run verdict: {judged.verdict}" in shown
    panels = [t for t in shown if t.startswith("GPU ")]
    assert len(panels) == len(trace["gpus"]) and len(set(panels)) == len(panels)
    for n, reason in enumerate(judged.reasons, 1):
        assert any(t.startswith(f"{n}. {reason['verdict'].upper()}  {reason['text']}") for t in shown)
    # the three lines of every GPU that was read, and no script anywhere
    assert len(root.findall(f".//{SVG}polyline")) >= 3 * len(trace["gpus"]) - 3
    assert not [el for el in root.iter() if el.tag.endswith("script") or any(a.startswith("on") for a in el.attrib)]


def test_the_verdict_is_the_one_the_live_sampler_gave_judged_by_the_watch_rules() -> None:
    """The foreign-process recording carries the summary its live sampler computed: its metrics, judged by
    hoststate.watch.judge against the idle baseline run, are the verdict and reasons drawn."""
    recorded = json.loads((WATCH / "h200-foreign.json").read_text())["summary"]["metrics"]
    verdict, reasons = judge(recorded, BASE_RUN)
    _, judged, svg = drawn("h200-foreign")
    assert (judged.verdict, [r["text"] for r in judged.reasons]) == (verdict, [r["text"] for r in reasons])
    assert verdict == "invalid" and {r["metric"] for r in reasons} == {"share.sw_power_cap", "foreign_processes"}
    # without the baseline run the power cap is not judged, and the page says so; the foreign process is, since
    # the trace names its run's own processes (own_pids)
    alone = judge_trace(load_trace(str(WATCH / "h200-foreign.json")).trace)
    assert alone.verdict == "invalid" and [r["metric"] for r in alone.reasons] == ["foreign_processes"]
    assert any("--baseline" in n for n in alone.notes)
    # a trace that does not name its own processes judges none foreign, and says so
    unnamed = {k: v for k, v in load_trace(str(WATCH / "h200-foreign.json")).trace.items() if k != "own_pids"}
    assert judge_trace(unnamed).verdict == "clean" and any("--own-pid" in n for n in judge_trace(unnamed).notes)


def test_reasons_are_marked_where_they_fired() -> None:
    """On the built 8-GPU trace: the power cap from the first sample, the foreign pid where it first shows, the
    XID at the first sample after it arrived, the thermal slowdown at the first counter read that shows it."""
    trace, judged, svg = drawn("eight-gpus")
    t0 = run_start(trace)
    times = [s[0] - t0 for s in trace["samples"]]
    first_foreign = next(s[0] - t0 for s in trace["samples"] if 538 in s[1][6][5])
    xid_at = trace["events"][0][0] - t0
    read_after_thermal = next(c[0] - t0 for c in trace["counters"] if c[1][3]["violation_sw_thermal_ns"] > 0)
    fired = judged.fired
    assert judged.verdict == "invalid"
    assert fired["share.sw_power_cap"] == times[0]
    assert fired["foreign_processes"] == pytest.approx(first_foreign)
    assert fired["xid_events"] == pytest.approx(min(t for t in times if t >= xid_at))
    assert fired["share.sw_thermal_slowdown"] == pytest.approx(min(t for t in times if t >= read_after_thermal))
    # each reason's number is drawn in a marker on every panel
    numbers = [t for t in texts(svg) if t.isdigit()]
    assert all(numbers.count(str(n)) == 8 for n in range(1, len(judged.reasons) + 1))


def test_a_long_trace_is_marked_exactly_and_its_lines_thinned() -> None:
    """Past COARSE_PREFIXES samples not every prefix is judged: the marks are still the first sample that fires,
    and a line keeps at most two points a pixel column."""
    trace = eight_gpus()
    real, t0 = trace["samples"], trace["samples"][0][0]
    n = 2 * PLOT + 200  # > COARSE_PREFIXES, and more points than two a pixel column
    trace["samples"] = [[t0 + k, real[k % len(real)][1]] for k in range(n)]
    trace["counters"] = [[t0 - 0.01, trace["counters"][0][1]], [t0 + n, trace["counters"][-1][1]]]
    trace["events"] = [[t0 + 0.7 * n + 0.5, 5, 8, 79]]
    judged = judge_trace(trace, own_pids=[481 + i for i in range(8)])
    assert judged.fired["xid_events"] == pytest.approx(0.01 + int(0.7 * n) + 1)
    assert judged.fired["foreign_processes"] == pytest.approx(0.01 + 15)
    root = ET.fromstring(render_svg(trace, judged, "long"))
    lines = [len(p.get("points").split()) for p in root.iter(f"{SVG}polyline")]
    assert n > COARSE_PREFIXES and max(lines) <= 2 * PLOT < n and len(lines) >= 3 * 8 - 3


def test_hostile_trace_text_is_escaped(tmp_path: pathlib.Path) -> None:
    """Names, descriptions, event data and pids from a trace are text in the drawing, never markup."""
    trace = load_trace(str(WATCH / "h200-foreign.json")).trace
    evil = '<script>alert(1)</script>"><g onload="x">]]>&amp;\x01\x1b[31m\ud800'
    trace = {**trace, "description": evil, "gpus": [{"index": 0, "uuid": "GPU-" + evil, "name": "<b>" + evil}],
             "events": [[trace["samples"][3][0], 0, 8, evil]],
             "samples": [[t, [[*rows[0][:5], [*rows[0][5], "<img src=x onerror=alert(1)>"]]]]
                         for t, rows in trace["samples"]]}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(trace))
    for suffix in ("svg", "html"):
        proc = hs("timeline", str(path), "-o", f"evil.{suffix}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    svg = (tmp_path / "evil.svg").read_text()
    root = ET.fromstring(svg.split("\n", 1)[1])
    tags = {el.tag.removeprefix(SVG) for el in root.iter()}
    assert tags <= {"svg", "title", "rect", "text", "tspan", "line", "polyline", "circle", "path"}, tags
    assert not [a for el in root.iter() for a in el.attrib if a.startswith("on")]
    shown = "\n".join(texts(svg))
    assert "<script>alert(1)</script>" in shown and "\x01" not in svg and "\ufffd" in shown
    assert "\\ud800" in shown  # a lone surrogate, written as hoststate.text writes it
    assert "pid <img src=x onerror=aler…" in shown  # cut to 24 characters, escaped
    html = (tmp_path / "evil.html").read_text()
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html


@given(st.text())
def test_any_string_is_character_data_that_reads_back(value: str) -> None:
    """Whatever a trace holds, the drawing's XML reads back the same text, in content and in an attribute (only
    what XML cannot carry replaced, a lone surrogate spelled out, line breaks as spaces)."""
    expected = "".join(" " if c in "\t\n\r" else c if "\x20" <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd"
                       or c > "\uffff" else "\ufffd" for c in clean(value))
    element = ET.fromstring(f'<t a="{text(value)}">{text(value)}</t>')
    assert (element.text or "") == element.get("a") == expected


# -- the command -------------------------------------------------------------------------------------------------


def test_cli_writes_svg_html_or_stdout_and_never_replaces_without_force(tmp_path: pathlib.Path) -> None:
    trace = str(WATCH / "h200-dense-a.json")
    base = str(WATCH / "h200-base-run.toml")
    proc = hs("timeline", trace, "--baseline", base, "-o", "run.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "wrote run.html (run degraded, 1 reason(s))" in proc.stderr
    assert (tmp_path / "run.html").read_text().startswith("<!DOCTYPE html>")
    again = hs("timeline", trace, "-o", "run.html", cwd=tmp_path)
    assert again.returncode == 2 and "exists; use --force" in again.stderr
    assert "run verdict: degraded" in (tmp_path / "run.html").read_text()  # untouched
    assert hs("timeline", trace, "-o", "run.html", "--force", cwd=tmp_path).returncode == 0
    assert "run verdict: clean" in (tmp_path / "run.html").read_text()  # no baseline run: the cap is not judged
    out = hs("timeline", trace, "-o", "-", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith('<?xml version="1.0"') and out.stdout.endswith("</svg>\n")
    ET.fromstring(out.stdout.split("\n", 1)[1])
    assert hs("timeline", trace, "-o", "-", "--format", "html", cwd=tmp_path).stdout.startswith("<!DOCTYPE html>")
    shutil.copy(trace, tmp_path / "trace.json")
    own = hs("timeline", "trace.json", "-o", "trace.json", "--force", cwd=tmp_path)
    assert own.returncode == 2 and (tmp_path / "trace.json").read_bytes() == pathlib.Path(trace).read_bytes()


def test_cli_refuses_what_is_not_a_trace_or_a_watched_baseline(tmp_path: pathlib.Path) -> None:
    trace = str(WATCH / "h200-dense-a.json")
    notrace = hs("timeline", str(WATCH / "h200-cost.json"), "-o", "x.svg", cwd=tmp_path)
    assert notrace.returncode == 2 and "not a watch trace" in notrace.stderr
    bad = json.loads((WATCH / "h200-dense-a.json").read_text())
    bad["samples"][2] = "garbage"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    broken = hs("timeline", "bad.json", "-o", "x.svg", cwd=tmp_path)
    assert broken.returncode == 2 and "samples[2]" in broken.stderr, broken.stderr
    snap = hs("snap", "-q", "--root", str(FIXTURES / "hosts" / "seed-baseline"), "--only", "system", "-o", "s.toml",
              cwd=tmp_path)
    assert snap.returncode == 0, snap.stderr
    unwatched = hs("timeline", trace, "--baseline", "s.toml", "-o", "x.svg", cwd=tmp_path)
    assert unwatched.returncode == 2 and "not a watched baseline run" in unwatched.stderr
    zero = hs("timeline", "/dev/zero", "-o", "x.svg", cwd=tmp_path)
    assert zero.returncode == 2 and zero.stderr.count("\n") == 1 and "not a regular file" in zero.stderr
    assert not (tmp_path / "x.svg").exists()


# -- the docs ----------------------------------------------------------------------------------------------------


def test_the_drawings_in_the_docs_are_current() -> None:
    doc = (REPO / "docs" / "watch.md").read_text()
    for name in DRAWINGS:
        target = OUT / f"timeline-{name}.svg"
        assert target.read_text(encoding="utf-8") == draw(name), "run: python scripts/draw_timelines.py"
        assert f"img/timeline-{name}.svg" in doc, name
    assert all(f"fixtures/watch/{name}.json" in doc for name in RECORDED)


# -- in a real browser -------------------------------------------------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium's screenshot is)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) if bpp == 3 else bytes(r[i] for i in range(len(r)) if i % 4 != 3)
                           for r in rows]


def chromium(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={cwd / 'profile'}", *args], cwd=cwd, capture_output=True, timeout=180)


@pytest.mark.parametrize("name", [*RECORDED, "eight-gpus"])
def test_the_page_shows_its_verdict_and_a_drawing_in_headless_chromium(name: str, tmp_path: pathlib.Path) -> None:
    require(bool(shutil.which("chromium") or shutil.which("chromium-browser")), "chromium (Debian's package)")
    trace, judged, _ = drawn(name)
    page = tmp_path / f"{name}.html"
    title = DRAWINGS[name][0] or name
    page.write_text(render(trace, judged, title, "html"), encoding="utf-8")
    height = int(ET.fromstring(render(trace, judged, title, "svg").split("\n", 1)[1]).get("height")) + 40
    dom = chromium("--dump-dom", page.as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f"run verdict: {judged.verdict}".encode() in dom.stdout
    shot = tmp_path / "shot.png"
    proc = chromium(f"--screenshot={shot}", f"--window-size=1140,{height}", page.as_uri(), cwd=tmp_path)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, tall, rows = png_pixels(shot.read_bytes())
    assert (width, tall) == (1140, height)
    ink = sum(1 for row in rows for i in range(0, len(row), 3) if min(row[i:i + 3]) < 200)
    assert ink > 0.03 * width * tall, ink  # far from blank: lines, bands, text
    # the SM clock's blue line is drawn in every GPU's panel, right of the labels (the page's margin: 12 px)
    svg = ET.fromstring(render(trace, judged, title, "svg").split("\n", 1)[1])
    panels = [(12 + float(r.get("y")), 12 + float(r.get("y")) + float(r.get("height")))
              for r in svg.iter(f"{SVG}rect") if r.get("rx") == "4"]
    assert len(panels) == len(trace["gpus"])
    for top, bottom in panels:
        columns = {i // 3 for row in rows[int(top):int(bottom)] for i in range(3 * (12 + LEFT + 2), len(row), 3)
                   if row[i + 2] - row[i] > 60 and row[i + 2] - row[i + 1] > 30}  # bluish: the line, anti-aliased
        assert len(columns) > 0.5 * PLOT, (top, len(columns))  # a line across most of the plot, in every panel


def test_the_timeline_example_runs_as_written(tmp_path: pathlib.Path) -> None:
    require(shutil.which("bash") is not None, "bash")
    from tests.test_watch_docs import _block

    (tmp_path / "fixtures").symlink_to(FIXTURES)
    (tmp_path / "example.sh").write_text(_block("watch.md", "# timeline-example.sh"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "hoststate").write_text(f'#!/bin/sh\nexec {sys.executable} -m hoststate "$@"\n')
    (bindir / "hoststate").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": PYTHONPATH}
    proc = subprocess.run(["bash", "-e", "example.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "hoststate timeline: wrote foreign.html (run invalid, 2 reason(s))\n"
    page = (tmp_path / "foreign.html").read_text()
    assert "another process computed on a watched GPU during the run (it shares the SMs and memory bandwidth): 1 " \
           "(first at 15.0 s)" in page


def test_the_renderer_is_installed_with_every_other_package() -> None:
    """pyproject.toml lists its packages (it cannot discover them): hoststate.render, as every package directory
    under hoststate/, is in the list, or `pip install .` would leave the command without its module."""
    from hoststate.snapshot import toml_loads

    listed = set(toml_loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert (PACKAGE / "render" / "__init__.py").is_file() and "hoststate.render" in listed  # the rest: architecture
