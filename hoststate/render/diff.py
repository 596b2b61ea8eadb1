"""``hoststate diff``'s report as text, JSON (docs/diff-report.schema.json, with a ``summary`` list) or Markdown.

First one line per subsystem (hoststate.render.summary), then the findings grouped by rule, each rule's reason
once; every finding only with ``verbose``; then the verdict line. The verdict and the counts are diff's own
(hoststate.diff.DiffResult): a report never recomputes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from hoststate.diff import DiffResult, Finding
from hoststate.policy import SEVERITIES
from hoststate.render.findings import (
    TITLES,
    by_importance,
    by_rule,
    counts_text,
    example,
    finding_lines,
    items,
    list_delta,
    reason_lines,
    rule_lines,
    section_title,
    tag,
)
from hoststate.render.summary import SUMMARY_WIDTH, summarize
from hoststate.render.text import COLOURS, RESET, WIDTH, clip, fit, md_code, md_table, md_text, safe, show_value
from hoststate.snapshot import jsonable

_VERDICT_TONE = {"invalidating": "invalidating", "warning": "warning"}


def render_text(result: DiffResult, *, baseline: str, current: str, color: bool = False,
                verbose: bool = False, note: Sequence[str] = ()) -> str:
    """Summary lines, then the findings by rule (every finding with ``verbose``), then the verdict line. ``note``
    (vllm_source_note) comes first: it changes how every vLLM finding reads."""
    lines: list[str] = list(note)
    ordered = by_importance(result.findings)  # ranked once, for the summary and the rules
    for s in summarize(ordered):
        lines.append(f"{tag(s.severity, color)}  {clip(s.text, SUMMARY_WIDTH)}")
    if lines:
        lines.append("")
    lines += fit([f"baseline: {safe(baseline)}"], WIDTH, 10)  # file names: wrapped, never cut
    lines += fit([f"current:  {safe(current)}"], WIDTH, 10)
    groups = by_rule(ordered)
    for severity in SEVERITIES:
        mine = [g for g in groups if g[0] == severity]
        if not mine:
            continue
        title = section_title(TITLES[severity], [f for g in mine for f in g[3]], mine)
        lines.append("")
        lines.append(f"{COLOURS[severity]}{title}{RESET}" if color else title)
        for _sev, rule, reason, group in mine:
            lines.extend(rule_lines(group, rule))
            if len(group) > 1 and verbose:
                for f in group:
                    lines.extend("      " + line for line in finding_lines(f, WIDTH - 6, reason=False))
            lines.extend(reason_lines(reason, 6))
    lines.append("")
    summary = f"verdict: {result.verdict} ({counts_text(result)})"
    if any(len(g[3]) > 1 for g in groups) and not verbose:
        summary += "; -v lists every finding"
    if color and result.verdict in _VERDICT_TONE:
        summary = f"{COLOURS[_VERDICT_TONE[result.verdict]]}{summary}{RESET}"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def _md_cells(f: Finding) -> tuple[str, str]:
    """Baseline and current cells; a changed list shows the items removed and added, as the text report does."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return md_code(show_value(f.old)), "same items, other order"
        return (("removed " + md_code(items(gone, 80))) if gone else "",
                ("added " + md_code(items(came, 80))) if came else "")
    return md_code(show_value(f.old)), md_code(show_value(f.new))


_ICONS = {"invalidating": ":x:", "warning": ":warning:", "clean": ":white_check_mark:"}


def render_markdown(result: DiffResult, *, baseline: str, current: str, verbose: bool = False,
                    **_ignored: Any) -> str:
    """A pull-request comment: verdict, summary bullets, a table by rule, and every finding with ``verbose``."""
    out = [
        f"### hoststate diff: {_ICONS[result.verdict]} {result.verdict}",
        "",
        f"Baseline {md_code(baseline)} vs current {md_code(current)}: {counts_text(result)}.",
        "",
    ]
    if not result.findings:
        out.append("No findings.")
        return "\n".join(out) + "\n"
    ordered = by_importance(result.findings)
    out += [f"- **{s.severity}** {md_text(s.text)}" for s in summarize(ordered)]
    out += ["", *md_table(("severity", "rule", "findings", "change", "why"), [
        (f"**{severity}**", md_code(rule), str(len(group)), md_code(example(group, 60)), md_text(reason))
        for severity, rule, reason, group in by_rule(ordered)])]
    if verbose:
        out += ["", f"<details><summary>All {len(result.findings)} findings</summary>", "",
                *md_table(("severity", "path", "change", "baseline", "current"),
                          [(f"**{f.severity}**", md_code(f.path), f.change, *_md_cells(f)) for f in result.findings]),
                "", "</details>"]
    return "\n".join(out) + "\n"


def to_json(result: DiffResult, *, baseline: str, current: str) -> dict[str, Any]:
    """The report object of docs/diff-report.schema.json: verdict, counts, ``summary`` lines and findings."""
    report = result.to_dict(baseline, current)
    report["summary"] = [s.to_dict() for s in summarize(result.findings)]
    return report


