"""Policy: data that rates each snapshot path invalidating / warning / info / ignore, with a reason.

The order of rules never decides a rating. Of the rules whose pattern matches a path, a user rule (``--policy``)
beats every shipped rule (``default_policy.toml``), and within each layer the most specific pattern wins
(``Pattern.specificity``); patterns equally specific resolve to the more severe rating (fail closed). In a pattern,
``*`` is exactly one key and ``**`` any number of keys (zero included).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from hoststate.errors import PolicyError
from hoststate.io import POLICY_MAX_BYTES, read_input
from hoststate.paths import Path, PatternIndex, Prefixed, glob_key, leaves, split_path

SEVERITIES = ("invalidating", "warning", "info", "ignore")
RANK = {s: i for i, s in enumerate(SEVERITIES)}
DEFAULT_POLICY = "default_policy.toml"
#: The shipped table of environment variables (``[[variable]]`` entries), rated at every place they are read.
DEFAULT_VARIABLES = "variables.toml"
#: Rule layers: any matching user rule beats every shipped rule (an override must override).
DEFAULT_LAYER, USER_LAYER = 0, 1
#: How specific a pattern key is, by what it matched: a literal key, a glob (then its literal characters), ``*``,
#: and last a key taken by ``**``.
_LITERAL, _GLOB, _STAR, _ANY = 3, 2, 1, 0
_RULE_KEYS = {"path", "severity", "reason", "tolerance", "compare", "one_side", "absolute", "source", "floor",
              "above_floor", "rated_by", "when_same", "listed_in", "unlisted_patch", "inert_if", "when_inert"}
#: Keys of a ``[[variable]]`` entry: one environment variable (or a glob of names), rated the same wherever it
#: is read (VARIABLE_PLACES).
_VARIABLE_KEYS = {"name", "severity", "reason", "source", "rated_by", "when_same"}
#: Every place a process environment variable is recorded: hoststate's own environment, a server's (its environ or
#: a --vllm-cmd's VAR=value prefixes) and the NCCL config files the server's NCCL reads (NCCL sets each KEY=VALUE
#: there as an environment variable: nccl src/misc/param.cc). A ``[[variable]]`` becomes one rule per place.
VARIABLE_PLACES = ("env.{name}", "vllm.**.env.{name}", "vllm.**.nccl_conf.*.settings.{name}")


#: The position sets Pattern closures hold, each kept once (a frozenset costs 216 bytes).
_REACH: dict[frozenset[int], frozenset[int]] = {}


class Pattern:
    """A path pattern, matched key by key: ``*`` is exactly one (non-empty) key, ``**`` any number of (non-empty)
    keys, zero included, ``ab*`` / ``power_*_mw`` one key matching that glob, anything else one literal key.

    Matching simulates the pattern as a set of positions advanced once per key (no backtracking), so it costs
    at most keys x pattern steps whatever the number of ``*`` and ``**`` in it: a user policy cannot make a
    diff take minutes.
    """

    __slots__ = ("parts", "_items", "any_keys", "_sizes", "_last", "_closure", "_split")

    def __init__(self, parts: Path):
        for part in parts:
            if "**" in part and part != "**":
                raise ValueError(f"'**' must be a whole key, not part of {part!r}")
        self.parts = tuple(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and other.parts == self.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return f"Pattern({self.parts!r})"

    def __getattr__(self, name: str) -> Any:
        """The matcher's tables, made on first use (a slot not yet set): a policy holds 2,000 patterns and a
        command tries a few hundred of them."""
        if name not in Pattern.__slots__ or name == "parts":
            raise AttributeError(name)
        self._build()
        return object.__getattribute__(self, name)

    def _build(self) -> None:
        items: list[tuple[str, Any]] = []
        for part in self.parts:
            if part == "**":
                if not (items and items[-1][0] == "**"):  # '**.**' is '**'
                    items.append(("**", None))
            elif part == "*":
                items.append(("*", None))
            elif "*" in part:
                items.append(("glob", tuple(part.split("*"))))
            else:
                items.append(("key", part))
        self._items = tuple(items)
        #: How many ``**`` the pattern holds ('**.**' is one).
        self.any_keys = sum(1 for kind, _ in items if kind == "**")
        #: Quick rejections before the walk: how many keys a match has (fewest, most) and the last item when it
        #: must take the path's last key (a literal or a glob).
        fewest = len(items) - self.any_keys
        self._sizes = (fewest, None if self.any_keys else fewest)
        self._last = items[-1] if items and items[-1][0] in ("key", "glob") else None
        #: Positions reachable from each position without consuming a key (a ``**`` may match none).
        self._closure = tuple(self._reach(i) for i in range(len(items) + 1))
        #: With one ``**`` (1,300 of the shipped policy's 2,250 patterns: ``vllm.**.env.NAME``) a path matches one
        #: way only: the items before it take the first keys, those after it the last, and it takes the rest. The
        #: items before and after, and their ranks; None with no ``**`` or more than one.
        self._split = None
        if self.any_keys == 1:
            at = next(i for i, (kind, _) in enumerate(items) if kind == "**")
            head, tail = items[:at], items[at + 1:]
            self._split = (head, tail, tuple(_rank(*i) for i in head), tuple(_rank(*i) for i in tail))

    def _reach(self, i: int) -> frozenset[int]:
        out = {i}
        while i < len(self._items) and self._items[i][0] == "**":
            i += 1
            out.add(i)
        reach = frozenset(out)
        return _REACH.setdefault(reach, reach)  # one object per set: a policy's 2,000 patterns share a few dozen

    def match(self, keys: Path) -> bool:
        fewest, most = self._sizes
        if len(keys) < fewest or (most is not None and len(keys) > most):
            return False
        if self._last is not None and not _takes(*self._last, keys[-1]):
            return False
        items, end = self._items, len(self._items)
        if not self.any_keys:  # one item per key (the sizes checked above)
            return all(_takes(kind, arg, key) for (kind, arg), key in zip(items, keys, strict=True))
        if self._split is not None:
            return self._split_match(keys)
        states = self._closure[0]
        for key in keys:
            states = self._advance(states, key)
            if not states:
                return False
        return end in states

    def _split_match(self, keys: Path) -> bool:
        """match for a pattern of one ``**``: its items before and after take the first and last keys, and every
        key between is non-empty (the sizes checked by match)."""
        head, tail = self._split[0], self._split[1]  # type: ignore[index]
        rest = len(keys) - len(tail)
        return (all(_takes(kind, arg, key) for (kind, arg), key in zip(head, keys[:len(head)], strict=True))
                and all(_takes(kind, arg, key) for (kind, arg), key in zip(tail, keys[rest:], strict=True))
                and all(keys[len(head):rest]))

    def _advance(self, states: frozenset[int], key: str) -> frozenset[int]:
        """The positions after consuming ``key`` from ``states`` (each followed through a ``**`` that may match
        none): one step of the simulation, at most one per position."""
        items, end, closure = self._items, len(self._items), self._closure
        nxt: set[int] = set()
        for i in states:
            if i == end:
                continue
            kind, arg = items[i]
            if kind == "**":
                if key:
                    nxt |= closure[i]
            elif _takes(kind, arg, key):
                nxt |= closure[i + 1]
        return frozenset(nxt)

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
        if self._split is not None:  # one way to match: the ``**`` takes the keys between head and tail
            if not self.match(keys):
                return None
            _head, _tail, head, tail = self._split
            return (*head, *((_ANY, 0),) * (len(keys) - len(head) - len(tail)), *tail)
        return self._walk(keys)

    def _walk(self, keys: Path) -> tuple[tuple[int, int], ...] | None:
        """specificity by the table of which items can still complete the path: any number of ``**``."""
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
        """Positions reachable from ``states`` without consuming a key, from which the rest of the path still
        matches."""
        return {j for state in states for j in self._closure[state] if done[i][j]}

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


class Rule(NamedTuple):
    """One rating: the paths ``pattern`` (``path`` split) matches are rated ``severity`` for ``reason``. A
    NamedTuple, not a dataclass: a policy builds 2,184 of them, 0.4 us each against a frozen dataclass's 2.6; two
    rules are equal when their fields are (a Pattern is equal to another of the same keys)."""

    path: str
    severity: str
    reason: str
    tolerance: float | None = None
    #: "set" compares a list without regard to order (a group's engine list); default "sequence".
    compare: str = "sequence"
    origin: str = ""
    pattern: Pattern | None = None
    #: Severity when only one side has a value (added/removed), when it differs from ``severity``: a
    #: reading present on one side only (a log given once) is not a measured change.
    one_side: str | None = None
    #: USER_LAYER (a --policy file) or DEFAULT_LAYER (the shipped policy): any matching user rule wins.
    layer: int = USER_LAYER
    #: Absolute tolerance in the value's unit: |new - baseline| <= absolute is rated ignore.
    absolute: float | None = None
    #: Where the judgement comes from (vLLM file and version, NVIDIA/NCCL/PyTorch documentation, a measurement).
    source: str = ""
    #: A number: the rating applies when a value on either side is below it; with both at or above it the change
    #: is rated ``above_floor`` (a size that is enough either way).
    floor: float | None = None
    above_floor: str | None = None
    #: A pattern of other leaves that show the change's effect: when they are present and readable on both sides
    #: and equal, the change is rated ``when_same`` (LD_LIBRARY_PATH against the libraries actually mapped).
    rated_by: str | None = None
    when_same: str | None = None
    #: A pattern of list leaves naming what is in use (a server's serving path): a change of only the last
    #: version component of a key named in neither side's lists, both read, is rated ``unlisted_patch``.
    listed_in: str | None = None
    unlisted_patch: str | None = None
    #: ``KEY=VALUE[|VALUE...]``: when the nearest enclosing table's leaf KEY reads one of the values on both sides
    #: (a disabled work queue), the setting is not in effect there and the change is rated ``when_inert``.
    inert_if: str | None = None
    when_inert: str | None = None

    def inert(self) -> tuple[str, frozenset[str]] | None:
        """``inert_if`` as (key, values), or None."""
        if not self.inert_if:
            return None
        key, _, values = self.inert_if.partition("=")
        return key, frozenset(values.split("|"))

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
                -RANK[self.one_side or self.severity], -(self.tolerance or 0.0), -(self.absolute or 0.0),
                self.compare == "sequence", self.path, self.reason, self.origin, self.source, repr(self._extras()))

    def _extras(self) -> tuple[Any, ...]:
        return (self.floor, self.above_floor, self.rated_by, self.when_same, self.listed_in, self.unlisted_patch,
                self.inert_if, self.when_inert)


def parse_rules(doc: dict[str, Any], origin: str, layer: int = USER_LAYER) -> list[Rule]:
    """Rules of one policy document; every defect raises PolicyError naming the rule."""
    unknown_top = set(doc) - {"rule", "variable"}
    if unknown_top:
        raise PolicyError(f"unknown top-level key(s) {sorted(unknown_top)}; rules go in [[rule]] tables", origin)
    raw = doc.get("rule", [])
    if not isinstance(raw, list):
        raise PolicyError("'rule' must be an array of tables ([[rule]])", origin)
    rules = []
    rules.extend(_parse_rule(item, f"variable {name} ({item['path']})", origin, layer)
                 for name, item in _variable_rules(doc.get("variable", []), origin))
    for n, item in enumerate(raw, 1):
        where = f"rule {n}"
        if not isinstance(item, dict):
            raise PolicyError(f"{where}: must be a table", origin)
        if "path" in item and isinstance(item["path"], str):
            shown = item["path"] if item["path"].isprintable() else repr(item["path"])  # one line, always
            where = f"rule {n} ({shown})"
        rules.append(_parse_rule(item, where, origin, layer))
    return rules


def _severity_key(item: dict[str, Any], key: str, where: str, origin: str) -> str | None:
    value = item.get(key)
    if value is not None and value not in SEVERITIES:
        raise PolicyError(f"{where}: {key} {value!r} is not one of {', '.join(SEVERITIES)}", origin)
    return value


def _number_key(item: dict[str, Any], key: str, where: str, origin: str) -> float | None:
    value = item.get(key)
    if value is not None and not _finite_non_negative(value):
        raise PolicyError(f"{where}: '{key}' must be a non-negative number (finite: not inf or nan), "
                          f"found {str(value)[:40]}", origin)
    return None if value is None else float(value)


def _pattern_key(item: dict[str, Any], key: str, where: str, origin: str) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{where}: '{key}' must be a path pattern", origin)
    try:
        Pattern(split_path(value))
    except ValueError as err:
        raise PolicyError(f"{where}: bad '{key}' pattern: {err}", origin) from err
    return value


def _paired(item: dict[str, Any], pairs: tuple[tuple[str, str], ...], where: str, origin: str) -> None:
    """Keys that only mean something together (floor and above_floor, ...) come together."""
    for a, b in pairs:
        if (a in item) != (b in item):
            raise PolicyError(f"{where}: '{a}' and '{b}' go together", origin)


def _parse_rule(item: dict[str, Any], where: str, origin: str, layer: int) -> Rule:
    """One ``[[rule]]`` table (or a ``[[variable]]`` entry at one place); every defect raises PolicyError naming
    the rule."""
    extra = set(item) - _RULE_KEYS
    if extra:
        raise PolicyError(f"{where}: unknown key(s) {sorted(extra)}", origin)
    path = item.get("path")
    if not isinstance(path, str) or not path:
        raise PolicyError(f"{where}: 'path' is missing or not a string", origin)
    severity = item.get("severity")
    if severity not in SEVERITIES:
        raise PolicyError(f"{where}: severity {severity!r} is not one of {', '.join(SEVERITIES)}", origin)
    for key in ("reason", "source"):
        if not isinstance(item.get(key, ""), str):
            raise PolicyError(f"{where}: '{key}' must be a string", origin)
    compare = item.get("compare", "sequence")
    if compare not in ("sequence", "set"):
        raise PolicyError(f"{where}: 'compare' must be 'sequence' or 'set'", origin)
    _paired(item, (("floor", "above_floor"), ("rated_by", "when_same"), ("listed_in", "unlisted_patch"),
                   ("inert_if", "when_inert")), where, origin)
    try:
        pattern = Pattern(split_path(path))
    except ValueError as err:
        raise PolicyError(f"{where}: bad pattern: {err}", origin) from err
    return Rule(path, severity, item.get("reason", ""), _number_key(item, "tolerance", where, origin), compare,
                origin, pattern, _severity_key(item, "one_side", where, origin), layer,
                absolute=_number_key(item, "absolute", where, origin), source=item.get("source", ""),
                floor=_number_key(item, "floor", where, origin),
                above_floor=_severity_key(item, "above_floor", where, origin),
                rated_by=_pattern_key(item, "rated_by", where, origin),
                when_same=_severity_key(item, "when_same", where, origin),
                listed_in=_pattern_key(item, "listed_in", where, origin),
                unlisted_patch=_severity_key(item, "unlisted_patch", where, origin),
                inert_if=_inert_key(item, where, origin),
                when_inert=_severity_key(item, "when_inert", where, origin))


def _inert_key(item: dict[str, Any], where: str, origin: str) -> str | None:
    value = item.get("inert_if")
    key, sep, values = value.partition("=") if isinstance(value, str) else ("", "", "")
    well_formed = bool(sep and key and all(c.isalnum() or c in "_-" for c in key) and "=" not in values
                       and all(values.split("|")))
    if value is not None and not well_formed:
        raise PolicyError(f"{where}: 'inert_if' must be KEY=VALUE or KEY=VALUE|VALUE (a key of the same table and "
                          "the values that make the setting inert)", origin)
    return value


def _variable_rules(raw: Any, origin: str) -> list[tuple[str, dict[str, Any]]]:
    """``[[variable]]`` entries as rule tables, one per place a variable is recorded (VARIABLE_PLACES): the same
    setting gets the same rating wherever it is read."""
    if not isinstance(raw, list):
        raise PolicyError("'variable' must be an array of tables ([[variable]])", origin)
    out: list[tuple[str, dict[str, Any]]] = []
    for n, item in enumerate(raw, 1):
        where = f"variable {n}"
        if not isinstance(item, dict):
            raise PolicyError(f"{where}: must be a table", origin)
        extra = set(item) - _VARIABLE_KEYS
        if extra:
            raise PolicyError(f"{where}: unknown key(s) {sorted(extra)}", origin)
        name = item.get("name")
        if not isinstance(name, str) or not name or "." in name or "**" in name:
            raise PolicyError(f"{where}: 'name' must be one variable name or a glob of names", origin)
        rule = {k: v for k, v in item.items() if k != "name"}
        out.extend((name, {**rule, "path": place.format(name=name)}) for place in VARIABLE_PLACES)
    return out


def _finite_non_negative(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)  # an integer beyond a float's range overflows
    except OverflowError:
        return False
    return math.isfinite(number) and number >= 0


class Policy:
    """A set of rules (their order carries no meaning), matched fast: rules are filed in a PatternIndex by their
    leading literal keys (only rules that could match a path are tried), the one with the largest
    ``Rule.precedence`` wins, and results are cached per path (snapshots repeat paths across GPUs and WQs; the
    cache is bounded, so a diff of two huge snapshots does not keep one entry per leaf). Matching a path costs the
    candidates x keys x pattern steps."""

    #: Paths remembered by rule_for before the cache starts over.
    CACHE_MAX = 1 << 15

    def __init__(self, rules: Iterable[Rule], later: Later | None = None):
        self._rules = list(rules)
        #: Rules filed by the literal first key of their patterns and built when a path under that key is first
        #: rated (Later); a key leaves this table only once its rules are filed, under _taking.
        self._later: dict[str, Callable[[], list[Rule]]] = dict(later.build) if later else {}
        self._later_parts: frozenset[str] = later.parts if later else frozenset()
        self._taking = threading.Lock()
        self._cache: dict[Path, Rule | None] = {}
        self._region_cache: dict[Path, Rule | None] = {}
        self._spelling: _Spelling | None = None
        self._spelt_keys: dict[str, bool] = {}
        self._canonical_keys: dict[str, str] = {}
        self._by_globs: dict[frozenset[tuple[str, ...]], str] = {}
        self._index = PatternIndex(whole=True)
        for rule in self._rules:
            if rule.pattern is not None:
                self._index.add(rule.pattern.parts, rule)

    @property
    def rules(self) -> list[Rule]:
        """Every rule, those filed for later built now."""
        for first in list(self._later):
            self._take(first)
        return self._rules

    @property
    def user_rules(self) -> list[Rule]:
        """The rules of user policy files (a Later holds shipped rules only, so none is waiting to be built)."""
        return [r for r in self._rules if r.layer == USER_LAYER]

    def _take(self, first: str) -> None:
        """File the rules kept for paths under ``first``. The key is dropped from ``_later`` only after they are
        filed, so a thread that still sees it there waits here instead of rating with half of them."""
        with self._taking:
            build = self._later.get(first)
            if build is None:
                return
            made = build()
            for rule in made:
                if rule.pattern is not None:
                    self._index.add(rule.pattern.parts, rule)
            self._rules.extend(made)
            del self._later[first]

    def prepare(self, keys: Iterable[str]) -> None:
        """Build now the rules kept for paths under ``keys`` and the spelling table (a snap does it while its
        collectors run, so the digest only matches)."""
        for key in keys:
            if key in self._later:
                self._take(key)
        self._spelling_now()

    def candidates(self, parts: Path) -> Iterator[Rule]:
        """The rules that could match ``parts`` (a superset of those that do; each checked by precedence)."""
        if not parts:
            return iter(())
        if parts[0] in self._later:
            self._take(parts[0])
        return self._index.candidates(parts)

    def _spelling_now(self) -> _Spelling:
        if self._spelling is None:
            loaded = (part for r in list(self._rules) if r.pattern is not None for part in r.pattern.parts)
            self._spelling = _Spelling(itertools.chain(loaded, self._later_parts))
        return self._spelling

    def rule_for(self, parts: Path) -> Rule | None:
        """The winning rule for ``parts``. A key no rule spells (a GPU's bus id, an argument's name, an env
        variable no rule names) is taken only by ``*`` and ``**``, so it is rated as :data:`_UNSPELT`: paths that
        differ only in such keys share one cached answer."""
        rule = self._cache.get(parts, _NOT_YET)  # most paths of a large diff are new: no KeyError raised for each
        if rule is not _NOT_YET:
            return rule  # type: ignore[return-value]
        canonical = tuple(map(self._canonical, parts))
        rule = self._cache.get(canonical, _NOT_YET)
        if rule is _NOT_YET:
            rule = self._winner(canonical)
        if len(self._cache) >= self.CACHE_MAX:
            self._cache.clear()
        self._cache[canonical] = self._cache[parts] = rule  # type: ignore[assignment]
        return rule  # type: ignore[return-value]

    def _winner(self, parts: Path) -> Rule | None:
        best: tuple[Any, ...] | None = None
        rule = None
        for candidate in self.candidates(parts):
            key = candidate.precedence(parts)
            if key is not None and (best is None or key > best):
                best, rule = key, candidate
        return rule

    def severity(self, parts: Path) -> str:
        rule = self.rule_for(parts)
        return rule.severity if rule else "warning"

    def region_rule(self, region: Path) -> Rule | None:
        """The rule that rates a region whose paths are not known (everything at or below ``region``): the most
        severe of the rules that can rate some path there, leaving out a rule that a rule of a higher layer
        overrides on every path it shares with the region (a user rule covering the region, or covering the
        rule). Ties go to the higher layer, then to the shorter pattern (nearest the region), then to the rule's
        text: never to the order of rules or files. Regions that differ only in keys no rule spells (a GPU's bus
        id, a WQ's name) are rated once: every rule treats such keys alike."""
        key = tuple(k if self._spelt(k) else _UNSPELT for k in region)
        try:
            return self._region_cache[key]
        except KeyError:
            pass
        if len(self._region_cache) >= self.CACHE_MAX:
            self._region_cache.clear()
        rule = self._region_cache[key] = self._rate_region(key)
        return rule

    def _canonical(self, key: str) -> str:
        """The key ``key`` is rated as: itself where a rule names it literally (or it is empty or holds a ``*``),
        :data:`_UNSPELT` where no rule names it, else the first key seen that the same globs take. A pattern's
        item takes a key by its literal text, by a glob, or because it is ``*``/``**`` (Pattern, _takes), so
        keys taken by the same globs are rated alike: 160,000 packages that only ``vllm*`` names are rated once,
        not once each."""
        out = self._canonical_keys.get(key)
        if out is not None:
            return out
        spelling = self._spelling_now()
        if not key or "*" in key or key in spelling.literals:
            out = key
        elif not spelling.may_glob(key):
            out = _UNSPELT
        elif taken := spelling.globs(key):
            if len(self._by_globs) >= self.CACHE_MAX:
                self._by_globs.clear()
            out = self._by_globs.setdefault(taken, key)
        else:
            out = _UNSPELT
        if len(self._canonical_keys) >= self.CACHE_MAX:
            self._canonical_keys.clear()
        self._canonical_keys[key] = out
        return out

    def _spelt(self, key: str) -> bool:
        """Whether some rule's pattern names ``key`` (a literal key, or a glob it matches), or ``key`` is empty
        (which ``*`` does not take); globs are found by their first piece, or by their last where the first is
        empty, so the check does not try every glob."""
        if not key or "*" in key:
            return True
        try:
            return self._spelt_keys[key]
        except KeyError:
            pass
        spelling = self._spelling_now()
        if len(self._spelt_keys) >= self.CACHE_MAX:
            self._spelt_keys.clear()
        spelt = self._spelt_keys[key] = spelling.names(key)
        return spelt

    def _rate_region(self, region: Path) -> Rule | None:
        inside = (*region, "**")
        meeting = [r for r in self.rules if r.pattern is not None and _meets(r.pattern.parts, inside)]
        higher = {layer: [o for o in meeting if o.layer > layer] for layer in {r.layer for r in meeting}}
        live = [r for r in meeting
                if not any(contains(o.pattern.parts, inside)  # type: ignore[union-attr]
                           or contains(o.pattern.parts, r.pattern.parts)  # type: ignore[union-attr]
                           for o in higher[r.layer])]
        if region and all(k and "*" not in k for k in region):  # an empty key (hostile) meets every rule
            # The region's own path is rated by its winner alone; a rule that can match no path below it (a
            # rule for one key, such as gpu.devices.*.*, meeting the region gpu.devices.X.serial) rates nothing
            # inside unless it is that winner. Rules that can match below stay: it is not known what is there.
            winner, below = self._winner(region), (*region, "*", "**")
            live = [r for r in live if r is winner or _meets(r.pattern.parts, below)]  # type: ignore[union-attr]
        if not live:
            return None
        return min(live, key=lambda r: (RANK[r.severity], -r.layer, len(r.pattern.parts),  # type: ignore[union-attr]
                                        r.path, r.reason, r.origin))


#: The key a path's or region's key is rated as when no rule spells it (no literal equals it, no glob part holds
#: NUL): like any such key, only ``*`` and ``**`` take it.
_UNSPELT = "\x00"
_NOT_YET = object()


class _Spelling:
    """The keys a set of rules names (``parts``: every key of their patterns): literal pattern keys, and globs
    filed by their first piece (or, where that is empty, by their last piece reversed); ``*a*`` is a substring
    test, any other glob empty at both ends is always tried."""

    def __init__(self, parts: Iterable[str]):
        parts = set(parts)
        self.literals = {p for p in parts if "*" not in p}
        self.first, self.last = Prefixed(), Prefixed()
        self.inner: list[tuple[str, ...]] = []
        self.within: tuple[str, ...] = ()  # ``*x*``: a key that holds x
        for glob in sorted(p for p in parts if "*" in p and p not in ("*", "**")):
            pieces = tuple(glob.split("*"))
            if len(pieces) == 3 and not pieces[0] and not pieces[2] and pieces[1]:
                self.within += (pieces[1],)
            elif pieces[0]:
                self.first.add(pieces[0], pieces)
            elif pieces[-1]:
                self.last.add(pieces[-1][::-1], pieces)
            else:
                self.inner.append(pieces)
        every = [tuple(glob.split("*")) for glob in parts if "*" in glob and glob not in ("*", "**")]
        self.starts = tuple(sorted({pieces[0] for pieces in every if pieces[0]}))
        self.ends = tuple(sorted({pieces[-1] for pieces in every if pieces[-1]}))

    def may_glob(self, key: str) -> bool:
        """False when no glob can take ``key``: it starts with no glob's first piece and ends with no glob's last,
        holds no ``*x*`` piece, and no glob is empty at both ends (three C calls for most keys of a large diff)."""
        return bool(key.startswith(self.starts) or key.endswith(self.ends) or self.inner
                    or any(piece in key for piece in self.within))

    def globs(self, key: str) -> frozenset[tuple[str, ...]]:
        """Every glob (as its pieces) that takes ``key``."""
        found = [("", piece, "") for piece in self.within if piece in key]
        if key.startswith(self.starts):
            found += [pieces for pieces in self.first.get(key) if glob_key(pieces, key)]
        if key.endswith(self.ends):
            found += [pieces for pieces in self.last.get(key[::-1]) if glob_key(pieces, key)]
        if self.inner:
            found += [pieces for pieces in self.inner if glob_key(pieces, key)]
        return frozenset(found)

    def names(self, key: str) -> bool:
        if key in self.literals or any(piece in key for piece in self.within):
            return True
        for pieces in itertools.chain(self.first.get(key), self.last.get(key[::-1]), self.inner):
            if glob_key(pieces, key):
                return True
        return False


def _meets(rule: Path, region: Path) -> bool:
    """intersects, taking a region no pattern can spell (a hostile entry's key) to meet every rule: fail closed."""
    try:
        return intersects(rule, region)
    except ValueError:
        return True


def contains(outer: Path, inner: Path) -> bool:
    """Whether every path that matches ``inner`` also matches ``outer`` (both split patterns). Sound, not
    complete: True only when each item of ``inner`` maps onto ``outer`` (a ``**`` of ``outer`` takes any run of
    items, ``*`` any one-key item, a glob a literal key it matches or the same glob); a pattern with a malformed
    key contains nothing."""
    try:
        a, b = Pattern(outer)._items, Pattern(inner)._items
    except ValueError:
        return False
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a):
            if j == len(b):
                return True
            continue
        kind, arg = a[i]
        if kind == "**":
            todo.append((i + 1, j))
            if j < len(b):
                todo.append((i, j + 1))
            continue
        if j < len(b) and _covers_item(kind, arg, *b[j]):
            todo.append((i + 1, j + 1))
    return False


