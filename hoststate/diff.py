"""Compare two snapshots under a policy: every changed leaf becomes a Finding rated by the first matching rule.

DeepDiff finds where the two trees differ; this module turns its report into leaf findings (a list is one leaf,
a table added or removed is each of its leaves), applies the policy (severity, tolerance, set-vs-sequence lists),
and treats the bookkeeping tables specially: ``collectors.<name>.status`` gives *coverage* findings, and a value
missing on the side whose collector could not read it is *unreadable*, not removed, and rated by its rule as if it
had changed (fail closed). Pure: no I/O, no click.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.paths import Path, format_path, get, leaves, split_path
from hoststate.policy import RANK, SEVERITIES, Policy, Rule, default_policy
from hoststate.snapshot import jsonable

CHANGES = ("changed", "added", "removed", "unreadable", "coverage")
VERDICTS = ("invalidating", "warning", "clean")
#: Tables that describe the snapshot, not the host; compared by the policy's hoststate.* rules or specially.
BOOKKEEPING = ("hoststate", "collectors")
COVERAGE_RULE = "coverage"


@dataclass
class Finding:
    path: str
    change: str
    old: Any
    new: Any
    severity: str
    rule: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "change": self.change,
            "old": jsonable(self.old),
            "new": jsonable(self.new),
            "severity": self.severity,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass
class DiffResult:
    findings: list[Finding]
    verdict: str
    counts: dict[str, int] = field(default_factory=dict)

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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _within_tolerance(rule: Rule | None, old: Any, new: Any) -> bool:
    """|new - old| <= tolerance * |old|: relative to the baseline, the side a reviewer trusts."""
    if rule is None or rule.tolerance is None or not (_is_number(old) and _is_number(new)):
        return False
    return abs(new - old) <= rule.tolerance * abs(old)


# -- DeepDiff --------------------------------------------------------------------------------------------------

_OPTIONAL_PROBES = ("numpy", "pydantic")


def _deepdiff_class() -> Any:
    """DeepDiff, imported lazily.

    DeepDiff probes for numpy and pydantic at import (about 130 ms) to support their types; snapshots only hold
    TOML types, so in the `hoststate` command's own process, when neither is loaded yet, they are hidden during
    that import. A library caller's process is never touched: its DeepDiff keeps numpy and pydantic support.
    """
    import hoststate

    if "deepdiff" in sys.modules:
        return sys.modules["deepdiff"].DeepDiff
    if not hoststate.IN_CLI:
        from deepdiff import DeepDiff

        return DeepDiff
    hidden = [name for name in _OPTIONAL_PROBES if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import name` raise ImportError
    try:
        from deepdiff import DeepDiff
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    return DeepDiff


def _equal_leaf(a: Any, b: Any) -> bool:
    """Whether two leaves are the same typed value (see leaf_key); plain == for the common exact types."""
    if type(a) is type(b) and type(a) in (str, int, bool):
        return bool(a == b)
    return leaf_key(a) == leaf_key(b)


def _token(value: Any) -> str:
    """What DeepDiff is shown for a leaf: a fixed-size fingerprint, never the value itself.

    A list is one leaf, so DeepDiff never descends into it (its sequence diff is quadratic in the list lengths);
    and the fingerprint follows leaf_key, so DeepDiff's own notion of equality (1 == 1.0 == True, -0.0 == 0.0)
    can never hide a difference.
    """
    import hashlib

    return hashlib.sha256(leaf_key(value).encode("utf-8")).hexdigest()


def _prune(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both tables without the keys whose values are equal, every remaining leaf replaced by its _token.

    DeepDiff spends about 0.1 ms of bookkeeping per table it walks; two snapshots of one host are equal almost
    everywhere, so dropping equal subtrees first keeps a diff of 8-GPU snapshots in milliseconds.
    """

    def shadow(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: shadow(v) for k, v in value.items()}
        return _token(value)

    out_a: dict[str, Any] = {}
    out_b: dict[str, Any] = {}
    for key in a.keys() | b.keys():
        if key not in b:
            out_a[key] = shadow(a[key])
        elif key not in a:
            out_b[key] = shadow(b[key])
        elif isinstance(a[key], Mapping) and isinstance(b[key], Mapping):
            sub_a, sub_b = _prune(a[key], b[key])
            if sub_a or sub_b:
                out_a[key], out_b[key] = sub_a, sub_b
        elif isinstance(a[key], Mapping) or isinstance(b[key], Mapping) or not _equal_leaf(a[key], b[key]):
            out_a[key], out_b[key] = shadow(a[key]), shadow(b[key])
    return out_a, out_b


