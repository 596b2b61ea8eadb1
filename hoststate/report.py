"""Render a DiffResult as text, JSON (docs/diff-report.schema.json, with a ``summary`` list) or Markdown.

A reader gets the verdict in ten seconds: first one line per subsystem saying what happened in words, ordered by
importance ("dsa0, dsa2: 8 WQs disabled -> enabled (+68 derived settings)"); then the findings grouped by rule,
each rule's reason once; every finding only with ``verbose``. Text lines fit WIDTH columns: long values are cut
in the middle, and a changed list is shown as the items removed and added, never as two truncated lists.

Values come from other people's processes and files: every control character (newline, ESC, CSI, OSC, C1, bidi
overrides) and every invisible one (zero-width, fillers, spaces other than U+0020, private use, unassigned) is
shown as an escape by ``safe``, so a value can neither start a line of its own ("verdict: clean"), pass for another
key, nor drive the terminal. Pure functions returning strings; the CLI decides where they go and whether colour is on.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import textwrap
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hoststate.diff import DiffResult, Finding
from hoststate.paths import split_path
from hoststate.policy import RANK, SEVERITIES
from hoststate.snapshot import jsonable

FORMATS = ("text", "json", "markdown")
WIDTH = 120
#: The one colour table of every report (diff, guard, check, show, fleet), by severity or verdict word.
COLOURS = {"invalidating": "\x1b[1;31m", "refused": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[36m",
           "ignore": "\x1b[2m", "accepted": "\x1b[35m", "ok": "\x1b[32m"}
RESET = "\x1b[0m"
_COLOURS, _RESET = COLOURS, RESET
_TITLES = {"invalidating": "INVALIDATING", "warning": "WARNING", "info": "INFO", "ignore": "IGNORED"}
_ELLIPSIS = "..."

# -- escaping ----------------------------------------------------------------------------------------------------

#: Unicode categories never shown as themselves: controls (Cc), format characters (Cf: zero-width spaces and
#: joiners, bidirectional marks and overrides, soft hyphen, tags), line/paragraph separators (Zl, Zp), spaces
#: other than U+0020 (Zs), surrogates (Cs), private use (Co) and unassigned code points (Cn). A key holding one
#: could look identical to a real key, or drive the terminal.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"})
#: Letters and marks that render as nothing (fillers, variation selectors, invisible vowels, the blank braille
#: pattern): visible categories, but as invisible as a zero-width space.
_FILLERS = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, *range(0x180B, 0x1810),
     *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)
#: Every character outside printable ASCII is looked at (then kept unless hidden): ASCII text costs one scan.
_SUSPECT = re.compile("[^\x20-\x7e]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _hidden(char: str) -> bool:
    return char != " " and (ord(char) in _FILLERS or unicodedata.category(char) in _HIDDEN_CATEGORIES)


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    if not _hidden(char):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe(text: str) -> str:
    """``text`` with every control or invisible character written as a visible escape (``\\n``, ``\\e``, ``\\x9b``,
    ``\\u200b``, ``\\u3164``, ``\\U000e0041``): the one escaping of snapshot text in every report."""
    return _SUSPECT.sub(_escape_char, text)


def clip(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (both ends stay: a path's leaf, a version's tail)."""
    if len(text) <= width:
        return text
    if width <= len(_ELLIPSIS) + 2:
        return text[:width]
    keep = width - len(_ELLIPSIS)
    head = (keep + 1) // 2
    return text[:head] + _ELLIPSIS + text[len(text) - (keep - head):]


def paint(text: str, tone: str, color: bool) -> str:
    """``text`` in the colour of ``tone`` (a severity or verdict word) when ``color`` is on."""
    return f"{COLOURS[tone]}{text}{RESET}" if color and tone in COLOURS else text


@dataclass(frozen=True)
class Elide:
    """A part of a line that may be shortened in its middle (a value); every other part is kept whole."""

    text: str


@dataclass(frozen=True)
class Name:
    """A part of a line never cut nor broken across lines (a file name with its host); other parts wrap at spaces."""

    text: str


#: The shortest a value is elided to (keeps its head and tail readable).
_MIN_VALUE = 15
#: Stands for a space inside a Name while wrapping (a control character: escaped text never holds one).
_GLUE = "\x1f"