def _covers_item(kind: str, arg: Any, other_kind: str, other_arg: Any) -> bool:
    """Whether one one-key pattern item takes every key another item takes."""
    if other_kind == "**":
        return False
    if kind == "*":
        return True
    if other_kind == "key":
        return _takes(kind, arg, other_arg)
    return kind == other_kind and arg == other_arg


def _read_toml(text: str, origin: str) -> dict[str, Any]:
    from hoststate.snapshot import toml_loads

    try:
        return toml_loads(text)
    except ValueError as err:
        raise PolicyError(f"not valid TOML: {err}", origin) from err


#: A shipped rule as its parsed copy keeps it (hoststate.parsed): Rule's fields in order, less origin, pattern and
#: layer, checked once per content by parse_rules when the copy is made; ``_ROWS_FORMAT`` names this layout.
_ROW = ("path", "severity", "reason", "tolerance", "compare", "one_side", "absolute", "source", "floor",
        "above_floor", "rated_by", "when_same", "listed_in", "unlisted_patch", "inert_if", "when_inert")
_ROWS_FORMAT = "rules-3"


def _rows(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    """A shipped document's rules, every check of parse_rules passed, as rows of _ROW; with each pattern's first
    key and every key the patterns name (what a Policy needs of the rules it builds later: Later)."""
    rules = parse_rules(doc, origin, DEFAULT_LAYER)
    return {"format": _ROWS_FORMAT,
            "rows": [[getattr(rule, name) for name in _ROW] for rule in rules],
            "first": [rule.pattern.parts[0] for rule in rules],  # type: ignore[union-attr]
            "parts": sorted({part for rule in rules for part in rule.pattern.parts})}  # type: ignore[union-attr]


class Later(NamedTuple):
    """Rules kept as data until a path under their pattern's literal first key is rated: ``build[key]`` makes
    them; ``parts`` is every key their patterns name, so that a Policy spells keys alike before and after."""

    build: Mapping[str, Callable[[], list[Rule]]]
    parts: frozenset[str]


class _Shipped(NamedTuple):
    """The shipped rules as read: each rule's file and row of _ROW, its pattern's first key, and every key the
    patterns name."""

    rows: tuple[tuple[str, list[Any]], ...]
    first: tuple[str, ...]
    parts: frozenset[str]


def _valid(kept: Any) -> bool:
    return (isinstance(kept, dict) and kept.get("format") == _ROWS_FORMAT and isinstance(kept.get("rows"), list)
            and isinstance(kept.get("first"), list) and len(kept["first"]) == len(kept["rows"])
            and isinstance(kept.get("parts"), list))


@functools.lru_cache(maxsize=1)
def _shipped() -> _Shipped:
    """default_policy.toml and the environment variable table (variables.toml), read once per process, and parsed
    and checked once per content (their rows are kept beside the bytecode by hoststate.parsed, so a process reads
    JSON instead of parsing 200 kB of TOML)."""
    from hoststate.parsed import parse_once

    rows: list[tuple[str, list[Any]]] = []
    first: list[str] = []
    parts: set[str] = set()
    for name in (DEFAULT_VARIABLES, DEFAULT_POLICY):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)  # shipped beside this module
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        kept = parse_once(path, text, lambda t, n=name: _rows(_read_toml(t, n), n), form=_ROWS_FORMAT)
        if not _valid(kept):
            kept = _rows(_read_toml(text, name), name)  # not a copy this layout reads
        rows.extend((name, row) for row in kept["rows"])
        first.extend(kept["first"])
        parts.update(kept["parts"])
    return _Shipped(tuple(rows), tuple(first), frozenset(parts))


