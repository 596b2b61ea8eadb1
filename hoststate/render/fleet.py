"""``hoststate fleet``'s report as text (a gate's verdict line, outliers first), JSON (docs/fleet.schema.json) or
Markdown. Every value from a snapshot is escaped, file names are never cut, lines keep to WIDTH columns; in a
warning only the values (digests, paths) are shortened, never the words saying what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hoststate.diff import Finding
from hoststate.fleet import FleetReport
from hoststate.render.findings import by_rule, finding_lines, rule_lines
from hoststate.render.summary import summarize
from hoststate.render.text import WIDTH, Elide, Name, Part, fit, md_code, md_text, message_parts, paint, safe

#: How many member files a text or Markdown group line names before "+N more".
_SHOW_MEMBERS = 3
_MAX_VALUE = 80
#: An outlier group with at most this many rules lists them; more are summarised one line per subsystem (-v: all).
_RULES_LISTED = 3


def _value(value: Any) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith("<unreadable"):
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def _members_text(members: list[str]) -> str:
    """The first members by name, each whole (a name is never cut), then ``+N more``."""
    shown = ", ".join(members[:_SHOW_MEMBERS])
    return shown + (f", +{len(members) - _SHOW_MEMBERS} more" if len(members) > _SHOW_MEMBERS else "")


def _headline(report: FleetReport) -> str:
    in_ref = next((len(m) for d, m in report.groups if d == report.reference_digest), 0)
    source = "majority" if report.reference_from == "majority" else f"from {report.reference_from}"
    return (f"{report.total} snapshot(s), {len(report.groups)} group(s); reference {report.reference_digest[:23]} "
            f"({source}, {in_ref} match); {len(report.outliers)} outlier(s), {len(report.skipped)} skipped")


def _findings(o: dict[str, Any]) -> list[Finding]:
    return [Finding(f["path"], f["change"], f["old"], f["new"], "invalidating", f.get("rule", ""), f.get("reason", ""))
            for f in o["findings"]]


def outlier_groups(report: FleetReport) -> list[list[dict[str, Any]]]:
    """Outliers grouped by digest (members of a group share their findings), in the report's group order."""
    digest_of = {m: d for d, members in report.groups for m in members}
    by_digest: dict[str, list[dict[str, Any]]] = {}
    for o in report.outliers:
        by_digest.setdefault(digest_of.get(o["snapshot"], o["snapshot"]), []).append(o)
    order = [d for d, _ in report.groups if d in by_digest]
    return [by_digest[d] for d in order] + [g for d, g in by_digest.items() if d not in order]


def _outlier_lines(group: list[dict[str, Any]], verbose: bool) -> list[str]:
    findings = _findings(group[0])
    listed: list[Part] = []
    for i, o in enumerate(group[:_SHOW_MEMBERS]):
        who = [p for p in (o["hostname"], o["label"]) if p]
        listed += [", "] if i else []
        listed += [Name(safe(o["snapshot"]))] + ([" ", Name(f"({safe(', '.join(who))})")] if who else [])
    more = f", +{len(group) - _SHOW_MEMBERS} more" if len(group) > _SHOW_MEMBERS else ""
    head = f"  {len(group)} x " if len(group) > 1 else "  "
    lines = fit([head, *listed, f"{more}: {len(findings)} invalidating"], WIDTH, 6)
    if not findings:
        return lines + ["    (no invalidating finding: see warnings)"]
    rules = by_rule(findings)
    if verbose:
        for _sev, _rule, _why, fs in rules:
            for f in fs:
                lines.extend("    " + line for line in finding_lines(f, WIDTH - 4, reason=False))
    elif len(rules) <= _RULES_LISTED:
        for _sev, rule, _why, fs in rules:
            lines.extend(rule_lines(fs, rule, indent="    "))
    else:
        lines.extend(f"    {s.text}" for s in summarize(findings))
    return lines


def render_text(report: FleetReport, *, color: bool = False, verbose: bool = False) -> str:
    """The fleet as a gate reads it: the verdict line, outliers first (one block per outlier group, its findings by
    rule or one line per subsystem; ``verbose`` lists every finding), skipped files, then the groups and warnings."""
    lines = fit([safe(_headline(report))], WIDTH, 6)
    if report.outliers:
        groups = outlier_groups(report)
        lines += ["", paint(f"OUTLIERS ({len(report.outliers)} in {len(groups)} group(s))", "invalidating", color)]
        for group in groups:
            lines += _outlier_lines(group, verbose)
    if report.skipped:
        lines += ["", paint(f"SKIPPED ({len(report.skipped)}: unreadable or not a snapshot; the gate fails)",
                            "invalidating", color)]
        for s in report.skipped:
            lines += fit(["  ", safe(s["file"]), ": ", *message_parts(safe(s["error"]))], WIDTH, 6)
    lines += ["", "groups:"]
    for d, members in report.groups:
        mark = "*" if d == report.reference_digest else " "
        named: list[Part] = [f" {mark}{len(members):>6}  ", Elide(d), "  "]
        for i, m in enumerate(members[:_SHOW_MEMBERS]):
            named += [", ", Name(safe(m))] if i else [Name(safe(m))]
        if len(members) > _SHOW_MEMBERS:
            named += [", ", Name(f"+{len(members) - _SHOW_MEMBERS} more")]
        lines += fit(named, WIDTH, 10)
    if report.warnings:
        lines += ["", f"warnings ({len(report.warnings)}):"]
        for w in report.warnings:
            lines += fit([f"  {safe(w['file']) + ': ' if w['file'] else ''}", *message_parts(safe(w["message"]))],
                         WIDTH, 6)
    return "\n".join(lines) + "\n"


def render_markdown(report: FleetReport, **_ignored: Any) -> str:
    lines = [f"**hoststate fleet**: {md_text(_headline(report))}", "", "| | snapshots | digest | members |",
             "|---|---:|---|---|"]
    for d, members in report.groups:
        mark = "reference" if d == report.reference_digest else "outlier"
        lines.append(f"| {mark} | {len(members)} | {md_code(d)} | {md_text(_members_text(members))} |")
    if report.outliers:
        lines += ["", "| snapshot | host | path | reference | outlier | reason |", "|---|---|---|---|---|---|"]
        for o in report.outliers:
            host = md_text(o["hostname"] or "")
            if not o["findings"]:
                lines.append(f"| {md_text(o['snapshot'])} | {host} | (no invalidating finding) | | | |")
            for f in o["findings"]:
                lines.append(f"| {md_text(o['snapshot'])} | {host} | {md_code(f['path'])} "
                             f"| {md_text(_value(f['old']))} | {md_text(_value(f['new']))} | {md_text(f['reason'])} |")
    if report.skipped:
        lines += ["", f"Skipped ({len(report.skipped)}):", ""]
        lines.extend(f"- {md_text(s['file'])}: {md_text(s['error'])}" for s in report.skipped)
    if report.warnings:
        lines += ["", f"Warnings ({len(report.warnings)}):", ""]
        lines.extend(f"- {md_text(w['file']) + ': ' if w['file'] else ''}{md_text(w['message'])}"
                     for w in report.warnings)
    return "\n".join(lines) + "\n"


def render_json(report: FleetReport, **_ignored: Any) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"


#: format -> renderer; colour and ``verbose`` apply to text.
RENDERERS: dict[str, Callable[..., str]] = {"text": render_text, "json": render_json, "markdown": render_markdown}
FORMATS = tuple(RENDERERS)


def render(report: FleetReport, fmt: str, *, color: bool = False, verbose: bool = False) -> str:
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderer(report, color=color, verbose=verbose)