def fit(parts: Sequence[str | Elide | Name], width: int = WIDTH, indent: int = 4) -> list[str]:
    """One line of at most ``width`` columns from ``parts``: names and key words (plain strings) are never cut;
    values (:class:`Elide`) are shortened in the middle, longest first, down to 15 columns each. When the names
    alone do not fit, the line is wrapped at spaces onto lines indented by ``indent``: nothing is hidden."""
    texts = [p.text.replace(" ", _GLUE) if isinstance(p, Name) else p.text if isinstance(p, Elide) else p
             for p in parts]
    over = sum(map(len, texts)) - width
    elidable = [i for i, p in enumerate(parts) if isinstance(p, Elide)]
    if over > sum(max(0, len(texts[i]) - _MIN_VALUE) for i in elidable):
        elidable = []  # eliding cannot make it one line: wrap it whole instead
    while over > 0 and elidable:
        i = max(elidable, key=lambda k: len(texts[k]))
        room = len(texts[i]) - _MIN_VALUE
        if room <= 0:
            break
        cut = min(room, over)
        texts[i] = clip(texts[i], len(texts[i]) - cut)
        over -= cut
    line = "".join(texts)
    if len(line) <= width:
        return [line.replace(_GLUE, " ")]
    lead = len(line) - len(line.lstrip(" "))
    # A word (a name glued with its spaces) is broken only when it cannot fit on a line of its own.
    too_long = any(len(word) > width - max(indent, lead) for word in line[lead:].split(" "))
    wrapped = textwrap.wrap(line[lead:], width=width, initial_indent=" " * lead,
                            subsequent_indent=" " * max(indent, lead), break_long_words=too_long,
                            break_on_hyphens=False) or [""]
    return [w.replace(_GLUE, " ") for w in wrapped]


def table(data: Any, *keys: str) -> dict[str, Any]:
    """The table at ``keys`` below ``data``, or an empty one when a level is missing or not a table: a hand-edited
    snapshot may hold anything anywhere, and a report must still render (check, show and fleet use this one)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


# -- values and changes ------------------------------------------------------------------------------------------


def show_value(value: Any, width: int | None = WIDTH) -> str:
    """A value as a reader expects it in TOML: strings quoted, lists bracketed, absent as ``(absent)``; escaped."""
    if value is None:
        text = "(absent)"
    elif isinstance(value, str) and value.startswith("<unreadable"):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (dt.datetime, dt.date, dt.time)):
        text = value.isoformat()
    elif isinstance(value, (list, dict)):
        text = json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = str(value)
    text = safe(text)
    return text if width is None else clip(text, width)


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


def _items(values: Sequence[Any], width: int) -> str:
    return "[" + ", ".join(show_value(v, width) for v in values) + "]"


def change_text(f: Finding, width: int = WIDTH) -> str:
    """What happened to one value, on one line: ``old -> new``, ``added X``, ``-[removed] +[added]``."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return "same items, other order"
        return f"-{_items(gone, width)} +{_items(came, width)}"
    if f.change == "added":
        return f"added {show_value(f.new, width)}"
    if f.change == "removed":
        return f"removed (was {show_value(f.old, width)})"
    return f"{show_value(f.old, width)} -> {show_value(f.new, width)}"