#: How differing paths are found: "deepdiff" (DeepDiff over the pruned trees) or "walk" (the pruned trees
#: themselves). Both give the same paths (tests check it); "walk" saves DeepDiff's import (see bench_diff.py).
ENGINE = "deepdiff"


def _walk_paths(base: Mapping[str, Any], cur: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    for key in base.keys() | cur.keys():
        a, b = base.get(key), cur.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            yield from _walk_paths(a, b, (*prefix, key))
        else:
            yield (*prefix, key)


def _touched(baseline: Mapping[str, Any], current: Mapping[str, Any], engine: str | None = None) -> set[Path]:
    """Paths where the trees differ (a list is one leaf: DeepDiff only sees fingerprints of leaves)."""
    base, cur = _prune(baseline, current)
    if not base and not cur:
        return set()  # equal: DeepDiff is not even imported
    if (engine or ENGINE) == "walk":
        return set(_walk_paths(base, cur))
    deep_diff = _deepdiff_class()
    # threshold_to_diff_deeper=0: never report a whole table as changed because its two sides share few keys
    # (DeepDiff >= 8 does that below 33 % shared keys, which would hide every leaf of it).
    tree = deep_diff(base, cur, view="tree", ignore_order=False, cache_size=0, get_deep_distance=False,
                     verbose_level=2, threshold_to_diff_deeper=0)
    paths: set[Path] = set()
    for report in tree.values():
        for level in report:
            parts = level.path(output_format="list")
            cut = next((i for i, key in enumerate(parts) if not isinstance(key, str)), len(parts))
            if cut:
                paths.add(tuple(parts[:cut]))
            else:  # the root itself: every top-level key, so that no leaf is lost
                paths.update((key,) for key in base.keys() | cur.keys())
    return paths


def _leaves_at(data: Mapping[str, Any], path: Path) -> dict[Path, Any]:
    """The leaves at or under ``path``: one entry for a scalar or list, every leaf for a table, none if absent."""
    missing = object()
    value = get(data, path, missing)
    if value is missing:
        return {}
    if isinstance(value, Mapping):
        return dict(leaves(value, path))
    return {path: value}


# -- coverage and unreadable -----------------------------------------------------------------------------------


#: Reasons that say the thing does not exist (a kernel without cpufreq, a GPU without the feature): that is
#: knowledge, so a value the other side had is removed, not unreadable.
ABSENCE_REASONS = ("ENOENT", "NotSupported")
#: Collector statuses under which nothing it would have read is known.
UNKNOWN_STATUSES = ("error", "timeout", "denied", "skipped")


def _status(snap: Mapping[str, Any], name: str) -> str | None:
    entry = snap.get("collectors", {}).get(name)
    return entry.get("status") if isinstance(entry, Mapping) else None


def _is_instance_key(key: str) -> bool:
    """A key naming one instance (dsa0, wq0.0, GPU-<uuid>, engine2.1), as opposed to a table name (wqs, nvlink)."""
    return any(c.isdigit() for c in key)


def _covers(unreadable_key: str, rel: Path) -> bool:
    """Whether an ``unreadable`` entry accounts for the snapshot path ``rel`` (below the collector's table).

    Entries are either dotted snapshot paths (``devices.dsa0.clients``) or what the collector could not read,
    named as it read it: a file under the root (``sys/bus/dsa/devices/dsa0/wq0.1/priority``) or an NVML field
    (``GPU-<uuid>/power_limit_mw``). A file entry covers a path when its last component is one of the path's
    keys and every instance key before that one (dsa0, wq0.1, the GPU's UUID) is among its components.
    """
    try:
        listed = split_path(unreadable_key)
    except ValueError:
        listed = ()
    if listed and rel[: len(listed)] == listed:
        return True
    parts = [p for p in unreadable_key.split("/") if p]
    if not parts:
        return False
    components = set(parts)
    # A file names a key as it is (wq0.1/priority), or two keys joined (numa_balancing for numa.balancing), or a
    # key is the file's last two components joined (intel_pstate/max_perf_pct for intel_pstate_max_perf_pct).
    names = {parts[-1]} | ({f"{parts[-2]}_{parts[-1]}"} if len(parts) > 1 else set())
    for i, key in enumerate(rel):
        joined = {key} | ({f"{rel[i - 1]}_{key}"} if i else set())
        if names & joined and all(k in components for k in rel[:i] if _is_instance_key(k)):
            return True
    return False


def _unreadable_why(snap: Mapping[str, Any], path: Path) -> str | None:
    """Why ``path`` has no value in ``snap`` when its collector says it could not read it, else None.

    A value counts as unreadable when the collector lists that path (relative to its table) or a table above it
    as unreadable, or when the collector did not get to read (error, timeout, denied, skipped). ``absent`` is
    knowledge, not a gap: the collector looked and found nothing (no DSA device, no driver, no server), so a value
    the baseline had is *removed* and rated by its rule; ``partial`` marks only the paths it lists.
    """
    name = path[0]
    entry = snap.get("collectors", {}).get(name)
    if not isinstance(entry, Mapping):
        return None
    rel = path[1:]
    for key, why in (entry.get("unreadable") or {}).items():
        if str(why) not in ABSENCE_REASONS and _covers(str(key), rel):
            return str(why)
    status = entry.get("status")
    if status in UNKNOWN_STATUSES:
        reason = entry.get("reason")
        return f"collector {name} {status}" + (f": {reason}" if reason else "")
    return None


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


def _rate(policy: Policy, path: Path) -> tuple[str, str, str, Rule | None]:
    rule = policy.rule_for(path)
    if rule is None:
        return "warning", "", "Not classified by the policy.", None
    return rule.severity, rule.path, rule.reason, rule


def _finding(policy: Policy, path: Path, old: Any, new: Any, baseline: Mapping[str, Any],
             current: Mapping[str, Any], missing: object) -> Finding | None:
    severity, pattern, reason, rule = _rate(policy, path)
    if old is not missing and new is not missing:
        if _same(old, new, rule):
            return None
        if _within_tolerance(rule, old, new):
            reason = f"Within tolerance ({rule.tolerance:g} relative to the baseline): {reason}"  # type: ignore[union-attr]
            severity = "ignore"
        return Finding(format_path(path), "changed", old, new, severity, pattern, reason)
    if new is missing:
        why = _unreadable_why(current, path)
        if why is not None:
            return Finding(format_path(path), "unreadable", old, f"<unreadable: {why}>",
                           severity, pattern, _UNREADABLE.format(side="current snapshot", reason=reason))
        return Finding(format_path(path), "removed", old, None, _one_side(rule, severity), pattern, reason)
    why = _unreadable_why(baseline, path)
    if why is not None:
        return Finding(format_path(path), "unreadable", f"<unreadable: {why}>", new, severity,
                       pattern, _UNREADABLE.format(side="baseline", reason=reason))
    return Finding(format_path(path), "added", None, new, _one_side(rule, severity), pattern, reason)


def _one_side(rule: Rule | None, severity: str) -> str:
    """A value present on one side only is rated by the rule's ``one_side`` severity when it has one."""
    return rule.one_side if rule is not None and rule.one_side else severity


#: An unreadable value is rated by its rule as if it had changed: what could not be read is not known to match,
#: so an invalidating one makes `diff` exit 1 and `guard` refuse (fail closed) unless it is accepted.
_UNREADABLE = "Not readable in the {side}, so not known to be unchanged; rated as a change: {reason}"


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
    missing = object()
    findings = _coverage(baseline, current)
    seen: set[Path] = set()
    for path in _touched(base, cur):
        old_leaves, new_leaves = _leaves_at(base, path), _leaves_at(cur, path)
        for leaf in old_leaves.keys() | new_leaves.keys():
            if leaf in seen:
                continue
            seen.add(leaf)
            found = _finding(policy, leaf, old_leaves.get(leaf, missing), new_leaves.get(leaf, missing),
                             baseline, current, missing)
            if found is not None:
                findings.append(found)
    counts = {s: 0 for s in SEVERITIES}
    for f in findings:
        counts[f.severity] += 1
    if not include_ignored:
        findings = [f for f in findings if f.severity != "ignore"]
    findings.sort(key=lambda f: (RANK[f.severity], f.path))
    verdict = "invalidating" if counts["invalidating"] else "warning" if counts["warning"] else "clean"
    return DiffResult(findings, verdict, counts)
