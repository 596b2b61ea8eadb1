"""Policy: data that rates each snapshot path invalidating / warning / info / ignore, with a reason.

The order of rules never decides a rating. Of the rules whose pattern matches a path, a user rule (``--policy``)
beats every shipped rule (``default_policy.toml``), and within each layer the most specific pattern wins
(``Pattern.specificity``); patterns equally specific resolve to the more severe rating (fail closed). In a pattern,
``*`` is exactly one key and ``**`` any number of keys (zero included).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import PolicyError
from hoststate.io import POLICY_MAX_BYTES, read_input
from hoststate.paths import Path, glob_key, leaves, split_path

SEVERITIES = ("invalidating", "warning", "info", "ignore")
RANK = {s: i for i, s in enumerate(SEVERITIES)}
DEFAULT_POLICY = "default_policy.toml"
#: Rule layers: any matching user rule beats every shipped rule (an override must override).
DEFAULT_LAYER, USER_LAYER = 0, 1
#: How specific a pattern key is, by what it matched: a literal key, a glob (then its literal characters), ``*``,
#: and last a key taken by ``**``.
_LITERAL, _GLOB, _STAR, _ANY = 3, 2, 1, 0
_RULE_KEYS = {"path", "severity", "reason", "tolerance", "compare", "one_side"}


class Pattern:
    """A path pattern, matched key by key: ``*`` is exactly one (non-empty) key, ``**`` any number of (non-empty)
    keys, zero included, ``ab*`` / ``power_*_mw`` one key matching that glob, anything else one literal key.

    Matching simulates the pattern as a set of positions advanced once per key (no backtracking), so it costs
    at most keys x pattern steps whatever the number of ``*`` and ``**`` in it: a user policy cannot make a
    diff take minutes.
    """

    __slots__ = ("parts", "_items", "any_keys", "_sizes", "_last")

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
        #: How many ``**`` the pattern holds ('**.**' is one).
        self.any_keys = sum(1 for kind, _ in items if kind == "**")
        #: Quick rejections before the walk: how many keys a match has (fewest, most) and the last item when it
        #: must take the path's last key (a literal or a glob).
        fewest = len(items) - self.any_keys
        self._sizes = (fewest, None if self.any_keys else fewest)
        self._last = items[-1] if items and items[-1][0] in ("key", "glob") else None

    def _close(self, states: set[int]) -> set[int]:
        """Positions reachable without consuming a key: a ``**`` may match none."""
        for i in sorted(states):
            while i < len(self._items) and self._items[i][0] == "**":
                i += 1
                states.add(i)
        return states

    def match(self, keys: Path) -> bool:
        fewest, most = self._sizes
        if len(keys) < fewest or (most is not None and len(keys) > most):
            return False
        if self._last is not None and not _takes(*self._last, keys[-1]):
            return False
        if not self.any_keys:  # one item per key (most rules): no positions to track
            for (kind, arg), key in zip(self._items, keys, strict=True):
                if not (key == arg if kind == "key" else bool(key) if kind == "*" else glob_key(arg, key)):
                    return False
            return True
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

    def _completes(self, keys: Path) -> list[list[bool]]:
        """``done[i][j]``: pattern items from ``j`` match ``keys`` from ``i`` (keys x items table, filled backwards)."""
        items, end, n = self._items, len(self._items), len(keys)
        done = [[False] * (end + 1) for _ in range(n + 1)]
        done[n][end] = True
        for j in range(end - 1, -1, -1):
            done[n][j] = items[j][0] == "**" and done[n][j + 1]
        for i in range(n - 1, -1, -1):
            key = keys[i]
            for j in range(end - 1, -1, -1):
                kind, arg = items[j]
                if kind == "**":
                    done[i][j] = done[i][j + 1] or (bool(key) and done[i + 1][j])
                else:
                    done[i][j] = done[i + 1][j + 1] and _takes(kind, arg, key)
        return done

    def specificity(self, keys: Path) -> tuple[tuple[int, int], ...] | None:
        """None when the pattern does not match ``keys``; else, per key of the path, how specifically it was
        matched: ``(3, 0)`` a literal key, ``(2, n)`` a glob with n literal characters, ``(1, 0)`` ``*``, ``(0, 0)``
        a key taken by ``**``. Compared as tuples, key by key from the left: a longer run of literal keys is more
        specific. Where ``**`` could take keys in several ways, the most specific way counts (deterministic)."""
        if not self.any_keys:  # one item per key: no choice to make
            if not self.match(keys):
                return None
            return tuple(_rank(kind, arg) for kind, arg in self._items)
        done = self._completes(keys)
        if not done[0][0]:
            return None
        items, end = self._items, len(self._items)
        states = self._close_done({0}, done, 0)
        out: list[tuple[int, int]] = []
        for i, key in enumerate(keys):
            best: tuple[int, int] = (-1, 0)
            nxt: set[int] = set()
            for j in states:
                if j == end:
                    continue
                kind, arg = items[j]
                target = j if kind == "**" else j + 1
                if not (done[i + 1][target] and _takes(kind, arg, key)):
                    continue
                rank = _rank(kind, arg)
                if rank > best:
                    best, nxt = rank, set()
                if rank == best:
                    nxt.add(target)
            out.append(best)
            states = self._close_done(nxt, done, i + 1)
        return tuple(out)

    def _close_done(self, states: set[int], done: list[list[bool]], i: int) -> set[int]:
        """``_close`` restricted to positions from which the rest of the path still matches."""
        return {j for j in self._close(set(states)) if done[i][j]}

    def last_key(self) -> str | None:
        """The literal key every matched path ends in, when the pattern ends in one (else None)."""
        return self._last[1] if self._last is not None and self._last[0] == "key" else None

    def first_key(self, key: str) -> bool:
        """Whether a path starting with ``key`` could match (the policy's per-first-key buckets)."""
        if not self._items:
            return False
        kind, arg = self._items[0]
        return (kind in ("*", "**") and bool(key)) or (kind == "key" and key == arg) or (
            kind == "glob" and glob_key(arg, key))


def _takes(kind: str, arg: Any, key: str) -> bool:
    """Whether one pattern item of ``kind`` consumes ``key`` (keys are never empty in a match)."""
    if kind in ("*", "**"):
        return bool(key)
    return key == arg if kind == "key" else glob_key(arg, key)


def _rank(kind: str, arg: Any) -> tuple[int, int]:
    if kind == "key":
        return (_LITERAL, 0)
    if kind == "glob":
        return (_GLOB, sum(map(len, arg)))
    return (_STAR, 0) if kind == "*" else (_ANY, 0)


def _items_compatible(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    """Whether some one key is consumed by both pattern items. Two globs: their first pieces must agree as
    prefixes and their last as suffixes; past that the answer is yes (over-inclusive, never missing a key)."""
    (kind_a, arg_a), (kind_b, arg_b) = a, b
    if kind_a in ("*", "**") or kind_b in ("*", "**"):
        return True
    if kind_a == "key":
        return _takes(kind_b, arg_b, arg_a)
    if kind_b == "key":
        return _takes(kind_a, arg_a, arg_b)
    first_a, first_b, last_a, last_b = arg_a[0], arg_b[0], arg_a[-1], arg_b[-1]
    return (first_a.startswith(first_b) or first_b.startswith(first_a)) and (
        last_a.endswith(last_b) or last_b.endswith(last_a))


def intersects(a: Path, b: Path) -> bool:
    """Whether some path matches both patterns (split, e.g. ``Pattern.parts``): a walk over pairs of positions,
    at most len(a) x len(b) states. Over-inclusive only for two globs in one key (see _items_compatible)."""
    items_a, items_b = Pattern(a)._items, Pattern(b)._items
    end = (len(items_a), len(items_b))
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if (i, j) == end:
            return True
        any_a = i < end[0] and items_a[i][0] == "**"
        any_b = j < end[1] and items_b[j][0] == "**"
        if any_a:
            todo.append((i + 1, j))
        if any_b:
            todo.append((i, j + 1))
        if i < end[0] and j < end[1] and _items_compatible(items_a[i], items_b[j]):
            todo.append((i if any_a else i + 1, j if any_b else j + 1))
            if any_a and any_b:
                todo.extend(((i + 1, j + 1), (i, j + 1), (i + 1, j)))
    return False


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
    #: USER_LAYER (a --policy file) or DEFAULT_LAYER (the shipped policy): any matching user rule wins.
    layer: int = USER_LAYER

    def matches(self, parts: Path) -> bool:
        return self.pattern is not None and self.pattern.match(parts)

    def precedence(self, parts: Path) -> tuple[Any, ...] | None:
        """None when the rule does not match ``parts``; else a key that is larger for the rule that should win:
        layer, then specificity key by key, then fewer ``**`` (``a.b`` over ``a.b.**``), then the more severe
        rating, one-side rating and smaller tolerance (fail closed), then the rule's text (any total order: two
        rules that still tie say the same thing). Never the rule's place in the list."""
        if self.pattern is None or not self.pattern.match(parts):  # the cheap test first: most rules miss
            return None
        spec = self.pattern.specificity(parts)
        if spec is None:
            return None
        return (self.layer, spec, -self.pattern.any_keys, -RANK[self.severity],
                -RANK[self.one_side or self.severity], -(self.tolerance or 0.0), self.compare == "sequence",
                self.path, self.reason, self.origin)


def parse_rules(doc: dict[str, Any], origin: str, layer: int = USER_LAYER) -> list[Rule]:
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
                 one_side, layer)
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
    """A set of rules (their order carries no meaning), matched fast: rules are bucketed by the path's first key
    (only rules whose first pattern key can match it), each rule of the bucket is tried once, the one with the
    largest ``Rule.precedence`` wins, and results are cached per path (snapshots repeat paths across GPUs and
    WQs). Matching a path costs bucket size x keys x pattern steps."""

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self._cache: dict[Path, Rule | None] = {}
        self._buckets: dict[str, tuple[dict[str, list[Rule]], list[Rule]]] = {}

    def _bucket(self, first: str) -> tuple[dict[str, list[Rule]], list[Rule]]:
        """The rules whose first pattern key can take ``first``, split by their last item: a literal last key
        indexes the rule (a path ending in another key cannot match it), any other last item goes to the list
        tried for every path. Only rules that could never match are left out, so the winner is unchanged."""
        if first not in self._buckets:
            by_last: dict[str, list[Rule]] = {}
            anywhere: list[Rule] = []
            for r in self.rules:
                if r.pattern is None or not r.pattern.first_key(first):
                    continue
                last = r.pattern.last_key()
                if last is None:
                    anywhere.append(r)
                else:
                    by_last.setdefault(last, []).append(r)
            self._buckets[first] = (by_last, anywhere)
        return self._buckets[first]

    def _candidates(self, parts: Path) -> list[Rule]:
        if not parts:
            return []
        by_last, anywhere = self._bucket(parts[0])
        return by_last.get(parts[-1], []) + anywhere

    def rule_for(self, parts: Path) -> Rule | None:
        try:
            return self._cache[parts]
        except KeyError:
            pass
        best: tuple[Any, ...] | None = None
        rule = None
        for candidate in self._candidates(parts):
            key = candidate.precedence(parts)
            if key is not None and (best is None or key > best):
                best, rule = key, candidate
        self._cache[parts] = rule
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
    from hoststate.parsed import parse_once

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), DEFAULT_POLICY)  # shipped beside this module
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    doc = parse_once(path, text, lambda t: _read_toml(t, DEFAULT_POLICY))  # parsed once per content, not per process
    return tuple(parse_rules(doc, DEFAULT_POLICY, DEFAULT_LAYER))


def load_policy(files: list[str] | tuple[str, ...] = ()) -> Policy:
    """User policy files (one layer, above the shipped default rules; the order of files and rules carries no
    meaning)."""
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


def unmatched_rules(rules: Iterable[Rule], *snapshots: Mapping[str, Any]) -> list[Rule]:
    """The user rules whose pattern matches no value (leaf) in any of ``snapshots``: a misspelt path would
    otherwise silently do nothing. Shipped rules are left out (they cover hosts without DSA, GPUs or a server)."""
    user = [r for r in rules if r.layer == USER_LAYER]
    if not user:
        return []
    paths = {path for snap in snapshots for path, _ in leaves(snap)}
    return [r for r in user if not any(r.matches(path) for path in paths)]


def unmatched_reason(rule: Rule) -> str:
    """What a reviewer reads for a user rule that matched nothing."""
    return (f"Policy rule '{rule.path}' ({rule.severity}) of {rule.origin or 'a user policy'} matches no value in "
            "either snapshot, so it rates nothing: check the path for a typo against `hoststate show`.")