@functools.cache
def _rule(index: int) -> Rule:
    """The shipped rule of row ``index``, built once: default_rules and every Policy share it."""
    origin, (rule_path, severity, reason, tolerance, compare, one_side, absolute, source, floor, above_floor,
             rated_by, when_same, listed_in, unlisted_patch, inert_if, when_inert) = _shipped().rows[index]
    return Rule(rule_path, severity, reason, tolerance, compare, origin, Pattern(split_path(rule_path)), one_side,
                DEFAULT_LAYER, absolute, source, floor, above_floor, rated_by, when_same, listed_in, unlisted_patch,
                inert_if, when_inert)


@functools.lru_cache(maxsize=1)
def default_rules() -> tuple[Rule, ...]:
    """The shipped rules, one layer, in the order of their files."""
    return tuple(map(_rule, range(len(_shipped().rows))))


def _build(indexes: list[int]) -> list[Rule]:
    return list(map(_rule, indexes))


@functools.lru_cache(maxsize=1)
def _shipped_split() -> tuple[list[Rule], Later]:
    """The shipped rules as a Policy takes them: built, those whose pattern starts with a wildcard or a glob (they
    can match under any key); kept for later, the others by their first key. A snapshot rated key by key builds
    only the rules of the tables it has: a host without a vLLM server never builds the 2,000 rules of ``vllm``
    and ``env``."""
    shipped = _shipped()
    now: list[Rule] = []
    later: dict[str, list[int]] = {}
    for index, first in enumerate(shipped.first):
        if "*" in first:
            now.append(_rule(index))
        else:
            later.setdefault(first, []).append(index)
    return now, Later({first: functools.partial(_build, rows) for first, rows in later.items()}, shipped.parts)


