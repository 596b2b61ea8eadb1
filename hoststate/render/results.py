"""``hoststate results``: one line per host state and per refused or judged cell (text), or the report as JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from hoststate.render.text import WIDTH, clip, safe
from hoststate.results import ResultsReport


def render_text(report: ResultsReport, base: str = "") -> str:
    """One line per group and per refused or judged cell, cells named relative to ``base``."""
    def name(path: str) -> str:
        return safe(os.path.relpath(path, base) if base else path)

    n = sum(len(cells) for _, cells in report.groups) + len(report.unattached)
    verdict = "refused: results from hosts that do not match" if report.mismatched else (
        "refused" if report.refused else "comparable")
    lines = [f"hoststate results: {n} cell(s), {len(report.groups)} host state(s): {verdict}"]
    for digest, cells in report.groups:
        tag = f"reference ({report.reference_from})" if digest == report.reference else "other host"
        lines.append(clip(f"  {tag}: {digest[:19]}, {len(cells)} cell(s), first {name(cells[0])}", WIDTH))
    if report.reference and report.reference not in dict(report.groups):
        lines.append(f"  reference ({report.reference_from}): {report.reference[:19]}, no cell ran on it")
    # the cell on its own line (never elided: it is what the reader looks for), what is wrong with it below
    for m in report.mismatched:
        lines += [f"  MISMATCH    {name(m['cell'])}", clip(f"      {safe(m['finding'])}", WIDTH)]
    for cell in report.unattached:
        lines += [f"  UNATTACHED  {name(cell)}", "      no hoststate record (run it under guard --watch --attach)"]
    for j in report.judged:
        lines += [f"  {j['verdict'].upper():<11} {name(j['cell'])}"]
        lines += [clip(f"      {safe(reason)}", WIDTH) for reason in j["reasons"]]
    for s in report.skipped:
        lines.append(clip(f"  skipped  {name(s['file'])}: {safe(s['error'])}", WIDTH))
    return "\n".join(lines) + "\n"


def render_json(report: ResultsReport, base: str = "") -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


#: format -> renderer (``results --format``).
RENDERERS: dict[str, Callable[[ResultsReport, str], str]] = {"text": render_text, "json": render_json}


def render(report: ResultsReport, fmt: str, base: str = "") -> str:
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(RENDERERS)})")
    return renderer(report, base)
