"""Compare two snapshots under a policy: every changed leaf becomes a Finding rated by the most specific matching rule.

DeepDiff finds where the two trees differ; this module turns its report into leaf findings (a list is one leaf,
a table added or removed is each of its leaves), applies the policy (severity, tolerance, set-vs-sequence lists),
and treats the bookkeeping tables specially: ``collectors.<name>.status`` gives *coverage* findings, and a value
missing on the side whose collector could not read it is *unreadable*, not removed, and rated by its rule as if it
had changed (fail closed). Pure: no I/O, no click.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

from hoststate import coverage
from hoststate.gcpause import paused
from hoststate.paths import Path, PatternIndex, format_path, get, leaves, split_path
from hoststate.policy import RANK, SEVERITIES, Policy, Rule, _meets, compile_pattern, default_policy
from hoststate.records import Record
from hoststate.snapshot import jsonable

CHANGES = ("changed", "added", "removed", "unreadable", "coverage")
VERDICTS = ("invalidating", "warning", "clean")
#: Tables that describe the snapshot, not the host; compared by the policy's hoststate.* rules or specially.
BOOKKEEPING = ("hoststate", "collectors")
COVERAGE_RULE = "coverage"


#: A finding's fields, in to_dict's order.
FIELDS = ("path", "change", "old", "new", "severity", "rule", "reason")


@functools.lru_cache(maxsize=4096)
def _rating(change: str, severity: str, rule: str, reason: str) -> tuple[str, str, str, str]:
    """The one tuple of every finding rated alike (a reason written for one finding is shared by none and only
    passes through the cache)."""
    return (change, severity, rule, reason)


class Finding:
    """One leaf that differs: its path, the two values, and how it is rated (change, severity, rule, reason) held
    as one tuple that the findings rated alike share. A finding is then four references instead of seven: a diff
    at the input cap holds one for each of 396,000 leaves, and the 32 bytes less each keep it under 200 MB."""

    __slots__ = ("path", "old", "new", "rating")

    def __init__(self, path: str, change: str, old: Any, new: Any, severity: str, rule: str, reason: str):
        self.path, self.old, self.new = path, old, new
        self.rating = _rated(change, severity, rule, reason)

    @property
    def change(self) -> str:
        return self.rating[0]

    @change.setter
    def change(self, value: str) -> None:
        self.rating = _rated(value, *self.rating[1:])

    @property
    def severity(self) -> str:
        return self.rating[1]

    @severity.setter
    def severity(self, value: str) -> None:
        self.rating = _rated(self.rating[0], value, *self.rating[2:])

    @property
    def rule(self) -> str:
        return self.rating[2]

    @rule.setter
    def rule(self, value: str) -> None:
        self.rating = _rated(*self.rating[:2], value, self.rating[3])

    @property
    def reason(self) -> str:
        return self.rating[3]

    @reason.setter
    def reason(self, value: str) -> None:
        self.rating = _rated(*self.rating[:3], value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return (self.path, self.old, self.new, self.rating) == (other.path, other.old, other.new, other.rating)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq

    def __repr__(self) -> str:
        return "Finding(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELDS) + ")"

    def values(self) -> tuple[Any, ...]:
        """The fields' values in FIELDS order."""
        change, severity, rule, reason = self.rating
        return self.path, change, self.old, self.new, severity, rule, reason

    def to_dict(self) -> dict[str, Any]:
        return {name: jsonable(value) for name, value in zip(FIELDS, self.values(), strict=True)}


def _rated(change: str, severity: str, rule: str, reason: str) -> tuple[str, str, str, str]:
    try:
        return _rating(change, severity, rule, reason)
    except TypeError:  # a value that cannot be hashed (read from another tool's JSON) is not shared
        return (change, severity, rule, reason)


