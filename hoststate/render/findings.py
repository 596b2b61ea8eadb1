"""Diff findings as lines: one finding (``path: old -> new``), one rule's findings (``8 x RULE: change``), in the
order a reader needs them (severity, subsystem, the facts a summary leads with).

A changed list is shown as the items removed and added, never as two truncated lists; a value too long for its
line is cut in its middle, the path, the arrow and the words around it never (hoststate.render.text.fit).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from hoststate.diff import DiffResult, Finding
from hoststate.paths import split_path
from hoststate.policy import RANK, SEVERITIES
from hoststate.render.text import (
    COLOURS,
    RESET,
    WIDTH,
    Elide,
    Part,
    cells,
    clip,
    fit,
    plural,
    safe,
    show_value,
    value_parts,
    wrap,
)
from hoststate.snapshot import jsonable

TITLES = {"invalidating": "INVALIDATING", "warning": "WARNING", "info": "INFO", "ignore": "IGNORED"}
#: Subsystems in the order a reader needs them when severities tie.
ORDER = ("dsa", "vllm", "gpu", "system", "env", "packages", "accel-config", "collectors", "host")
#: Within a subsystem, the findings a summary line leads with (the rest follow from them).
_LEADS = (
    ("dsa", "devices", "*", "wqs", "*", "state"),
    ("dsa", "devices", "*", "state"),
    ("vllm", "cudagraph", "declared"),
    ("vllm", "cudagraph", "observed"),
    ("vllm", "servers", "*", "cudagraph", "declared"),
    ("vllm", "servers", "*", "cudagraph", "observed"),
    ("vllm", "args", "*"),
    ("vllm", "servers", "*", "args", "*"),
    ("accel_config", "saved", "matches_live"),
    ("accel_config", "saved", "present"),
    ("hoststate", "hostname"),
)


def parts_of(f: Finding) -> tuple[str, ...]:
    """The finding's path as keys (a malformed path as one key)."""
    try:
        return split_path(f.path)
    except ValueError:
        return (f.path,)


def subsystem(parts: tuple[str, ...]) -> str:
    first = parts[0] if parts else ""
    return {"accel_config": "accel-config", "hoststate": "host"}.get(first, first)


#: (length, first key) -> the leads of that shape, with their rank: a path is matched against those only.
_LEADS_BY: dict[tuple[int, str], list[tuple[int, tuple[str, ...]]]] = {}
for _rank, _lead in enumerate(_LEADS):
    _LEADS_BY.setdefault((len(_lead), _lead[0]), []).append((_rank, _lead))
#: The keys the leads name: any other key is matched only by a lead's ``*``, so it is looked up as "".
_LEAD_KEYS = frozenset(k for lead in _LEADS for k in lead if k != "*")
#: The lead rank of each path shape (its keys, those no lead names as ""): a few dozen shapes, one per finding.
_LEAD_RANKS: dict[tuple[str, ...], int] = {}


def _lead_rank(parts: tuple[str, ...]) -> int:
    if (len(parts), parts[0] if parts else "") not in _LEADS_BY:
        return len(_LEADS)
    shape = tuple(k if k in _LEAD_KEYS else "" for k in parts)
    try:
        return _LEAD_RANKS[shape]
    except KeyError:
        pass
    rank = len(_LEADS)
    for i, lead in _LEADS_BY[len(parts), parts[0]]:
        if all(a in ("*", b) for a, b in zip(lead, parts, strict=True)):
            rank = i
            break
    if len(_LEAD_RANKS) < 4096:
        _LEAD_RANKS[shape] = rank
    return rank


def importance(f: Finding) -> tuple[int, int, int, str]:
    """Sort key, most important first: severity, subsystem (ORDER), the facts a summary leads with, path."""
    return (*_ranks(f), f.path)


def _ranks(f: Finding) -> tuple[int, int, int]:
    parts = parts_of(f)
    name = subsystem(parts)
    return RANK[f.severity], ORDER.index(name) if name in ORDER else len(ORDER), _lead_rank(parts)


