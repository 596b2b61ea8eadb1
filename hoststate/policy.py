"""Policy: data that rates each snapshot path invalidating / warning / info / ignore, with a reason.

Rules are tried in order, user files first, then the shipped ``default_policy.toml``; the first
rule whose pattern matches a path decides. In a pattern, ``*`` is exactly one key and ``**`` any
number of keys (zero included).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from hoststate.errors import PolicyError
from hoststate.io import POLICY_MAX_BYTES, read_input
from hoststate.paths import Path, split_path

SEVERITIES = ("invalidating", "warning", "info", "ignore")
RANK = {s: i for i, s in enumerate(SEVERITIES)}
DEFAULT_POLICY = "default_policy.toml"
_RULE_KEYS = {"path", "severity", "reason", "tolerance", "compare", "one_side"}


class Pattern:
    """A path pattern, matched key by key: ``*`` is exactly one (non-empty) key, ``**`` any number of (non-empty)
    keys, zero included, ``ab*`` / ``power_*_mw`` one key matching that glob, anything else one literal key.

    Matching simulates the pattern as a set of positions advanced once per key (no backtracking), so it costs
    at most keys x pattern steps whatever the number of ``*`` and ``**`` in it: a user policy cannot make a
    diff take minutes.
    """

    __slots__ = ("parts", "_items")

    def __init__(self, parts: Path):
        items: list[tuple[str, Any]] = []
        for part in parts:
            if part == "**":
                if not (items and items[-1][0] == "**"):  # '**.**' is '**'
                    items.append(("**", None))
            elif part == "*":
                items.append(("*", None))
            elif "**" in part:
                raise ValueError(f"'**' must be a whole key, not part of {part!r}")
            elif "*" in part:
                items.append(("glob", tuple(part.split("*"))))
            else:
                items.append(("key", part))
        self.parts = tuple(parts)
        self._items = tuple(items)

    def _close(self, states: set[int]) -> set[int]:
        """Positions reachable without consuming a key: a ``**`` may match none."""
        for i in sorted(states):
            while i < len(self._items) and self._items[i][0] == "**":
                i += 1
                states.add(i)
        return states

    def match(self, keys: Path) -> bool:
        items, end = self._items, len(self._items)
        states = self._close({0})
        for key in keys:
            nxt: set[int] = set()
            for i in states:
                if i == end:
                    continue
                kind, arg = items[i]
                if kind == "**":
                    if key:
                        nxt.add(i)
                elif (kind == "*" and key) or (kind == "key" and key == arg) or (kind == "glob" and glob_key(arg, key)):
                    nxt.add(i + 1)
            if not nxt:
                return False
            states = self._close(nxt)
        return end in states

    def first_key(self, key: str) -> bool:
        """Whether a path starting with ``key`` could match (the policy's per-first-key buckets)."""
        if not self._items:
            return False
        kind, arg = self._items[0]
        return (kind in ("*", "**") and bool(key)) or (kind == "key" and key == arg) or (
            kind == "glob" and glob_key(arg, key))


def glob_key(pieces: tuple[str, ...], key: str) -> bool:
    """Whether ``key`` matches the glob whose literal pieces (split at '*') are ``pieces``; greedy leftmost search,
    linear in the key (a '*' glob needs no backtracking)."""
    first, last = pieces[0], pieces[-1]
    if len(key) < len(first) + len(last) or not key.startswith(first) or not key.endswith(last):
        return False
    pos, stop = len(first), len(key) - len(last)
    for piece in pieces[1:-1]:
        found = key.find(piece, pos, stop)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def compile_pattern(pattern: Path) -> Pattern:
    """The Pattern of a split path; ValueError on a malformed key."""
    return Pattern(pattern)


@dataclass(frozen=True)
class Rule:
    path: str
    severity: str
    reason: str
    tolerance: float | None = None
    #: "set" compares a list without regard to order (a group's engine list); default "sequence".
    compare: str = "sequence"
    origin: str = ""
    pattern: Pattern | None = field(default=None, compare=False, repr=False)
    #: Severity when only one side has a value (added/removed), when it differs from ``severity``: a
    #: reading present on one side only (a log given once) is not a measured change.
    one_side: str | None = None

    def matches(self, parts: Path) -> bool:
        return self.pattern is not None and self.pattern.match(parts)


def parse_rules(doc: dict[str, Any], origin: str) -> list[Rule]:
    """Rules of one policy document; every defect raises PolicyError naming the rule."""
    unknown_top = set(doc) - {"rule"}
    if unknown_top:
        raise PolicyError(f"unknown top-level key(s) {sorted(unknown_top)}; rules go in [[rule]] tables", origin)
    raw = doc.get("rule", [])
    if not isinstance(raw, list):
        raise PolicyError("'rule' must be an array of tables ([[rule]])", origin)
    rules = []
    for n, item in enumerate(raw, 1):
        where = f"rule {n}"
        if not isinstance(item, dict):
            raise PolicyError(f"{where}: must be a table", origin)
        if "path" in item and isinstance(item["path"], str):
            shown = item["path"] if item["path"].isprintable() else repr(item["path"])  # one line, always
            where = f"rule {n} ({shown})"
        extra = set(item) - _RULE_KEYS
        if extra:
            raise PolicyError(f"{where}: unknown key(s) {sorted(extra)}", origin)
        path = item.get("path")
        if not isinstance(path, str) or not path:
            raise PolicyError(f"{where}: 'path' is missing or not a string", origin)
        severity = item.get("severity")
        if severity not in SEVERITIES:
            raise PolicyError(f"{where}: severity {severity!r} is not one of {', '.join(SEVERITIES)}", origin)
        reason = item.get("reason", "")
        if not isinstance(reason, str):
            raise PolicyError(f"{where}: 'reason' must be a string", origin)
        tolerance = item.get("tolerance")
        if tolerance is not None and not _finite_non_negative(tolerance):
            raise PolicyError(f"{where}: 'tolerance' must be a non-negative number (finite: not inf or nan), "
                              f"found {str(tolerance)[:40]}", origin)
        compare = item.get("compare", "sequence")
        if compare not in ("sequence", "set"):
            raise PolicyError(f"{where}: 'compare' must be 'sequence' or 'set'", origin)
        one_side = item.get("one_side")
        if one_side is not None and one_side not in SEVERITIES:
            raise PolicyError(f"{where}: one_side {one_side!r} is not one of {', '.join(SEVERITIES)}", origin)
        try:
            pattern = Pattern(split_path(path))
        except ValueError as err:
            raise PolicyError(f"{where}: bad pattern: {err}", origin) from err
        rules.append(
            Rule(path, severity, reason, None if tolerance is None else float(tolerance), compare, origin, pattern,
                 one_side)
        )
    return rules


def _finite_non_negative(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)  # an integer beyond a float's range overflows
    except OverflowError:
        return False
    return math.isfinite(number) and number >= 0


class Policy:
    """An ordered rule list, matched fast: rules are bucketed by the path's first key (only rules whose first
    pattern key can match it), the first rule of the bucket that matches wins, as in a linear scan, and results
    are cached per path (snapshots repeat paths across GPUs and WQs)."""

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self._cache: dict[Path, Rule | None] = {}
        self._buckets: dict[str, list[Rule]] = {}

    def _bucket(self, first: str) -> list[Rule]:
        if first not in self._buckets:
            self._buckets[first] = [r for r in self.rules if r.pattern is not None and r.pattern.first_key(first)]
        return self._buckets[first]

    def rule_for(self, parts: Path) -> Rule | None:
        try:
            return self._cache[parts]
        except KeyError:
            pass
        rules = self._bucket(parts[0]) if parts else []
        rule = self._cache[parts] = next((r for r in rules if r.matches(parts)), None)
        return rule

    def severity(self, parts: Path) -> str:
        rule = self.rule_for(parts)
        return rule.severity if rule else "warning"


def _read_toml(text: str, origin: str) -> dict[str, Any]:
    from hoststate.snapshot import toml_loads

    try:
        return toml_loads(text)
    except ValueError as err:
        raise PolicyError(f"not valid TOML: {err}", origin) from err


@functools.lru_cache(maxsize=1)
def default_rules() -> tuple[Rule, ...]:
    text = resources.files("hoststate").joinpath(DEFAULT_POLICY).read_text(encoding="utf-8")
    return tuple(parse_rules(_read_toml(text, DEFAULT_POLICY), DEFAULT_POLICY))


def load_policy(files: list[str] | tuple[str, ...] = ()) -> Policy:
    """User policy files (in the order given) before the shipped default rules."""
    rules: list[Rule] = []
    for name in files:
        data = read_input(name, max_bytes=POLICY_MAX_BYTES, what="policy", error=PolicyError)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise PolicyError("policy is not UTF-8 text", name) from err
        rules.extend(parse_rules(_read_toml(text, name), name))
    rules.extend(default_rules())
    return Policy(rules)


@functools.lru_cache(maxsize=1)
def default_policy() -> Policy:
    return Policy(list(default_rules()))