def load_policy(files: list[str] | tuple[str, ...] = ()) -> Policy:
    """User policy files (one layer, above the shipped default rules; the order of files and rules carries no
    meaning). Without files, the shipped rules' one Policy of the process (default_policy: the digest's too)."""
    if not files:
        return default_policy()
    rules: list[Rule] = []
    for name in files:
        data = read_input(name, max_bytes=POLICY_MAX_BYTES, what="policy", error=PolicyError)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise PolicyError("policy is not UTF-8 text", name) from err
        rules.extend(parse_rules(_read_toml(text, name), name))
    shipped, later = _shipped_split()
    return Policy(rules + shipped, later)


@functools.lru_cache(maxsize=1)
def default_policy() -> Policy:
    """The shipped rules' Policy, built once per process (a snap's warm thread builds it while the collectors run;
    its rules and matching caches are shared by the digest and every diff without user rules)."""
    return Policy(*_shipped_split())


def unmatched_rules(rules: Iterable[Rule], *snapshots: Mapping[str, Any]) -> list[Rule]:
    """The user rules whose pattern matches no value (leaf) in any of ``snapshots``: a misspelt path would
    otherwise silently do nothing. Shipped rules are left out (they cover hosts without DSA, GPUs or a server)."""
    user = [r for r in rules if r.layer == USER_LAYER]
    if not user:
        return []
    index = PatternIndex(whole=True)
    for rule in user:
        if rule.pattern is not None:
            index.add(rule.pattern.parts, rule)
    matched: set[int] = set()
    for snap in snapshots:
        for path, _ in leaves(snap):
            for rule in index.candidates(path):
                if id(rule) not in matched and rule.matches(path):
                    matched.add(id(rule))
    return [r for r in user if id(r) not in matched]


def unmatched_reason(rule: Rule) -> str:
    """What a reviewer reads for a user rule that matched nothing."""
    return (f"Policy rule '{rule.path}' ({rule.severity}) of {rule.origin or 'a user policy'} matches no value in "
            "either snapshot, so it rates nothing: check the path for a typo against `hoststate show`.")
