"""``hoststate results``: the report as text (one line per host state, per refused or judged cell, then what moved),
Markdown for review, or JSON (hoststate.results' own shape), chosen by format in :data:`RENDERERS`."""

from __future__ import annotations

import json
from collections.abc import Callable

from hoststate.explain import group_label
from hoststate.results import Group, Reference, ResultsReport, _rel


def _reference_line(report: ResultsReport) -> str:
    ref = report.reference
    if ref.source == "current":
        return f"reference (--current {ref.names[0]})"
    if ref.source == "baseline":
        return f"reference (baseline {', '.join(ref.names)})"
    return "reference"


def _head(report: ResultsReport, base: str) -> list[str]:
    from hoststate.render.text import Name, clip, fit, safe

    n = sum(len(g.cells) for g in report.groups) + len(report.refused_cells)
    verdict = ("refused: " + "; ".join(report.reasons)) if report.refused else "comparable"
    lines = [f"hoststate results: {n} cell(s), {len(report.groups)} host state(s): {verdict}"]
    ref = report.reference
    if ref.source == "ambiguous":
        lines.append("  no reference: the cells were guarded against different baselines (give --current SNAPSHOT):")
        lines += [clip(safe(f"    baseline {b['digest'][:19]} ({', '.join(b['names'])}): {b['cells']} cell(s)"), 120)
                  for b in ref.baselines]
    elif ref.digest and report.group_of((ref.digest, True)) is None:
        lines.append(clip(safe(f"  {_reference_line(report)}: {ref.digest[:19]}, no cell ran on it"), 120))
    for i, g in enumerate(report.groups):
        is_ref = g.key == (ref.digest, True)
        tag = _reference_line(report) if is_ref else "same host" if g.comparable(ref.digest) else "other host"
        unwatched = "" if g.watched else ", unwatched"
        lines += fit([safe(f"  {group_label(i)} {tag}: {g.digest[:19]}{unwatched}, {len(g.cells)} cell(s), first "),
                      Name(safe(_rel(g.paths[0], base)))], 120, 6)
        lines += [clip(f"      {safe(why)}", 120) for why in _why(g, ref)]
    return lines


def _why(group: Group, ref: Reference) -> list[str]:
    """What parts a group from the reference: one line per subsystem (every one named), or why none is named."""
    from hoststate.render.summary import summarize

    if group.key == (ref.digest, True):
        return []
    if group.comparable(ref.digest):
        return (["not watched: the GPU sampler did not run"] if not group.watched else []) + \
            ([group.compared] if group.digest != ref.digest else [])
    if group.findings:
        return [s.text for s in summarize(group.findings)]
    return [f"host digest differs ({group.compared})"]


def _mismatch_lines(report: ResultsReport, base: str) -> list[str]:
    from hoststate.render.text import safe

    # the cell on its own line (never elided: it is what the reader looks for), its group's findings above
    return [f"  MISMATCH    {safe(_rel(c.path, base))}  (host state {group_label(report.groups.index(g))})"
            for g in report.mismatched for c in g.cells]


def render_text(report: ResultsReport, base: str = "") -> str:
    """Groups, then each refused, mismatched or judged cell on its own line, cells named relative to ``base``;
    with an explanation, what moved between the host states after them."""
    from hoststate.render.text import clip, safe

    lines = _head(report, base) + _mismatch_lines(report, base)
    for r in report.refused_cells:
        lines += [f"  UNVERIFIED  {safe(_rel(r['cell'], base))}", clip(f"      {safe(r['problem'])}", 120)]
    for j in report.judged:
        lines += [f"  {j['verdict'].upper():<11} {safe(_rel(j['cell'], base))}"]
        lines += [clip(f"      {safe(reason)}", 120) for reason in j["reasons"]]
    if report.summaries:
        shown = ", ".join(_rel(p, base) for p in report.summaries[:3])
        more = f" (+{len(report.summaries) - 3} more)" if len(report.summaries) > 3 else ""
        lines.append(clip(safe(f"  sweep summaries (each lists exactly its verified cells): {shown}{more}"), 120))
    if report.ignored:
        shown = ", ".join(_rel(p, base) for p in report.ignored[:3])
        more = f" (+{len(report.ignored) - 3} more)" if len(report.ignored) > 3 else ""
        lines.append(clip(safe(f"  ignored (--ignore): {shown}{more}"), 120))
    if report.explanation is not None:
        from hoststate.explain import explanation_lines

        lines += [""] + explanation_lines(report.explanation)
    return "\n".join(lines) + "\n"


def render_markdown(report: ResultsReport, base: str = "") -> str:
    """A pull-request comment: verdict, the groups with their metrics, what separates them, refused cells."""
    from hoststate.render.summary import summarize
    from hoststate.render.text import md_code, md_text

    icon = ":x:" if report.refused else ":white_check_mark:"
    verdict = ("refused: " + "; ".join(report.reasons)) if report.refused else "comparable"
    out = [f"### hoststate results: {icon} {md_text(verdict)}", "",
           "| group | host state | cells | first cell |", "|---|---|---|---|"]
    for i, g in enumerate(report.groups):
        tag = md_text(_reference_line(report)) if g.key == (report.reference.digest, True) else \
            "same host" if g.comparable(report.reference.digest) else "other host"
        out.append(f"| {group_label(i)}: {tag} | {md_code(g.digest[:19])}{'' if g.watched else ' unwatched'} "
                   f"| {len(g.cells)} | {md_code(_rel(g.paths[0], base))} |")
    out.append("")
    for i, g in enumerate(report.groups):
        out += [f"- **{group_label(i)}**: {md_text(s.text)}" for s in summarize(g.findings)]
    if report.explanation is not None:
        from hoststate.explain import explanation_markdown

        out += [""] + explanation_markdown(report.explanation)
    if report.refused_cells:
        out += ["", "| unverified cell | why |", "|---|---|"]
        out += [f"| {md_code(_rel(r['cell'], base))} | {md_text(r['problem'])} |" for r in report.refused_cells]
    if report.judged:
        out += ["", "| judged cell | verdict | reasons |", "|---|---|---|"]
        out += [f"| {md_code(_rel(j['cell'], base))} | {j['verdict']} | {md_text('; '.join(j['reasons']))} |"
                for j in report.judged]
    return "\n".join(out) + "\n"


def render_json(report: ResultsReport, base: str = "") -> str:
    return json.dumps(report.to_dict(base), indent=2) + "\n"


#: format -> renderer (``results --format``).
RENDERERS: dict[str, Callable[[ResultsReport, str], str]] = {"text": render_text, "json": render_json,
                                                             "markdown": render_markdown}


def render(report: ResultsReport, fmt: str, base: str = "") -> str:
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(RENDERERS)})")
    return renderer(report, base)