def iter_json(result: DiffResult, *, baseline: str, current: str, batch: int = 512) -> Iterator[str]:
    """The text of ``to_json`` as ``json.dumps(..., indent=2)`` writes it, in pieces: one finding is turned into
    text at a time, so a diff with a finding per leaf of two 8 MiB snapshots never holds the whole report (or a
    dict per finding) in memory. Every finding is written."""
    head = {"baseline": baseline, "current": current, "verdict": result.verdict,
            "counts": {s: result.counts.get(s, 0) for s in SEVERITIES}}  # DiffResult.to_dict, less its findings
    text = json.dumps(head, indent=2, ensure_ascii=False)
    yield text[:-2] + ',\n  "findings": ['
    yield from _json_items(map(_finding_json, result.findings), batch, indented=True)
    yield ',\n  "summary": ['
    yield from _json_items((s.to_dict() for s in summarize(by_importance(result.findings))), batch)
    yield "\n}\n"


def _json_items(items: Iterable[dict[str, Any] | str], batch: int, indented: bool = False) -> Iterator[str]:
    """The elements of a JSON array at depth 1 of an ``indent=2`` document, then its closing bracket; an element
    is an object or its text as ``_dump_object`` writes it (``indented``: with its lines already indented as
    elements of that array)."""
    chunk: list[str] = []
    empty = True
    for item in items:
        text = item if isinstance(item, str) else _dump_object(item)
        if not indented:  # a JSON string holds no raw newline: each one is a line break of the layout
            text = text.replace("\n", "\n    ")
        chunk.append(("\n    " if empty else ",\n    ") + text)
        empty = False
        if len(chunk) >= batch:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk) + ("]" if empty else "\n  ]")


def _dump_object(item: dict[str, Any]) -> str:
    """``json.dumps(item, indent=2, ensure_ascii=False)`` for an object whose values ``_json_value`` writes."""
    if not item:
        return "{}"
    return "{\n" + ",\n".join(f"  {_string(key)}: {_json_value(value)}" for key, value in item.items()) + "\n}"


def _finding_json(finding: Finding) -> str:
    """``_dump_object(finding.to_dict())`` indented as an element of the findings array, without the dict: one
    object per leaf of two 8 MiB snapshots. The rating's lines are written once per rating (findings rated alike
    share it)."""
    rating = finding.rating
    try:
        change, rest = _RATING_JSON[rating]
    except (KeyError, TypeError):
        change, rest = _rating_json(rating)
    return (f'{{\n      "path": {_string(finding.path)},\n{change}      "old": {_element(finding.old)},\n'
            f'      "new": {_element(finding.new)},\n{rest}    }}')


def _element(value: Any) -> str:
    """``_json_value`` indented as a finding's value inside the findings array."""
    text = _json_value(value)
    return text.replace("\n", "\n    ") if "\n" in text else text


#: A rating's lines (change; severity, rule and reason) in a finding's object, by the rating they write.
_RATING_JSON: dict[tuple[Any, ...], tuple[str, str]] = {}


def _rating_json(rating: tuple[Any, ...]) -> tuple[str, str]:
    change, severity, rule, reason = (_element(v) for v in rating)
    out = (f'      "change": {change},\n',
           f'      "severity": {severity},\n      "rule": {rule},\n      "reason": {reason}\n')
    try:
        if len(_RATING_JSON) >= 4096:
            _RATING_JSON.clear()
        _RATING_JSON[rating] = out
    except TypeError:  # a rating holding a value that cannot be hashed is written each time
        pass
    return out


def _json_value(value: Any) -> str:
    """``json.dumps(jsonable(value), indent=2, ensure_ascii=False)`` as a value of a top-level object's key: a
    scalar without the encoder's per-call set-up (the indenting encoder is pure Python, and a report may hold a
    finding per leaf of two 8 MiB snapshots); a table or list through ``json.dumps``."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None or kind is bool:
        return _SCALARS[value]
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    value = jsonable(value)
    if isinstance(value, dict | list) and value:
        return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    return json.dumps(value, ensure_ascii=False)


#: The C string encoder ``json.dumps(..., ensure_ascii=False)`` calls, and the constants it writes.
_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]
_SCALARS = {None: "null", True: "true", False: "false"}


def render_json(result: DiffResult, *, baseline: str, current: str, **_ignored: Any) -> str:
    return "".join(iter_json(result, baseline=baseline, current=current))


#: format -> renderer; colour and the note only apply to text.
RENDERERS: dict[str, Callable[..., str]] = {"text": render_text, "json": render_json, "markdown": render_markdown}
FORMATS = tuple(RENDERERS)


def render_diff(result: DiffResult, fmt: str, *, baseline: str, current: str, color: bool = False,
                verbose: bool = False, note: Sequence[str] = ()) -> str:
    """The report in ``fmt`` (text, json or markdown); colour only applies to text."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")
    return renderer(result, baseline=baseline, current=current, color=color, verbose=verbose, note=note)