#: Each rank tuple once: there are a few dozen (severities x subsystems x leads), and as many findings as leaves.
_RANK_KEYS: dict[tuple[int, int, int], tuple[int, int, int]] = {}


def _rank_key(f: Finding) -> tuple[int, int, int]:
    ranks = _ranks(f)
    return _RANK_KEYS.setdefault(ranks, ranks)


class Ranked(list):
    """Findings already in :func:`importance` order (what :func:`by_importance` returns): a reader of them
    (:func:`by_rule`, hoststate.render.summary) takes that order instead of ranking every finding again."""


def by_importance(findings: Iterable[Finding]) -> Ranked:
    """``findings`` sorted by :func:`importance`, without a key tuple per finding (a diff at the input cap has
    396,000): sorted by path, then stably by the ranks before it, each rank tuple made once."""
    if isinstance(findings, Ranked):
        return findings
    ordered = Ranked(sorted(findings, key=attrgetter("path")))
    ordered.sort(key=_rank_key)
    return ordered


# -- one value's change ------------------------------------------------------------------------------------------


def _key(value: Any) -> str:
    return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False, default=str)


def list_delta(old: Any, new: Any) -> tuple[list[Any], list[Any]] | None:
    """(removed, added) items of two lists, counting repeats; None when either side is not a list."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return None
    before, after = Counter(_key(v) for v in old), Counter(_key(v) for v in new)
    gone_keys, came_keys = before - after, after - before
    gone, came = [], []
    for v in old:
        k = _key(v)
        if gone_keys[k] > 0:
            gone_keys[k] -= 1
            gone.append(v)
    for v in new:
        k = _key(v)
        if came_keys[k] > 0:
            came_keys[k] -= 1
            came.append(v)
    return gone, came


def items(values: Sequence[Any], width: int) -> str:
    return "[" + ", ".join(show_value(v, width) for v in values) + "]"


def change_text(f: Finding, width: int = WIDTH) -> str:
    """What happened to one value, on one line: ``old -> new``, ``added X``, ``-[removed] +[added]``."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return "same items, other order"
        return f"-{items(gone, width)} +{items(came, width)}"
    if f.change == "added":
        return f"added {show_value(f.new, width)}"
    if f.change == "removed":
        return f"removed (was {show_value(f.old, width)})"
    return f"{show_value(f.old, width)} -> {show_value(f.new, width)}"


