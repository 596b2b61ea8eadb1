"""What a collector could not read, recorded against the snapshot paths it would have filled.

Each collector module declares ``SOURCES``: a table from what it reads (a file under the root, an NVML call, a
process file), written as a regular expression over the name it records a failure under, to the snapshot path
patterns (relative to its own table) that the source fills. A failure is recorded under the file or call that
failed; :func:`settle` turns each one into an entry ``<path pattern> = "<class>: <detail>"`` through that table,
removes any value the collector still wrote under such a path (what was not read is never a value), and a failure
that no source declares covers the collector's whole table (``**``): an undeclared read fails closed.

Classes: ``denied`` (EACCES, EPERM, NVML NoPermission), ``missing`` (ENOENT where the file should have been: a
WQ attribute the listing named), ``timeout``, ``error`` (everything else), ``skipped``; and ``absent`` for an
absence the collector observed (NotSupported, a refusal the kernel makes by design): knowledge, which hides
nothing. The diff reads only these entries; it never guesses from names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from hoststate.paths import Path, format_path, glob_key, split_path

CLASSES = ("denied", "missing", "timeout", "error", "skipped", "absent")
#: Classes under which the value is not known (everything but an observed absence).
UNKNOWN = frozenset(CLASSES) - {"absent"}

_BY_REASON = {
    "EACCES": "denied", "EPERM": "denied", "NoPermission": "denied", "InsufficientPermissions": "denied",
    "ENOENT": "missing", "ENOTDIR": "missing", "NotFound": "missing",
    "ETIMEDOUT": "timeout", "Timeout": "timeout", "timeout": "timeout",
    "NotSupported": "absent",
    "NotInTree": "skipped",  # left out by design: a source a captured tree (--root) cannot give
}
#: What snapshots written before classes were recorded meant by these bare reasons: the thing does not exist.
_LEGACY_ABSENT = frozenset({"ENOENT", "ENOTDIR", "NotSupported"})
#: Collector statuses under which nothing it would have read is known, as failure classes.
STATUS_CLASS = {"error": "error", "timeout": "timeout", "denied": "denied", "skipped": "skipped"}


def classify(reason: str) -> str:
    """The class of a recorded reason (an errno name, an NVML error name, or free text: ``error``)."""
    return _BY_REASON.get(reason.split(" ", 1)[0].rstrip(":"), "error")


class Source(NamedTuple):
    """One thing a collector reads: ``reads`` (a regular expression, matched whole, over the key a failure is
    recorded under) fills the snapshot paths ``lands`` (dotted patterns; ``{name}`` is the group of that name).
    ``absent``: a failure of this class here is an observed absence (the kernel's refusal by design)."""

    reads: str
    lands: tuple[str, ...]
    absent: tuple[str, ...] = ()

    def match(self, key: str) -> re.Match[str] | None:
        return _compiled(self.reads).fullmatch(key)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(expr: str) -> re.Pattern[str]:
    if expr not in _CACHE:
        _CACHE[expr] = re.compile(expr)
    return _CACHE[expr]


def source(reads: str, *lands: str, absent: tuple[str, ...] = ()) -> Source:
    return Source(reads, lands, absent)


def _fill(template: str, groups: Mapping[str, str]) -> Path:
    """A dotted template with each ``{name}`` replaced by the captured text (a captured key may hold dots); a
    part whose captured text no pattern can spell (empty, or holding ``*``) becomes ``*``: any key there."""
    out: list[str] = []
    for part in template.split("."):
        used = [groups[name] for name in re.findall(r"\{(\w+)\}", part)]
        if any("*" in value or not value for value in used):
            out.append("*")
        else:
            out.append(re.sub(r"\{(\w+)\}", lambda m: groups[m[1]], part))
    return tuple(out)


_GLOB_SAFE = re.compile(r"[A-Za-z0-9_*-]+")


def format_pattern(parts: Path) -> str:
    """A path pattern as text: wildcard keys (``*``, ``**``, ``ab*``) bare, every other key as format_path
    writes it (a key with dots or quotes quoted), so that split_path gives the same parts back."""
    return ".".join(p if "*" in p and _GLOB_SAFE.fullmatch(p) else format_path((p,)) for p in parts)


def lands(sources: Iterable[Source], key: str) -> tuple[list[Path], Source | None]:
    """The snapshot paths a failure recorded under ``key`` hides, and the source that declares it; the whole
    table (``**``) and None when no source does."""
    for src in sources:
        m = src.match(key)
        if m is not None:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            return [_fill(t, groups) for t in src.lands], src
    return [("**",)], None


UNDECLARED = " (not a declared source)"
#: Between the failures of one path (several files may fill one value: a governor read from every CPU).
SEP = " | "
_ENTRY = re.compile(r"(?P<cls>[a-z]+): (?P<reason>.*) \[(?P<key>.*)\](?P<undeclared> \(not a declared source\))?",
                    re.DOTALL)


def entry(cls: str, reason: str, key: str, declared: bool = True) -> str:
    """An ``unreadable`` value: ``denied: EACCES [sys/bus/dsa/devices]`` (class, reason, what failed)."""
    return f"{cls}: {reason} [{key}]" + ("" if declared else UNDECLARED)


def parse_entry(value: Any) -> tuple[str, str]:
    """(class, detail) of an ``unreadable`` value; a value written before classes were recorded (a bare errno or
    NVML error name) is classified by that name, ENOENT and NotSupported as the absences they then recorded."""
    text = str(value)
    head, sep, rest = text.partition(": ")
    if sep and head in CLASSES:
        return head, rest
    return ("absent" if text in _LEGACY_ABSENT else classify(text)), text


def described(unreadable: Any) -> str:
    """How a section's entries read in a one-line summary: ``  2 unreadable, 3 not present`` (observed absences,
    such as NotSupported, are not failures), or ``""``."""
    if not isinstance(unreadable, Mapping) or not unreadable:
        return ""
    classes = [parse_entry(value)[0] for value in unreadable.values()]
    absent = sum(1 for cls in classes if cls not in UNKNOWN)
    skipped = classes.count("skipped")
    failed = len(classes) - absent - skipped
    parts = [f"{failed} unreadable"] if failed else []
    parts += [f"{skipped} skipped"] if skipped else []
    parts += [f"{absent} not present"] if absent else []
    return "  " + ", ".join(parts)


def failures(unreadable: Mapping[str, Any]) -> dict[str, str]:
    """What failed -> its reason (``sys/bus/dsa/devices`` -> ``EACCES``), from a section's entries."""
    out: dict[str, str] = {}
    for key, value in unreadable.items():
        for one in str(value).split(SEP):
            m = _ENTRY.fullmatch(one)
            if m is None:
                out[str(key)] = one  # an older snapshot's entry: keyed by what failed already
            else:
                out.setdefault(m["key"], m["reason"])
    return out


def settle(sources: Iterable[Source], raw: Mapping[str, str]) -> dict[str, str]:
    """Failures by source (``raw``: key -> reason) as entries by snapshot path pattern."""
    sources = tuple(sources)
    out: dict[str, str] = {}
    for key, reason in raw.items():
        cls = classify(reason)
        paths, src = lands(sources, key)
        if src is not None and cls != "absent" and reason.split(" ", 1)[0] in src.absent:
            cls = "absent"
        for path in paths:
            name = format_pattern(path)
            new = entry(cls, reason, key, src is not None)
            if name not in out:
                out[name] = new
            elif parse_entry(out[name])[0] == "absent" and cls != "absent":
                out[name] = f"{new}{SEP}{out[name]}"  # the class of the first failure is the entry's
            else:
                out[name] = f"{out[name]}{SEP}{new}"
    return out


def patterns(unreadable: Mapping[str, Any], unknown_only: bool = True) -> list[tuple[Path, str, str]]:
    """(path pattern, class, detail) of each entry, optionally only those that hide a value."""
    out = []
    for key, value in unreadable.items():
        cls, detail = parse_entry(value)
        if unknown_only and cls not in UNKNOWN:
            continue
        try:
            parts = split_path(str(key)) if key != "**" else ("**",)
        except ValueError:
            parts = ("**",)  # an entry that is no path (an older snapshot's file name) hides the whole table
        if "/" in str(key):
            parts = ("**",)
        out.append((parts, cls, detail))
    return out


def covers(parts: Path, path: Path) -> bool:
    """Whether the entry ``parts`` hides ``path``: ``path`` is at or below it, ``*`` stands for any one key,
    ``ab*`` for one key of that glob, ``**`` for anything below (empty keys included: no key escapes)."""

    for i, part in enumerate(parts):
        if part == "**":
            return True
        if i >= len(path):
            return False
        key = path[i]
        if part == "*" or key == part:
            continue
        if "*" in part and glob_key(tuple(part.split("*")), key):
            continue
        return False
    return True


def prune(data: dict[str, Any], hidden: Iterable[Path]) -> dict[str, Any]:
    """``data`` without any value under a hidden path (a collector must not write a guess, such as
    ``present = false`` for a file it could not stat, where it could not read)."""
    hidden = list(hidden)
    if not hidden:
        return data

    def walk(table: dict[str, Any], prefix: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in table.items():
            path = (*prefix, key)
            if any(covers(p, path) for p in hidden):
                continue
            out[key] = walk(value, path) if isinstance(value, dict) else value
        return out

    return walk(data, ())
