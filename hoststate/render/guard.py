"""guard's report on stderr (and rebaseline's refusal): the verdict line, diff's summary, the refused and accepted
findings by rule, what was not listed, and the one thing to do next; and the line naming the command a
non-comparable run starts. The verdict is guard's own (hoststate.guard.GuardResult)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from hoststate.diff import Finding
from hoststate.paths import split_path
from hoststate.render.findings import by_rule, finding_lines, parts_of, reason_lines, rule_lines, section_title, tag
from hoststate.render.sources import vllm_source_note
from hoststate.render.summary import summarize
from hoststate.render.text import WIDTH, Elide, Name, Part, fit, paint, plural, safe

#: How many rule lines guard lists per section before "(+N more rules)": the refusal fits one screen.
GUARD_RULES = 12
#: The sections of findings that did not decide the verdict, listed with -v (the plain run counts them).
_OTHERS = (("warning", "WARNING"), ("info", "INFO"))


def accept_patterns(findings: Iterable[Finding]) -> list[str]:
    """The ``--accept`` patterns that accept exactly these findings' rules; more than three rules are folded into
    one ``SUBSYSTEM.**`` per top-level table (what the user reviews in the summary lines)."""
    from hoststate.policy import compile_pattern

    findings = list(findings)
    chosen: set[str] = set()
    for f in findings:
        try:  # a rule's pattern, when it matches the finding's own path (a whole unreadable table may not)
            exact = f.rule if f.rule and compile_pattern(split_path(f.rule)).match(parts_of(f)) else f.path
        except ValueError:
            exact = f.path
        chosen.add(exact)
    if len(chosen) <= 3:
        return sorted(chosen)
    return sorted({f"{parts_of(f)[0]}.**" for f in findings})


def _section(title: str, tone: str, findings: list[Finding], color: bool, verbose: bool) -> list[str]:
    groups = by_rule(findings)
    lines = ["", paint(section_title(title, findings, groups), tone, color)]
    shown = groups if verbose else groups[:GUARD_RULES]
    for _sev, rule, reason, group in shown:
        lines.extend(rule_lines(group, rule))
        if verbose:
            if len(group) > 1:
                for f in group:
                    lines.extend("      " + line for line in finding_lines(f, WIDTH - 6, reason=False))
            lines.extend(reason_lines(reason, 6))
    if len(groups) > len(shown):
        lines.append(f"  (+{plural(len(groups) - len(shown), 'more rule')}; -v lists every finding)")
    return lines


def _others(findings: list[Finding], lines: list[str], color: bool, verbose: bool) -> list[str]:
    """The warning and info findings: with ``verbose`` a section each (only those that have findings), else one
    note counting them, folded into the last section's ``(+N more rules ...)`` line when there is one."""
    others = [f for f in findings if f.severity in ("warning", "info")]
    if not others:
        return []
    if verbose:
        out: list[str] = []
        for severity, title in _OTHERS:
            mine = [f for f in others if f.severity == severity]
            if mine:
                out += _section(title, severity, mine, color, True)
        return out
    rest = ", ".join(f"{sum(1 for f in others if f.severity == s)} {s}" for s, _title in _OTHERS)
    folded = "; -v lists every finding)"
    if lines[-1].endswith(folded):
        lines[-1] = lines[-1][:-len(folded)] + f"; {rest} not listed; -v lists them)"
        return []
    return [f"  ({rest} not listed; -v lists them)"]


def render_guard(result: Any, *, baseline_snap: Any = None, color: bool = False, verbose: bool = False,
                 saved: str | None = None, title: str = "hoststate guard") -> str:
    """guard's report on stderr: its verdict line, how vLLM was described when the sides differ, diff's summary,
    the refused and accepted findings by rule, then one line saying what to do. A refusal of the seed scenario fits
    one screen (tests/test_presentation.py)."""
    counts = ", ".join(f"{result.diff.counts.get(s, 0)} {s}" for s in ("invalidating", "warning", "info"))
    tone = "refused" if result.refused else "accepted" if result.accepted else "ok"
    digest = result.baseline_digest[:19] if result.baseline_digest else "no digest"  # sha256: and 12 hex digits
    head = fit([f"{title}: baseline ", Name(safe(str(result.baseline))), " ",
                Name(f"({digest}): {paint(result.verdict, tone, color)} ({counts})")],  # the verdict is one piece
               WIDTH + (len(paint("", tone, color))))
    lines = [*(vllm_source_note(baseline_snap, result.current) if baseline_snap is not None else []), *head]
    for s in summarize(result.findings):
        if verbose or s.severity in ("invalidating", "warning"):
            lines.append(f"{tag(s.severity, color)}  {s.text}")
    if result.refused:
        lines += _section("REFUSED", "refused", result.refused, color, verbose)
    if result.accepted:
        lines += _section("ACCEPTED", "accepted", result.accepted, color, verbose)
    lines += _others(result.findings, lines, color, verbose)
    if result.refused and title == "hoststate guard":
        lines += next_step(result, saved)
    elif result.refused:
        accept = " ".join(f"--accept {shlex.quote(p)}" for p in accept_patterns(result.refused))
        lines += fit([f"next: review the findings above; accept them with {accept}"], WIDTH, 6)
    return "\n".join(lines) + "\n"


def next_step(result: Any, saved: str | None = None) -> list[str]:
    """The one thing to do after a refusal: the exact accept options, and the re-baseline command."""
    # a no-break space keeps each option with its pattern when the line wraps (wrap breaks at ASCII spaces)
    accept = " ".join(f"--accept\xa0{shlex.quote(p)}" for p in accept_patterns(result.refused))
    base = shlex.quote(str(result.baseline))
    now = shlex.quote(saved) if saved else "NOW.toml"
    then = "" if saved else " (NOW.toml: --save-current)"
    lines = [*fit([f"next: re-measure, or run as non-comparable: {accept}"], WIDTH, 6),
             *fit([f"  or make this the baseline with the same --accept: hoststate rebaseline {base} {now} -o NEW.toml"
                   f"{then}"], WIDTH, 6)]
    return [line.replace("\xa0", " ") for line in lines]


def command_parts(command: Sequence[str]) -> list[Part]:
    """A command as ``shlex.join`` writes it (so it can be pasted back), secrets redacted, undecodable bytes as
    ``\\xNN``, each argument a value that may be shortened in its middle to fit a line."""
    from hoststate.redact import redact_argv
    from hoststate.text import clean

    parts: list[Part] = []
    for i, arg in enumerate(redact_argv([clean(c) for c in command])):
        parts += [" "] if i else []
        parts.append(Elide(safe(shlex.quote(arg))))
    return parts


def running_lines(result: Any, command: Sequence[str]) -> list[str]:
    """``hoststate guard: running as non-comparable (N accepted): CMD``, within the width: the arguments are
    shortened, the words before them never."""
    return fit([f"hoststate guard: running as non-comparable ({len(result.accepted)} accepted): ",
                *command_parts(command)], WIDTH, 6)