def change_parts(f: Finding) -> list[Part]:
    """:func:`change_text` as parts for :func:`fit`: the words kept whole, each value elidable."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return ["same items, other order"]
        return ["-", Elide(items(gone, 10**6)), " +", Elide(items(came, 10**6))]
    if f.change == "added":
        return ["added ", *value_parts(f.new)]
    if f.change == "removed":
        return ["removed (was ", *value_parts(f.old), ")"]
    return [*value_parts(f.old), " -> ", *value_parts(f.new)]


def finding_lines(f: Finding, width: int = WIDTH, *, reason: bool = True) -> list[str]:
    """One finding in lines of at most ``width`` columns: ``path: change  (reason)``.

    When the change does not fit, a changed list gives one line per removed (``-``) and added (``+``) item, so
    the item that changed is always on screen; any other value is cut in the middle.
    """
    path = safe(f.path)
    why = f"  ({safe(f.reason)})" if reason and f.reason else ""
    one = f"{path}: {change_text(f, width)}"
    if cells(one) <= width:
        if cells(one) + cells(why) > width:
            room = width - cells(one)
            why = clip(why[:-1], max(0, room - 1)) + ")" if room > 8 else ""
        return [one + why]
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is None:
        if cells(path) < width:  # the whole path on its line (a GPU's UUID stays readable), the change below it
            return [f"{path}:", *fit(["    ", *change_parts(f)], width)]
        return fit([f"{path}: ", *change_parts(f)], width)
    gone, came = delta
    what = f"list changed, {len(gone)} removed, {len(came)} added"
    lines = [f"{path}: {what}"] if cells(path) + len(what) + 2 <= width else [*fit([f"{path}:"], width),
                                                                              f"    {what}"]
    lines += [line for v in gone for line in fit(["    - ", *value_parts(v)], width)]
    lines += [line for v in came for line in fit(["    + ", *value_parts(v)], width)]
    return lines


def finding_line(f: Finding, width: int | None = None) -> str:
    """One finding as one line with its whole reason (guard's stderr); ``width`` cuts it to that many columns.

    A list change too long for one line is joined with `` | ``, every removed and added item still named."""
    lines = finding_lines(f, width or 10**6)
    return lines[0] if len(lines) == 1 else " | ".join(line.strip() for line in lines)


# -- findings by rule --------------------------------------------------------------------------------------------

Group = tuple[str, str, str, list[Finding]]


def by_rule(findings: Iterable[Finding]) -> list[Group]:
    """(severity, rule, reason, findings) in report order: severity, then the rule's most important finding."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in by_importance(findings):
        groups.setdefault((f.severity, f.rule or f.path, f.reason), []).append(f)
    ordered = sorted(groups.items(), key=lambda kv: importance(kv[1][0]))  # each group's first is its most important
    return [(s, r, why, fs) for (s, r, why), fs in ordered]


def _example_parts(group: list[Finding]) -> list[Part]:
    """:func:`example` as parts for :func:`fit`."""
    head = group[0]
    first = change_parts(head)
    shown = change_text(head, 10**6)
    # stops at the first that differs; a finding with the same change of the same plain values is not shown again
    same = all(_same_change(f, head) or change_text(f, 10**6) == shown for f in group)
    return first if same else ["e.g. ", *first]


def _same_change(f: Finding, g: Finding) -> bool:
    """Whether two findings' changes read alike by their values alone: the same change of equal strings, integers
    or None (types whose equal values are written alike; 0.0 and -0.0, or 1 and True, are not)."""
    return f.change == g.change and _plain_equal(f.old, g.old) and _plain_equal(f.new, g.new)


def _plain_equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and type(a) in (str, int, type(None)) and a == b


def rule_lines(group: list[Finding], rule: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """A rule's findings on one line: ``8 x RULE: change`` (a single finding: ``PATH: change``); the rule or path
    is never cut, values are elided in the middle."""
    if len(group) == 1:
        return [indent + line for line in finding_lines(group[0], width - len(indent), reason=False)]
    return fit([f"{indent}{len(group)} x {safe(rule)}: ", *_example_parts(group)], width, len(indent) + 4)


def example(group: list[Finding], width: int) -> str:
    """The change of a rule's findings: once when they all agree (``"disabled" -> "enabled"``), else the first."""
    head = group[0]
    first = change_text(head, width)
    same = all(_same_change(f, head) or change_text(f, width) == first for f in group)
    return first if same else f"e.g. {first}"


def reason_lines(text: str, indent: int, width: int = WIDTH) -> list[str]:
    """A rule's reason, escaped and wrapped under its findings."""
    pad = " " * indent
    return wrap(safe(text), width, pad, pad, break_long=True) or [pad]


def rule_block(group: Group, *, verbose: bool, reason: bool) -> list[str]:
    """One rule: its line, every finding with ``verbose`` (when more than one), then its reason with ``reason``."""
    _severity, rule, why, findings = group
    lines = rule_lines(findings, rule)
    if len(findings) > 1 and verbose:
        for f in findings:
            lines.extend("      " + line for line in finding_lines(f, WIDTH - 6, reason=False))
    if reason:
        lines.extend(reason_lines(why, 6))
    return lines


def tag(severity: str, color: bool) -> str:
    """A summary line's severity column (``INVALIDATING  ``)."""
    title = f"{TITLES[severity]:<12}"
    return f"{COLOURS[severity]}{title}{RESET}" if color else title


def section_title(title: str, findings: Sequence[Finding], groups: Sequence[Group]) -> str:
    return f"{title} ({plural(len(findings), 'finding')}, {plural(len(groups), 'rule')})"


def counts_text(result: DiffResult) -> str:
    """``N invalidating, N warning, N info, N ignore``: the counts diff computed."""
    return ", ".join(f"{result.counts.get(s, 0)} {s}" for s in SEVERITIES)