class DiffResult(Record):
    """The findings of one comparison (ignored ones left out), its verdict and the count of each severity."""

    def __init__(self, findings: list[Finding], verdict: str, counts: dict[str, int] | None = None) -> None:
        self.findings = findings
        self.verdict = verdict
        self.counts: dict[str, int] = {} if counts is None else counts

    def to_dict(self, baseline: str, current: str) -> dict[str, Any]:
        """design.md's JSON report shape."""
        return {
            "baseline": baseline,
            "current": current,
            "verdict": self.verdict,
            "counts": {s: self.counts.get(s, 0) for s in SEVERITIES},
            "findings": [f.to_dict() for f in self.findings],
        }


def _typed(value: Any) -> Any:
    """A value as JSON with its TOML type spelled out: 1, 1.0, true, "1", a datetime and its text all differ."""
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", repr(value)]  # tells -0.0 from 0.0; NaN equals NaN, as in the digest
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return [type(value).__name__, value.isoformat()]
    if isinstance(value, list | tuple):
        return ["array", [_typed(v) for v in value]]
    if isinstance(value, Mapping):
        return ["table", {str(k): _typed(v) for k, v in value.items()}]
    return [type(value).__name__, repr(value)]


def leaf_key(value: Any) -> str:
    """Canonical typed text of a leaf: two leaves are the same value exactly when their keys are equal."""
    return json.dumps(_typed(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _same(old: Any, new: Any, rule: Rule | None) -> bool:
    if isinstance(old, list) and isinstance(new, list) and rule is not None and rule.compare == "set":
        return sorted(map(leaf_key, old)) == sorted(map(leaf_key, new))
    return _equal_leaf(old, new)


def _equal_leaf(a: Any, b: Any) -> bool:
    """Whether two leaves are the same typed value (see leaf_key); plain == for the common exact types."""
    if type(a) is type(b) and type(a) in (str, int, bool):
        return bool(a == b)
    return leaf_key(a) == leaf_key(b)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _within_tolerance(rule: Rule | None, old: Any, new: Any) -> str | None:
    """How a change is within the rule's tolerance, else None: |new - old| <= tolerance * |old| (relative to the
    baseline, the side a reviewer trusts, never to the larger value) or <= absolute (in the value's unit)."""
    if rule is None or not (_is_number(old) and _is_number(new)):
        return None
    if rule.tolerance is not None and abs(new - old) <= rule.tolerance * abs(old):
        return f"{rule.tolerance:g} relative to the baseline"
    if rule.absolute is not None and abs(new - old) <= rule.absolute:
        return f"{rule.absolute:g} absolute from the baseline {old:g}"
    return None


def _above_floor(rule: Rule | None, *values: Any) -> bool:
    """Whether every value given (those present) is a number at or above the rule's floor: a size that is enough
    on both sides."""
    if rule is None or rule.floor is None:
        return False
    return all(_is_number(v) and v >= rule.floor for v in values)


# -- ratings that read other facts ------------------------------------------------------------------------------


def _evidence(pattern: str, snap: Mapping[str, Any], regions: Regions) -> dict[Path, Any] | None:
    """The leaves matching ``pattern`` in one snapshot; None when there are none or a region that could hold one
    is unknown (the evidence is not there to read)."""
    parts = split_path(pattern)
    if any(_meets(parts, (*r.parts, "**")) for r in regions.all):
        return None
    matcher = compile_pattern(parts)
    lead = parts[:next((i for i, part in enumerate(parts) if "*" in part), len(parts))]  # only below these keys
    node = get(snap, lead, _NOTHING)
    below = leaves(node, lead) if isinstance(node, Mapping) else [] if node is _NOTHING else [(lead, node)]
    found = {p: v for p, v in below if matcher.match(p)}
    return found or None


_NOTHING = object()


class Evidence:
    """The leaves that rate other changes (a rule's ``rated_by`` or ``listed_in``), read once per pattern for one
    comparison: many findings may be rated by one pattern (every patch release of a package), and reading the
    snapshots again for each would make a diff quadratic in its input."""

    def __init__(self, sides: tuple[Mapping[str, Any], Mapping[str, Any]], unknown: tuple[Regions, Regions]):
        self._sides, self._unknown = sides, unknown
        self._read: dict[str, tuple[dict[Path, Any], dict[Path, Any]] | None] = {}
        self._names: dict[str, frozenset[str] | None] = {}
        self._same: dict[str, int | None] = {}

    def both(self, pattern: str) -> tuple[dict[Path, Any], dict[Path, Any]] | None:
        """The evidence of both sides, or None when either side has none to read."""
        if pattern not in self._read:
            old = _evidence(pattern, self._sides[0], self._unknown[0])
            new = _evidence(pattern, self._sides[1], self._unknown[1]) if old is not None else None
            self._read[pattern] = None if old is None or new is None else (old, new)
        return self._read[pattern]

    def same(self, pattern: str) -> int | None:
        """How many leaves are at ``pattern`` when they are the same on both sides, else None (they differ, or
        either side has none to read)."""
        if pattern not in self._same:
            both = self.both(pattern)
            equal = both is not None and both[0].keys() == both[1].keys() and all(
                _equal_leaf(both[0][k], both[1][k]) for k in both[0])
            self._same[pattern] = len(both[0]) if both is not None and equal else None
        return self._same[pattern]

    def inert(self, path: Path, key: str, values: frozenset[str]) -> str | None:
        """The value that leaves the setting at ``path`` out of effect (``Rule.inert_if``): the leaf ``key`` of the
        nearest table above ``path`` that has one, reading one of ``values`` on both sides; else None (it reads
        otherwise, or is unknown on either side: the rule stands)."""
        for depth in range(len(path) - 1, 0, -1):
            at = (*path[:depth], key)
            old, new = (get(side, at, _NOTHING) for side in self._sides)
            if old is _NOTHING and new is _NOTHING:
                continue
            if any(regions.why(at) for regions in self._unknown):
                return None
            both = isinstance(old, str) and isinstance(new, str) and old in values and new in values
            return old if both else None  # type: ignore[return-value]
        return None

    def listed(self, pattern: str) -> frozenset[str] | None:
        """The strings listed (in list values) at ``pattern`` on either side, or None when either side has no
        evidence there or neither holds a list."""
        if pattern not in self._names:
            both = self.both(pattern)
            lists = [v for side in both for v in side.values() if isinstance(v, list)] if both else []
            self._names[pattern] = frozenset(x for v in lists for x in v if isinstance(x, str)) if lists else None
        return self._names[pattern]


def _evidence_rating(finding: Finding, rule: Rule | None, evidence: Evidence, path: Path) -> Finding:
    """A change rated by what it did elsewhere: ``rated_by`` (the leaves that show its effect, equal on both
    sides), ``listed_in`` (a package that neither side's serving path names, moved by a patch release only) or
    ``inert_if`` (a setting of a work queue disabled on both sides). ``path``: the finding's leaf."""
    if rule is None or finding.change == "unreadable" or finding.severity == "ignore":
        return finding
    key = path[-1]
    if rule.when_inert and (inert := rule.inert()) and (value := evidence.inert(path, *inert)) is not None:
        finding.rating = _reworded(finding.rating, rule.when_inert, _INERT, inert[0], value)
        return finding
    if rule.rated_by and rule.when_same and (same := evidence.same(rule.rated_by)) is not None:
        finding.rating = _reworded(finding.rating, rule.when_same, _SAME_AT, rule.rated_by, same)
    if (rule.listed_in and rule.unlisted_patch and finding.change == "changed"
            and _patch_only(finding.old, finding.new) and (listed := evidence.listed(rule.listed_in)) is not None
            and key not in listed):
        finding.rating = _reworded(finding.rating, rule.unlisted_patch, _UNLISTED, rule.listed_in)
    return finding


_INERT = "Not in effect on either side ({} is {} on both): {}"
_SAME_AT = "What it changes is recorded at {} and is the same on both sides ({} values): {}"
_UNLISTED = "A patch release of a package the server does not load (not in {} on either side): {}"


def _reworded(rating: tuple[str, str, str, str], severity: str, template: str, *words: Any) -> tuple[str, ...]:
    """``rating`` with another severity and its reason put in ``template``: one tuple (and one reason string) for
    every finding so rated, not one each (a diff at the input cap may rate 320,000 packages this way)."""
    try:
        return _reworded_once(rating, severity, template, *words)
    except TypeError:  # a rating that cannot be hashed is reworded each time
        return _reworded_once.__wrapped__(rating, severity, template, *words)


@functools.lru_cache(maxsize=4096)
def _reworded_once(rating: tuple[str, str, str, str], severity: str, template: str, *words: Any) -> tuple[str, ...]:
    change, _severity, rule, reason = rating
    return _rated(change, severity, rule, template.format(*words, reason))


_VERSION = re.compile(r"(\d+(?:\.\d+)+?)\.(\d+)([^\d.].*)?")


def _patch_only(old: Any, new: Any) -> bool:
    try:
        return _patch_only_of(old, new)
    except TypeError:  # a value that cannot be hashed is no version
        return False


@functools.lru_cache(maxsize=4096)
def _patch_only_of(old: Any, new: Any) -> bool:
    """Whether two versions differ in their last dotted component only, the ones before it equal and numeric
    (``2.27.3`` -> ``2.27.5``; ``0.2.8`` -> ``0.3.0`` is not; a local suffix such as ``+cu128`` must match)."""
    if not (isinstance(old, str) and isinstance(new, str)):
        return False
    a, b = _VERSION.fullmatch(old), _VERSION.fullmatch(new)
    return bool(a and b and a[1] == b[1] and a[3] == b[3] and a[2] != b[2])


# -- the engine --------------------------------------------------------------------------------------------------


def _differing(base: Mapping[str, Any], cur: Mapping[str, Any], missing: object,
               prefix: Path = ()) -> Iterator[tuple[Path, Any, Any]]:
    """(path, old, new) for every leaf that differs between two tables (``missing`` on the side without it): a
    key on one side only gives every leaf under it, a table against a non-table every leaf of both, two leaves
    that are not the same typed value the pair. Equal subtrees are not entered past their keys; a list is one
    leaf. Every key is compared as it is: no key is private, no table too different to enter, no number close
    enough to another; one pass that hands on the values it holds, so time and memory grow with the size of the
    two trees and no leaf is looked up again."""
    for key in base.keys() | cur.keys():
        path = (*prefix, key)
        a, b = base.get(key, missing), cur.get(key, missing)
        a_table, b_table = isinstance(a, Mapping), isinstance(b, Mapping)
        if a_table and b_table:
            yield from _differing(a, b, missing, path)
        elif a_table or b_table:
            old = dict(leaves(a, path)) if a_table else {} if a is missing else {path: a}
            new = dict(leaves(b, path)) if b_table else {} if b is missing else {path: b}
            for leaf in old.keys() | new.keys():
                yield leaf, old.get(leaf, missing), new.get(leaf, missing)
        elif a is missing or b is missing or not _equal_leaf(a, b):
            yield path, a, b


# -- coverage and unreadable -----------------------------------------------------------------------------------


class Unknown(NamedTuple):
    """A region of a snapshot whose values are not known: a path (absolute; ``*`` and globs allowed; everything
    below it included) and why, from ``collectors.<name>`` (its status, or an ``unreadable`` entry)."""

    parts: Path
    cls: str
    detail: str

    def covers(self, path: Path) -> bool:
        return coverage.covers(self.parts, path)

    def why(self) -> str:
        return f"{self.cls}: {self.detail}"

    def prefix(self) -> Path:
        """The keys before the first ``**``: the region is everything at or below them (hoststate.coverage.covers
        stops at a ``**``, so ``a.**.b`` hides all of ``a``)."""
        return self.parts[:self.parts.index("**")] if "**" in self.parts else self.parts


def unknowns(snap: Mapping[str, Any]) -> list[Unknown]:
    """Every region of ``snap`` that its collectors could not read. Only what the snapshot declares counts: an
    entry the collector recorded against snapshot paths (hoststate.coverage), or a collector that did not get to
    read at all (error, timeout, denied, skipped)."""
    out: list[Unknown] = []
    collectors = snap.get("collectors")
    if not isinstance(collectors, Mapping):
        return out
    for name, entry in collectors.items():
        if not isinstance(entry, Mapping):
            continue
        status = entry.get("status")
        if status in coverage.STATUS_CLASS:
            reason = entry.get("reason")
            detail = f"collector {name} {status}" + (f": {reason}" if reason else "")
            out.append(Unknown((str(name),), coverage.STATUS_CLASS[status], detail))
            continue
        table = entry.get("unreadable")
        if isinstance(table, Mapping):
            for parts, cls, detail in coverage.patterns(table):
                out.append(Unknown((str(name), *parts), cls, detail))
    return out


class Regions:
    """The unknown regions of one snapshot, filed by their leading keys (hoststate.paths.PatternIndex), so that
    asking which one hides a path costs the path's depth, not the number of regions."""

    def __init__(self, regions: list[Unknown]):
        self.all = regions
        self._index = PatternIndex()
        for n, region in enumerate(regions):
            self._index.add(region.parts, n)

    def why(self, path: Path) -> str | None:
        """Why ``path`` has no value on this side (the first region, in the snapshot's order, that hides it),
        else None (it is absent)."""
        hits = [n for n in self._index.candidates(path) if self.all[n].covers(path)]
        return self.all[min(hits)].why() if hits else None


def _region_rating(policy: Policy, region: Unknown) -> tuple[str, str, str]:
    """The most severe rating any rule gives a path inside ``region`` (it cannot be told which paths are there),
    honouring the user's layer (Policy.region_rule); the rule and reason named never depend on rule order."""
    rule = policy.region_rule(region.prefix())
    if rule is None:
        return "warning", "", "Not classified by the policy."
    return rule.severity, rule.path, rule.reason


def _status(snap: Mapping[str, Any], name: str) -> str | None:
    entry = snap.get("collectors", {}).get(name)
    return entry.get("status") if isinstance(entry, Mapping) else None


def _coverage(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[Finding]:
    """A collector ok on one side and not on the other: its values could not be compared (warning)."""
    names = sorted(set(baseline.get("collectors", {})) | set(current.get("collectors", {})))
    out = []
    for name in names:
        old, new = _status(baseline, name), _status(current, name)
        if old == new:
            continue
        if (old == "ok") != (new == "ok"):
            severity = "warning"
            side, bad = ("current snapshot", new) if old == "ok" else ("baseline", old)
            reason = (f"Collector {name} is {bad or 'missing'} in the {side} (ok on the other side): values it did "
                      "not read cannot be compared; fix the collector or re-snap.")
        else:
            severity = "info"
            reason = f"Collector {name} status changed between two non-ok states; its values are not compared."
        out.append(Finding(format_path(("collectors", name, "status")), "coverage", old, new, severity,
                           COVERAGE_RULE, reason))
    return out


# -- compare -----------------------------------------------------------------------------------------------------


def _finding(rule: Rule | None, path: Path, old: Any, new: Any, unknown: tuple[Regions, Regions],
             missing: object) -> Finding | None:
    """The finding for one leaf that differs, rated by ``rule`` (the policy's winner for ``path``), or None where
    the rule takes the two values as the same."""
    if rule is None:
        severity, pattern, reason = "warning", "", "Not classified by the policy."
    else:
        severity, pattern, reason = rule.severity, rule.path, rule.reason
    if old is not missing and new is not missing:
        if _same(old, new, rule):
            return None
        within = _within_tolerance(rule, old, new)
        if within:
            reason = f"Within tolerance ({within}): {reason}"
            severity = "ignore"
        elif _above_floor(rule, old, new):
            severity, reason = rule.above_floor, f"Both at or above {rule.floor:g}: {reason}"  # type: ignore[union-attr]
        return Finding(format_path(path), "changed", old, new, severity, pattern, reason)
    if new is missing:
        why = unknown[1].why(path)
        if why is not None:
            return Finding(format_path(path), "unreadable", old, _shown(why),
                           severity, pattern, _UNREADABLE.format(side="current snapshot", reason=reason))
        if _above_floor(rule, old):
            severity, reason = rule.above_floor, f"At or above {rule.floor:g}: {reason}"  # type: ignore[union-attr]
        return Finding(format_path(path), "removed", old, None, _one_side(rule, severity), pattern, reason)
    why = unknown[0].why(path)
    if why is not None:
        return Finding(format_path(path), "unreadable", _shown(why), new, severity,
                       pattern, _UNREADABLE.format(side="baseline", reason=reason))
    if _above_floor(rule, new):
        severity, reason = rule.above_floor, f"At or above {rule.floor:g}: {reason}"  # type: ignore[union-attr]
    return Finding(format_path(path), "added", None, new, _one_side(rule, severity), pattern, reason)


def _shown(why: str) -> str:
    """How an unknown value is shown: ``<unreadable (denied): EACCES sys/bus/dsa>``."""
    cls, _, detail = why.partition(": ")
    return f"<unreadable ({cls}): {detail}>"


def _regions(policy: Policy, unknown: tuple[Regions, Regions]) -> list[Finding]:
    """Fail closed where values are not known: every region unknown on either side is one finding, rated as the
    most severe rule inside it, whatever either side holds there (a value the other side holds is compared leaf
    by leaf as well, but cannot vouch for the paths it does not hold)."""
    out: list[Finding] = []
    seen: set[str] = set()
    for side, regions in enumerate(unknown):
        for region in regions.all:
            parts = region.prefix()
            path = coverage.format_pattern(parts)
            if path in seen:
                continue
            seen.add(path)
            severity, rule, reason = _region_rating(policy, region)
            other = unknown[1 - side].why(parts)
            old = _shown(region.why()) if side == 0 else (_shown(other) if other else None)
            new = _shown(region.why()) if side == 1 else (_shown(other) if other else None)
            if region.cls == "skipped" and other is not None and other.startswith("skipped: "):
                out.append(Finding(path, "unreadable", old, new, "info", rule, _SKIPPED_BOTH))
                continue
            sides = "either snapshot" if other else ("the baseline" if side == 0 else "the current snapshot")
            out.append(Finding(path, "unreadable", old, new, severity, rule,
                               f"Not readable in {sides}, so it cannot be told whether anything here changed; "
                               f"rated as the most severe rule inside: {reason}"))
    return out


def _merge(findings: list[Finding], regions: list[Finding]) -> list[Finding]:
    """The leaf findings and the region findings, one per path: a region that is a single leaf held on a side
    keeps that leaf's values, is ``unreadable`` (a side declares it unknown, whatever it holds there), and is
    rated by the more severe of the two."""
    by_path = {f.path: f for f in regions}
    for n, found in enumerate(findings):
        region = by_path.pop(found.path, None)
        if region is None:
            continue
        rated = region if RANK[region.severity] < RANK[found.severity] else found
        findings[n] = Finding(found.path, "unreadable", found.old, found.new, rated.severity, rated.rule,
                              rated.reason)
    return findings + list(by_path.values())


#: Both snapshots left the region out by scope (--only/--skip, or a source a captured tree cannot give): neither
#: makes a claim there, so nothing is compared and nothing refuses (info: context for the reader); a read that
#: failed on either side does refuse.
_SKIPPED_BOTH = ("Skipped in both snapshots (not selected, or not readable from a captured tree): neither makes a "
                 "claim here, so nothing is compared; read it on both sides to compare it.")


def _one_side(rule: Rule | None, severity: str) -> str:
    """A value present on one side only is rated by the rule's ``one_side`` severity when it has one."""
    return rule.one_side if rule is not None and rule.one_side else severity


#: An unreadable value is rated by its rule as if it had changed: what could not be read is not known to match,
#: so an invalidating one makes `diff` exit 1 and `guard` refuse (fail closed) unless it is accepted.
_UNREADABLE = "Not readable in the {side}, so not known to be unchanged; rated as a change: {reason}"


@paused()
def compare(baseline: Mapping[str, Any], current: Mapping[str, Any], policy: Policy | None = None, *,
            include_ignored: bool = False) -> DiffResult:
    """Findings for every leaf that differs between two snapshots, rated by ``policy`` (None: the default).

    GPUs are paired by position (hoststate.positions): finding paths name them by PCI bus id, or ``GPU<index>``.
    """
    from hoststate.positions import align

    policy = policy or default_policy()
    baseline, current = align(baseline, current)  # GPUs by position, not by UUID
    base = {k: v for k, v in baseline.items() if k != "collectors"}
    cur = {k: v for k, v in current.items() if k != "collectors"}
    unknown = (Regions(unknowns(baseline)), Regions(unknowns(current)))
    missing = object()
    evidence = Evidence((base, cur), unknown)
    findings = _coverage(baseline, current)
    for leaf, old, new in _differing(base, cur, missing):  # disjoint subtrees: no leaf is reached twice
        rule = policy.rule_for(leaf)
        found = _finding(rule, leaf, old, new, unknown, missing)
        if found is not None:
            findings.append(_evidence_rating(found, rule, evidence, leaf))
    findings = _merge(findings, _regions(policy, unknown))
    from hoststate.policy import unmatched_reason, unmatched_rules  # a misspelt user rule must not do nothing

    findings.extend(Finding(format_path(("policy", r.origin, r.path)), "coverage", None, None, "warning",
                            COVERAGE_RULE, unmatched_reason(r)) for r in unmatched_rules(policy.user_rules, base, cur))
    counts = {s: 0 for s in SEVERITIES}
    for f in findings:
        counts[f.rating[1]] += 1
    if not include_ignored:
        findings = [f for f in findings if f.rating[1] != "ignore"]
    # Stable passes, no key tuple per finding: by (change, severity, rule, reason), then path, then severity, which
    # orders by (severity, path, change, rule, reason), a total order.
    findings.sort(key=attrgetter("rating"))
    findings.sort(key=attrgetter("path"))
    findings.sort(key=lambda f: RANK[f.rating[1]])
    return DiffResult(findings, verdict_of(counts), counts)


def verdict_of(counts: Mapping[str, int]) -> str:
    """The verdict of findings so counted: invalidating when one is, else warning when one is, else clean."""
    return "invalidating" if counts.get("invalidating") else "warning" if counts.get("warning") else "clean"


def only(result: DiffResult, patterns: Sequence[str]) -> DiffResult:
    """The findings under ``patterns`` (policy syntax; a pattern also covers everything below it, as git's
    pathspecs do), with the verdict and counts of those findings only. ValueError on a malformed pattern."""
    compiled = [compile_pattern((*split_path(p), "**")) for p in patterns]

    def keys(f: Finding) -> Path:
        try:
            return split_path(f.path)
        except ValueError:
            return (f.path,)

    kept = [f for f in result.findings if any(c.match(keys(f)) for c in compiled)]
    counts = {s: sum(1 for f in kept if f.severity == s) for s in SEVERITIES}
    return DiffResult(kept, verdict_of(counts), counts)