def change_parts(f: Finding) -> list[str | Elide]:
    """:func:`change_text` as parts for :func:`fit`: the words kept whole, each value elidable."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return ["same items, other order"]
        return ["-", Elide(_items(gone, 10**6)), " +", Elide(_items(came, 10**6))]
    if f.change == "added":
        return ["added ", Elide(show_value(f.new, None))]
    if f.change == "removed":
        return ["removed (was ", Elide(show_value(f.old, None)), ")"]
    return [Elide(show_value(f.old, None)), " -> ", Elide(show_value(f.new, None))]


def finding_lines(f: Finding, width: int = WIDTH, *, reason: bool = True) -> list[str]:
    """One finding in lines of at most ``width`` columns: ``path: change  (reason)``.

    When the change does not fit, a changed list gives one line per removed (``-``) and added (``+``) item, so
    the item that changed is always on screen; any other value is cut in the middle.
    """
    path = safe(f.path)
    why = f"  ({safe(f.reason)})" if reason and f.reason else ""
    one = f"{path}: {change_text(f, width)}"
    if len(one) <= width:
        if len(one) + len(why) > width:
            why = clip(why[:-1], max(0, width - len(one) - 1)) + ")" if width - len(one) > 8 else ""
        return [one + why]
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is None:
        if len(path) < width:  # the whole path on its line (a GPU's UUID stays readable), the change below it
            return [f"{path}:", *fit(["    ", *change_parts(f)], width)]
        return fit([f"{path}: ", *change_parts(f)], width)
    gone, came = delta
    what = f"list changed, {len(gone)} removed, {len(came)} added"
    lines = [f"{path}: {what}"] if len(path) + len(what) + 2 <= width else [*fit([f"{path}:"], width), f"    {what}"]
    lines += [line for v in gone for line in fit(["    - ", Elide(show_value(v, None))], width)]
    lines += [line for v in came for line in fit(["    + ", Elide(show_value(v, None))], width)]
    return lines


def finding_line(f: Finding, width: int | None = None) -> str:
    """One finding as one line with its whole reason (guard's stderr); ``width`` cuts it to that many columns.

    A list change too long for one line is joined with `` | ``, every removed and added item still named."""
    lines = finding_lines(f, width or 10**6)
    return lines[0] if len(lines) == 1 else " | ".join(line.strip() for line in lines)


# -- the summary: one line per subsystem ------------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryLine:
    severity: str
    subsystem: str
    text: str
    findings: int

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "subsystem": self.subsystem, "text": self.text, "findings": self.findings}


#: Subsystems in the order a reader needs them when severities tie.
_ORDER = ("dsa", "vllm", "gpu", "system", "env", "packages", "accel-config", "collectors", "host")


def _parts(f: Finding) -> tuple[str, ...]:
    try:
        return split_path(f.path)
    except ValueError:
        return (f.path,)


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


def _lead_rank(parts: tuple[str, ...]) -> int:
    for i, lead in enumerate(_LEADS):
        if len(lead) == len(parts) and all(a in ("*", b) for a, b in zip(lead, parts, strict=True)):
            return i
    return len(_LEADS)


def importance(f: Finding) -> tuple[int, int, int, str]:
    """Sort key, most important first: severity, subsystem (_ORDER), the facts a summary leads with, path."""
    parts = _parts(f)
    name = _subsystem(parts)
    where = _ORDER.index(name) if name in _ORDER else len(_ORDER)
    return RANK[f.severity], where, _lead_rank(parts), f.path


def _subsystem(parts: tuple[str, ...]) -> str:
    first = parts[0] if parts else ""
    return {"accel_config": "accel-config", "hoststate": "host"}.get(first, first)


def _word(value: Any) -> str:
    """A value as a bare word for a sentence: strings unquoted, absent as 'absent'."""
    if value is None:
        return "absent"
    if isinstance(value, str):
        return "unreadable" if value.startswith("<unreadable") else safe(value) or '""'
    return show_value(value, 40)


def _short(f: Finding, rel: str) -> str:
    """``rel`` plus what happened, short: ``kernel.release 5.15 -> 6.8``, ``NCCL_DEBUG added "INFO"``."""
    if f.change == "coverage":
        return f"{rel} {_word(f.old)} -> {_word(f.new)}"
    if f.change == "unreadable":
        return f"{rel} unreadable" if rel else "unreadable"
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        bits = [f"-{show_value(v, 30)}" for v in gone[:2]] + [f"+{show_value(v, 30)}" for v in came[:2]]
        more = len(gone) + len(came) - len(bits)
        return f"{rel} {' '.join(bits)}" + (f" (+{more})" if more > 0 else "")
    if f.change == "added":
        return f"{rel} added {show_value(f.new, 40)}"
    if f.change == "removed":
        return f"{rel} removed (was {show_value(f.old, 40)})"
    return f"{rel} {show_value(f.old, 40)} -> {show_value(f.new, 40)}"


def _short_gpu(key: str) -> str:
    """A GPU's UUID cut to its first group (``GPU-7de10c90``); position keys (a bus id, ``GPU3``) stay whole."""
    return key[:12] if key.startswith("GPU-") else key


def _rel(parts: tuple[str, ...], skip: int) -> str:
    """The path below the subsystem, with a GPU's UUID cut to its first group (``GPU-7de10c90``)."""
    keys = list(parts[skip:])
    if parts[:3] == ("system", "cpufreq", "governor") and len(parts) == 4:  # keyed by CPU range: read forwards
        return f"CPUs {safe(parts[3])} governor"
    if parts[:2] == ("gpu", "devices") and len(parts) > 2:
        keys = [_short_gpu(parts[2]), *parts[3:]]
    return safe(".".join(keys))


_SUMMARY_WIDTH = WIDTH - 14


def _fit(head: str, items: list[str], total: int, more: str = "more") -> str:
    """``head`` and as many items as fit the summary width, then ``(+N more)`` for the findings not named."""
    shown: list[str] = []
    for item in items:
        rest = total - len(shown) - 1
        candidate = head + ", ".join([*shown, item]) + (f" (+{rest} {more})" if rest > 0 else "")
        if shown and len(candidate) > _SUMMARY_WIDTH:
            break
        shown.append(item)
    rest = total - len(shown)
    return clip(head + ", ".join(shown) + (f" (+{rest} {more})" if rest > 0 else ""), _SUMMARY_WIDTH)


def _generic(label: str, findings: list[Finding], skip: int) -> str:
    """``label: item, item (+N more)``: the most important findings first, one item each."""
    ranked = sorted(findings, key=importance)
    return _fit(f"{label}: ", [_short(f, _rel(_parts(f), skip)) for f in ranked[:6]], len(findings))


def _dsa(findings: list[Finding]) -> str:
    """WQ state transitions by device, everything else counted as derived from them."""
    transitions: dict[tuple[str, str], list[str]] = {}
    state = []
    for f in findings:
        p = _parts(f)
        if len(p) == 6 and p[1] == "devices" and p[3] == "wqs" and p[5] == "state":
            transitions.setdefault((_word(f.old), _word(f.new)), []).append(safe(p[2]))
            state.append(f)
    if not state:
        return _generic("DSA", findings, 2)
    devices = sorted({d for devs in transitions.values() for d in devs})
    moves = ", ".join(f"{len(devs)} WQ{'s' if len(devs) != 1 else ''} {a} -> {b}"
                      for (a, b), devs in transitions.items())
    rest = len(findings) - len(state)
    return f"{', '.join(devices)}: {moves}" + (f" (+{rest} derived settings)" if rest else "")


def _vllm(findings: list[Finding]) -> str:
    """The cudagraph modes first (declared, then what the log says ran), then arguments and the rest."""
    items = []
    for f in sorted(findings, key=importance)[:6]:
        p = _parts(f)
        body = p[3:] if len(p) > 2 and p[1] == "servers" else p[1:]
        if body[:1] == ("cudagraph",) and len(body) == 2 and f.change == "changed":
            kind = "" if body[1] == "declared" else f"{safe(body[1])} "
            items.append(f"{kind}cudagraph {_word(f.old)} -> {_word(f.new)}")
        else:
            items.append(_short(f, safe(".".join(body))))
    first = _parts(findings[0])
    server = f" :{safe(first[2])}" if first[1:2] == ("servers",) and len(first) > 2 else ""
    return _fit(f"vLLM{server} ", items, len(findings), "related")


def _gpu(findings: list[Finding]) -> str:
    """GPUs lost or removed (every value of the device gone or unreadable) and added first, then the settings that
    changed on GPUs on both sides; a lost GPU's consequences on the others (NVLink peers, topology) are counted."""
    per_gpu: dict[str, set[str]] = {}
    for f in findings:
        p = _parts(f)
        if p[1:2] == ("devices",) and len(p) > 2:
            per_gpu.setdefault(p[2], set()).add(f.change)
    lost = sorted(u for u, changes in per_gpu.items() if "unreadable" in changes <= {"removed", "unreadable"})
    gone = sorted(u for u, changes in per_gpu.items() if changes == {"removed"})
    came = sorted(u for u, changes in per_gpu.items() if changes == {"added"})
    whole = set(lost) | set(gone) | set(came)
    whole_items = [f"{len(ids)} GPU{'s' if len(ids) != 1 else ''} {word} "
                   f"({', '.join(safe(_short_gpu(u)) for u in ids)})"
                   for word, ids in (("lost", lost), ("removed", gone), ("added", came)) if ids]
    rest = [f for f in findings if _parts(f)[1:2] != ("devices",) or len(_parts(f)) < 3 or _parts(f)[2] not in whole]
    if whole_items:
        return _fit("GPU: ", whole_items, len(whole_items) + len(rest), "related")
    items = [_short(f, _rel(_parts(f), 1)) for f in sorted(rest, key=importance)[:6]]
    return _fit("GPU: ", items, len(rest))


def _accel_config(findings: list[Finding]) -> str:
    lead = []
    for f in findings:
        p = _parts(f)
        if p[1:] == ("saved", "matches_live") and f.change == "changed":
            lead.append("live configuration not saved" if f.new is False else "live configuration now saved")
        elif p[1:] == ("saved", "present") and f.change == "changed":
            lead.append("saved configuration " + ("appeared" if f.new else "removed"))
    if not lead:
        return _generic("accel-config", findings, 1)
    rest = len(findings) - len(lead)
    return f"accel-config: {', '.join(lead)}" + (f" (+{rest} related)" if rest else "")


def _host(findings: list[Finding]) -> str:
    for f in findings:
        if _parts(f)[1:] == ("hostname",):
            rest = len(findings) - 1
            return f"different host ({_word(f.old)} -> {_word(f.new)})" + (f" (+{rest} more)" if rest else "")
    return _generic("snapshot", findings, 1)


_DESCRIBE: dict[str, Callable[[list[Finding]], str]] = {
    "dsa": _dsa,
    "vllm": _vllm,
    "accel-config": _accel_config,
    "host": _host,
    "collectors": lambda fs: _generic("collectors", fs, 1),
    "packages": lambda fs: _generic("packages", fs, 1),
    "env": lambda fs: _generic("env", fs, 1),
    "gpu": _gpu,
    "system": lambda fs: _generic("system", fs, 1),
}


def summarize(findings: Iterable[Finding]) -> list[SummaryLine]:
    """One line per subsystem (vLLM: per server), most important first: severity, then _ORDER."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        parts = _parts(f)
        name = _subsystem(parts)
        key = name
        if name == "vllm" and parts[1:2] == ("servers",) and len(parts) > 2:
            key = f"vllm\x1f{parts[2]}"
        groups.setdefault(key, []).append(f)
    out = []
    for key, group in groups.items():
        name = key.split("\x1f")[0]
        severity = min((f.severity for f in group), key=RANK.__getitem__)
        describe = _DESCRIBE.get(name) or (lambda fs, n=name: _generic(safe(n), fs, 1))
        out.append(SummaryLine(severity, name, describe(group), len(group)))
    order = {name: i for i, name in enumerate(_ORDER)}
    out.sort(key=lambda s: (RANK[s.severity], order.get(s.subsystem, len(order)), s.text))
    return out


def headline(findings: Iterable[Finding]) -> str:
    """The most important thing that happened, in words (guard's refusal names it)."""
    lines = summarize(findings)
    return lines[0].text if lines else ""


# -- details: grouped by rule -----------------------------------------------------------------------------------


def _by_rule(findings: Iterable[Finding]) -> list[tuple[str, str, str, list[Finding]]]:
    """(severity, rule, reason, findings) in report order: severity, then the rule's most important finding."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in sorted(findings, key=importance):
        groups.setdefault((f.severity, f.rule or f.path, f.reason), []).append(f)
    ordered = sorted(groups.items(), key=lambda kv: min(importance(f) for f in kv[1]))
    return [(s, r, why, fs) for (s, r, why), fs in ordered]


def _example_parts(group: list[Finding]) -> list[str | Elide]:
    """:func:`_example` as parts for :func:`fit`."""
    first = change_parts(group[0])
    shown = change_text(group[0], 10**6)
    same = all(change_text(f, 10**6) == shown for f in group)  # stops at the first that differs
    return first if same else ["e.g. ", *first]


def rule_lines(group: list[Finding], rule: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """A rule's findings on one line: ``8 x RULE: change`` (a single finding: ``PATH: change``); the rule or path
    is never cut, values are elided in the middle."""
    if len(group) == 1:
        return [indent + line for line in finding_lines(group[0], width - len(indent), reason=False)]
    return fit([f"{indent}{len(group)} x {safe(rule)}: ", *_example_parts(group)], width, len(indent) + 4)


def _example(group: list[Finding], width: int) -> str:
    """The change of a rule's findings: once when they all agree (``"disabled" -> "enabled"``), else the first."""
    changes = {change_text(f, width) for f in group}
    first = change_text(group[0], width)
    return first if len(changes) == 1 else f"e.g. {first}"


def _wrap(text: str, indent: int, width: int = WIDTH) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * indent,
                         break_long_words=True, break_on_hyphens=False) or [" " * indent]


def _tag(severity: str, color: bool) -> str:
    title = f"{_TITLES[severity]:<12}"
    return f"{_COLOURS[severity]}{title}{_RESET}" if color else title


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _counts(result: DiffResult) -> str:
    return ", ".join(f"{result.counts.get(s, 0)} {s}" for s in SEVERITIES)


def filter_paths(result: DiffResult, patterns: Sequence[str]) -> DiffResult:
    """The findings under ``patterns`` (policy syntax; a pattern also covers everything below it, as git's
    pathspecs do), with the verdict and counts of those findings only. ValueError on a malformed pattern."""
    from hoststate.policy import compile_pattern

    compiled = [compile_pattern((*split_path(p), "**")) for p in patterns]
    kept = [f for f in result.findings if any(c.match(_parts(f)) for c in compiled)]
    counts = {s: sum(1 for f in kept if f.severity == s) for s in SEVERITIES}
    verdict = "invalidating" if counts["invalidating"] else "warning" if counts["warning"] else "clean"
    return DiffResult(kept, verdict, counts)


def render_text(result: DiffResult, *, baseline: str, current: str, color: bool = False,
                verbose: bool = False, note: Sequence[str] = ()) -> str:
    """Summary lines, then the findings by rule (every finding with ``verbose``), then the verdict line. ``note``
    (vllm_source_note) comes first: it changes how every vLLM finding reads."""
    lines: list[str] = list(note)
    for s in summarize(result.findings):
        lines.append(f"{_tag(s.severity, color)}  {clip(s.text, WIDTH - 14)}")
    if lines:
        lines.append("")
    lines += fit([f"baseline: {safe(baseline)}"], WIDTH, 10)  # file names: wrapped, never cut
    lines += fit([f"current:  {safe(current)}"], WIDTH, 10)
    groups = _by_rule(result.findings)
    for severity in SEVERITIES:
        mine = [g for g in groups if g[0] == severity]
        if not mine:
            continue
        n = sum(len(g[3]) for g in mine)
        title = f"{_TITLES[severity]} ({_plural(n, 'finding')}, {_plural(len(mine), 'rule')})"
        lines.append("")
        lines.append(f"{_COLOURS[severity]}{title}{_RESET}" if color else title)
        for _sev, rule, reason, group in mine:
            lines.extend(rule_lines(group, rule))
            if len(group) > 1 and verbose:
                for f in group:
                    lines.extend("      " + line for line in finding_lines(f, WIDTH - 6, reason=False))
            lines.extend(_wrap(safe(reason), 6))
    lines.append("")
    summary = f"verdict: {result.verdict} ({_counts(result)})"
    hidden = sum(1 for g in groups if len(g[3]) > 1) and not verbose
    if hidden:
        summary += "; -v lists every finding"
    if color and result.verdict != "clean":
        summary = f"{_COLOURS['invalidating' if result.verdict == 'invalidating' else 'warning']}{summary}{_RESET}"
    lines.append(summary)
    return "\n".join(lines) + "\n"


# -- Markdown ----------------------------------------------------------------------------------------------------

_MD_PROSE = re.compile(r"([\\`*_\[\]<|])")


def md_text(text: str) -> str:
    """Prose for a Markdown cell or bullet: controls escaped, Markdown and HTML syntax inert, pipes escaped."""
    return _MD_PROSE.sub(r"\\\1", safe(text))


def md_code(text: str) -> str:
    """A code span that holds any text: controls escaped, pipes escaped for tables, fence longer than any run."""
    text = safe(text).replace("|", "\\|")
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or runs else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_cells(f: Finding) -> tuple[str, str]:
    """Baseline and current cells; a changed list shows the items removed and added, as the text report does."""
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        if not gone and not came:
            return md_code(show_value(f.old)), "same items, other order"
        return (("removed " + md_code(_items(gone, 80))) if gone else "",
                ("added " + md_code(_items(came, 80))) if came else "")
    return md_code(show_value(f.old)), md_code(show_value(f.new))


def render_markdown(result: DiffResult, *, baseline: str, current: str, verbose: bool = False) -> str:
    """A pull-request comment: verdict, summary bullets, a table by rule, and every finding with ``verbose``."""
    icon = {"invalidating": ":x:", "warning": ":warning:", "clean": ":white_check_mark:"}[result.verdict]
    out = [
        f"### hoststate diff: {icon} {result.verdict}",
        "",
        f"Baseline {md_code(baseline)} vs current {md_code(current)}: {_counts(result)}.",
        "",
    ]
    if not result.findings:
        out.append("No findings.")
        return "\n".join(out) + "\n"
    out += [f"- **{s.severity}** {md_text(s.text)}" for s in summarize(result.findings)]
    out += ["", "| severity | rule | findings | change | why |", "|---|---|---|---|---|"]
    for severity, rule, reason, group in _by_rule(result.findings):
        out.append(f"| **{severity}** | {md_code(rule)} | {len(group)} | {md_code(_example(group, 60))} "
                   f"| {md_text(reason)} |")
    if verbose:
        out += ["", f"<details><summary>All {len(result.findings)} findings</summary>", "",
                "| severity | path | change | baseline | current |", "|---|---|---|---|---|"]
        for f in result.findings:
            old, new = _md_cells(f)
            out.append(f"| **{f.severity}** | {md_code(f.path)} | {f.change} | {old} | {new} |")
        out += ["", "</details>"]
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
    yield from _json_items((f.to_dict() for f in result.findings), batch)
    yield ',\n  "summary": ['
    yield from _json_items((s.to_dict() for s in summarize(result.findings)), batch)
    yield "\n}\n"


def _json_items(items: Iterable[dict[str, Any]], batch: int) -> Iterator[str]:
    """The elements of a JSON array at depth 1 of an ``indent=2`` document, then its closing bracket."""
    chunk: list[str] = []
    empty = True
    for item in items:
        chunk.append(("\n    " if empty else ",\n    ") + _dump_object(item).replace(
            "\n", "\n    "))  # a JSON string holds no raw newline: each one is a line break of the layout
        empty = False
        if len(chunk) >= batch:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk) + ("]" if empty else "\n  ]")


