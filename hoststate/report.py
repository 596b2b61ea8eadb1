"""Render a DiffResult as text (grouped by severity), JSON (design.md's shape) or Markdown (a review table).

Pure functions returning strings; the CLI decides where they go and whether colour is on (only on a TTY).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from hoststate.diff import DiffResult, Finding
from hoststate.policy import SEVERITIES
from hoststate.snapshot import jsonable

FORMATS = ("text", "json", "markdown")
_COLOURS = {"invalidating": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[36m", "ignore": "\x1b[2m"}
_RESET = "\x1b[0m"
_TITLES = {"invalidating": "INVALIDATING", "warning": "WARNING", "info": "INFO", "ignore": "IGNORED"}
_MAX_VALUE = 120


def show_value(value: Any) -> str:
    """A value as a reader expects it in TOML: strings quoted, lists bracketed, absent as a dash."""
    if value is None:
        return "(absent)"
    if isinstance(value, str) and value.startswith("<unreadable"):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, dict)):
        text = json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    else:
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def _list_change(old: Any, new: Any) -> str | None:
    """For two long lists, what was taken out and put in (argv): easier to read than two truncated lists."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return None
    if len(show_value(old)) <= _MAX_VALUE // 2 and len(show_value(new)) <= _MAX_VALUE // 2:
        return None
    keys_new = [json.dumps(jsonable(v)) for v in new]
    keys_old = [json.dumps(jsonable(v)) for v in old]
    gone = [v for v, k in zip(old, keys_old, strict=True) if k not in keys_new]
    came = [v for v, k in zip(new, keys_new, strict=True) if k not in keys_old]
    if not gone and not came:
        return "same items, other order"
    return f"-{show_value(gone)} +{show_value(came)}"


def finding_line(f: Finding) -> str:
    """One finding as `path: old -> new  (reason)`, the form of every text report and of guard's stderr."""
    if f.change == "changed" and (short := _list_change(f.old, f.new)):
        return f"{f.path}: {short}  ({f.reason})"
    if f.change == "added":
        what = f"added {show_value(f.new)}"
    elif f.change == "removed":
        what = f"removed (was {show_value(f.old)})"
    else:
        what = f"{show_value(f.old)} -> {show_value(f.new)}"
    return f"{f.path}: {what}  ({f.reason})"


def _summary(result: DiffResult) -> str:
    counts = ", ".join(f"{result.counts.get(s, 0)} {s}" for s in SEVERITIES)
    return f"verdict: {result.verdict} ({counts})"


def render_text(result: DiffResult, *, baseline: str, current: str, color: bool = False) -> str:
    lines = [f"baseline: {baseline}", f"current:  {current}"]
    for severity in SEVERITIES:
        group = [f for f in result.findings if f.severity == severity]
        if not group:
            continue
        title = f"{_TITLES[severity]} ({len(group)})"
        lines.append("")
        lines.append(f"{_COLOURS[severity]}{title}{_RESET}" if color else title)
        lines.extend(f"  {finding_line(f)}" for f in group)
    lines.append("")
    summary = _summary(result)
    if color and result.verdict != "clean":
        summary = f"{_COLOURS['invalidating' if result.verdict == 'invalidating' else 'warning']}{summary}{_RESET}"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_code(text: str) -> str:
    text = _md_cell(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def render_markdown(result: DiffResult, *, baseline: str, current: str) -> str:
    """A table to paste into a pull-request review: the verdict first, then one row per finding."""
    icon = {"invalidating": ":x:", "warning": ":warning:", "clean": ":white_check_mark:"}[result.verdict]
    out = [
        f"### hoststate diff: {icon} {result.verdict}",
        "",
        f"Baseline `{_md_cell(baseline)}` vs current `{_md_cell(current)}`: "
        + ", ".join(f"{result.counts.get(s, 0)} {s}" for s in SEVERITIES) + ".",
        "",
    ]
    if not result.findings:
        out.append("No findings.")
        return "\n".join(out) + "\n"
    out += ["| severity | path | change | baseline | current | why |", "|---|---|---|---|---|---|"]
    for f in result.findings:
        out.append(
            f"| **{f.severity}** | {_md_code(f.path)} | {f.change} | {_md_code(show_value(f.old))} "
            f"| {_md_code(show_value(f.new))} | {_md_cell(f.reason)} |"
        )
    return "\n".join(out) + "\n"


def render_diff(result: DiffResult, fmt: str, *, baseline: str, current: str, color: bool = False) -> str:
    """The report in ``fmt`` (text, json or markdown); colour only applies to text."""
    if fmt == "json":
        return json.dumps(result.to_dict(baseline, current), indent=2, ensure_ascii=False) + "\n"
    if fmt == "markdown":
        return render_markdown(result, baseline=baseline, current=current)
    if fmt == "text":
        return render_text(result, baseline=baseline, current=current, color=color)
    raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")
