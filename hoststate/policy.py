"""Policy: data that rates each snapshot path invalidating / warning / info / ignore, with a reason.

Rules are tried in order, user files first, then the shipped ``default_policy.toml``; the first
rule whose pattern matches a path decides. In a pattern, ``*`` is exactly one key and ``**`` any
number of keys (zero included).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from hoststate.errors import PolicyError
from hoststate.io import POLICY_MAX_BYTES, read_input
from hoststate.paths import Path, split_path

SEVERITIES = ("invalidating", "warning", "info", "ignore")
RANK = {s: i for i, s in enumerate(SEVERITIES)}
DEFAULT_POLICY = "default_policy.toml"
_RULE_KEYS = {"path", "severity", "reason", "tolerance", "compare"}


@dataclass(frozen=True)
class Rule:
    path: str
    severity: str
    reason: str
    tolerance: float | None = None
    #: "set" compares a list without regard to order (a group's engine list); default "sequence".
    compare: str = "sequence"
    origin: str = ""
    #: The pattern as regex source (see pattern_source); compiled only when a rule is matched on its own.
    source: str = ""

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.source)

    def matches(self, joined: str) -> bool:
        return bool(self.source) and self.regex.match(joined) is not None


_SEP = "\x1f"  # separates keys for matching; never part of a key the collectors emit


def join(parts: Path) -> str:
    """Keys as one string for matching: each key preceded by the separator."""
    return "".join(_SEP + p for p in parts)


def compile_pattern(pattern: Path) -> re.Pattern[str]:
    """``*`` is one key, ``**`` zero or more keys, ``ab*`` one key starting with ``ab``, anything else a literal key."""
    return re.compile(pattern_source(pattern))


def pattern_source(pattern: Path) -> str:
    """The regex source of compile_pattern; raises ValueError on a malformed key. Policies compile rules per
    first-key bucket, so checking a rule needs no compiling of its own."""
    out = []
    for part in pattern:
        if part == "**":
            out.append(f"(?:{_SEP}[^{_SEP}]+)*")
        elif part == "*":
            out.append(f"{_SEP}[^{_SEP}]+")
        elif "**" in part:
            raise ValueError(f"'**' must be a whole key, not part of {part!r}")
        elif "*" in part:
            # A glob inside one key (``ecc_*``, ``power_*_mw``): '*' is any run of characters of that key.
            out.append(_SEP + f"[^{_SEP}]*".join(re.escape(piece) for piece in part.split("*")))
        else:
            out.append(_SEP + re.escape(part))
    return "".join(out) + r"\Z"


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
            where = f"rule {n} ({item['path']})"
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
        if tolerance is not None and (
            isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0
        ):
            raise PolicyError(f"{where}: 'tolerance' must be a non-negative number", origin)
        compare = item.get("compare", "sequence")
        if compare not in ("sequence", "set"):
            raise PolicyError(f"{where}: 'compare' must be 'sequence' or 'set'", origin)
        try:
            parts = split_path(path)
            source = pattern_source(parts)
        except ValueError as err:
            raise PolicyError(f"{where}: bad pattern: {err}", origin) from err
        rules.append(
            Rule(path, severity, reason, None if tolerance is None else float(tolerance), compare, origin, source)
        )
    return rules


class Policy:
    """An ordered rule list, matched fast: rules are bucketed by the path's first key, each bucket is
    one alternation regex (Python tries alternatives in order, so the first rule that matches wins,
    as in a linear scan), and results are cached per path (snapshots repeat paths across GPUs and WQs)."""

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self._cache: dict[Path, Rule | None] = {}
        self._buckets: dict[str, tuple[re.Pattern[str] | None, list[Rule]]] = {}
        self._firsts = [_first_key_pattern(r) for r in rules]

    def _bucket(self, first: str) -> tuple[re.Pattern[str] | None, list[Rule]]:
        if first not in self._buckets:
            rules = [r for r, f in zip(self.rules, self._firsts, strict=True) if f is None or f.match(first)]
            alternation = "|".join(f"(?P<r{i}>{r.source})" for i, r in enumerate(rules) if r.source)
            self._buckets[first] = (re.compile(alternation) if alternation else None, rules)
        return self._buckets[first]

    def rule_for(self, parts: Path) -> Rule | None:
        try:
            return self._cache[parts]
        except KeyError:
            pass
        regex, rules = self._bucket(parts[0]) if parts else (None, [])
        m = regex.match(join(parts)) if regex else None
        rule = self._cache[parts] = rules[int(m.lastgroup[1:])] if m and m.lastgroup else None
        return rule

    def severity(self, parts: Path) -> str:
        rule = self.rule_for(parts)
        return rule.severity if rule else "warning"


def _first_key_pattern(rule: Rule) -> re.Pattern[str] | None:
    """A regex for the keys a rule's first pattern key can match; None when any key can (``*``, ``**``)."""
    first = split_path(rule.path)[0]
    if first in ("*", "**"):
        return None
    return re.compile("[^\x1f]*".join(re.escape(piece) for piece in first.split("*")) + r"\Z")


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