def _dump_object(item: dict[str, Any]) -> str:
    """``json.dumps(item, indent=2, ensure_ascii=False)``, with each scalar value encoded by the C encoder (the
    indenting encoder is pure Python, and a report may hold a finding per leaf of two 8 MiB snapshots)."""
    if not item:
        return "{}"
    lines = []
    for key, value in item.items():
        if isinstance(value, dict | list) and value:
            text = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        else:
            text = json.dumps(value, ensure_ascii=False)
        lines.append(f"  {json.dumps(key, ensure_ascii=False)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}"


def render_diff(result: DiffResult, fmt: str, *, baseline: str, current: str, color: bool = False,
                verbose: bool = False, note: Sequence[str] = ()) -> str:
    """The report in ``fmt`` (text, json or markdown); colour only applies to text."""
    if fmt == "json":
        return "".join(iter_json(result, baseline=baseline, current=current))
    if fmt == "markdown":
        return render_markdown(result, baseline=baseline, current=current, verbose=verbose)
    if fmt == "text":
        return render_text(result, baseline=baseline, current=current, color=color, verbose=verbose, note=note)
    raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")


# -- how each side describes vLLM --------------------------------------------------------------------------------

_SOURCE_WORDS = {"cmd": "--vllm-cmd", "pid": "--vllm-pid", "discovered": "a discovered server", "log": "--vllm-log",
                 "url": "--vllm-url", "servers": "discovered servers", "none": "no server",
                 "skipped": "not read (skipped)", "dead-url": "--vllm-url (unreachable)"}
_URL = re.compile(r"https?://[^\s\]\)'\"<>]+")


def _dead_url(snap: dict[str, Any]) -> tuple[str, str] | None:
    """(URL, error) of a --vllm-url that did not answer, from ``collectors.vllm.unreadable``."""
    entry = (snap.get("collectors") or {}).get("vllm")
    unread = entry.get("unreadable") if isinstance(entry, dict) and isinstance(entry.get("unreadable"), dict) else {}
    for key, why in unread.items():
        url = _URL.search(f"{key} {why}")
        if url and re.search(r"refused|unreachable|timed out|error|reset|not known", str(why), re.IGNORECASE):
            error = re.sub(r"\s*[\[(]?--vllm-url\s+\S+.*$", "", str(why)).strip() or "unreachable"
            return safe(url.group()), safe(error)
    return None


def vllm_source(snap: Any) -> tuple[str, str]:
    """(kind, words) of how a snapshot describes vLLM: ``cmd``, ``pid``, ``discovered``, ``log``, ``url``,
    ``servers``, ``dead-url`` (a --vllm-url that did not answer), ``none`` or ``skipped``."""
    snap = snap if isinstance(snap, dict) else {}
    dead = _dead_url(snap)
    if dead:
        return "dead-url", f"--vllm-url {dead[0]} (did not answer)"
    entry = (snap.get("collectors") or {}).get("vllm")
    entry = entry if isinstance(entry, dict) else {}
    vllm = snap.get("vllm") if isinstance(snap.get("vllm"), dict) else {}
    if isinstance(vllm.get("servers"), dict) and vllm["servers"]:
        return "servers", f"{len(vllm['servers'])} discovered servers"
    source = vllm.get("source")
    if isinstance(source, str) and source in _SOURCE_WORDS:
        return source, _SOURCE_WORDS[source]
    if entry.get("status") == "skipped":
        return "skipped", f"nothing ({safe(str(entry.get('reason') or 'skipped'))})"
    return "none", "no vLLM server" + (f" ({safe(str(entry['reason']))})" if entry.get("reason") else "")


def vllm_source_note(baseline: Any, current: Any) -> list[str]:
    """The report's first line when the two sides describe vLLM differently, with the fix; [] when they agree.

    Findings under ``vllm`` then compare two descriptions (a command line against a discovered process, a dead
    URL against a live one), not two servers: the reader must know that before reading them."""
    for side, snap in (("now", current), ("in the baseline", baseline)):
        dead = _dead_url(snap if isinstance(snap, dict) else {})
        if dead:
            return fit([f"vLLM: {side} --vllm-url ", dead[0], " did not answer (", Elide(dead[1]),
                        "); fix: start the server or correct the URL (its vllm values are missing, not changed)"])
    (kind_a, words_a), (kind_b, words_b) = vllm_source(baseline), vllm_source(current)
    if kind_a == kind_b or {kind_a, kind_b} <= {"discovered", "pid"}:
        return []
    return fit([f"vLLM described differently: baseline by {words_a}, now by ", Elide(words_b),
                "; fix: describe both sides the same way (the same --vllm-* option, or the server running)"])


# -- guard --------------------------------------------------------------------------------------------------------

#: How many rule lines guard lists per section before "(+N more rules)": the refusal fits one screen.
GUARD_RULES = 12


def accept_patterns(findings: Iterable[Finding]) -> list[str]:
    """The ``--accept`` patterns that accept exactly these findings' rules; more than three rules are folded into
    one ``SUBSYSTEM.**`` per top-level table (what the user reviews in the summary lines)."""
    from hoststate.policy import compile_pattern

    findings = list(findings)
    chosen: set[str] = set()
    for f in findings:
        try:  # a rule's pattern, when it matches the finding's own path (a whole unreadable table may not)
            exact = f.rule if f.rule and compile_pattern(split_path(f.rule)).match(_parts(f)) else f.path
        except ValueError:
            exact = f.path
        chosen.add(exact)
    if len(chosen) <= 3:
        return sorted(chosen)
    return sorted({f"{_parts(f)[0]}.**" for f in findings})


def _guard_section(title: str, tone: str, findings: list[Finding], color: bool, verbose: bool) -> list[str]:
    groups = _by_rule(findings)
    lines = ["", paint(f"{title} ({_plural(len(findings), 'finding')}, {_plural(len(groups), 'rule')})", tone,
                       color)]
    shown = groups if verbose else groups[:GUARD_RULES]
    for _sev, rule, reason, group in shown:
        lines.extend(rule_lines(group, rule))
        if verbose:
            if len(group) > 1:
                for f in group:
                    lines.extend("      " + line for line in finding_lines(f, WIDTH - 6, reason=False))
            lines.extend(_wrap(safe(reason), 6))
    if len(groups) > len(shown):
        lines.append(f"  (+{_plural(len(groups) - len(shown), 'more rule')}; -v lists every finding)")
    return lines


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
            lines.append(f"{_tag(s.severity, color)}  {s.text}")
    if result.refused:
        lines += _guard_section("REFUSED", "refused", result.refused, color, verbose)
    if result.accepted:
        lines += _guard_section("ACCEPTED", "accepted", result.accepted, color, verbose)
    others = [f for f in result.findings if f.severity in ("warning", "info")]
    if verbose and others:
        lines += _guard_section("WARNING", "warning", [f for f in others if f.severity == "warning"], color, True)
    elif others:
        rest = ", ".join(f"{sum(1 for f in others if f.severity == s)} {s}" for s in ("warning", "info"))
        note = f"  ({rest} not listed; -v lists them)"
        if lines[-1].endswith("; -v lists every finding)"):
            lines[-1] = lines[-1][:-len("; -v lists every finding)")] + f"; {rest} not listed; -v lists them)"
        else:
            lines.append(note)
    if result.refused and title == "hoststate guard":
        lines += next_step(result, saved)
    elif result.refused:
        accept = " ".join(f"--accept {shlex.quote(p)}" for p in accept_patterns(result.refused))
        lines += fit([f"next: review the findings above; accept them with {accept}"], WIDTH, 6)
    return "\n".join(lines) + "\n"


def next_step(result: Any, saved: str | None = None) -> list[str]:
    """The one thing to do after a refusal: the exact accept options, and the re-baseline command."""
    # a no-break space keeps each option with its pattern when the line wraps (textwrap breaks at ASCII spaces)
    accept = " ".join(f"--accept\xa0{shlex.quote(p)}" for p in accept_patterns(result.refused))
    base = shlex.quote(str(result.baseline))
    now = shlex.quote(saved) if saved else "NOW.toml"
    then = "" if saved else " (NOW.toml: --save-current)"
    lines = [*fit([f"next: re-measure, or run as non-comparable: {accept}"], WIDTH, 6),
             *fit([f"  or make this the baseline with the same --accept: hoststate rebaseline {base} {now} -o NEW.toml"
                   f"{then}"], WIDTH, 6)]
    return [line.replace("\xa0", " ") for line in lines]
