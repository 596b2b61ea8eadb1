"""Verdict behaviours that scripts/mutate.py's mutants break: each test here fails under at least one of them.

- ``--allow-unreadable`` accepts only what could not be read: a changed invalidating value still refuses;
- a tolerance is measured against the baseline, not the larger of the two values;
- the shipped severity order and a finding's change kind decide guard's verdict.
"""

from __future__ import annotations

import copy
from typing import Any

from hoststate.diff import compare
from hoststate.guard import ALLOW_UNREADABLE, evaluate
from hoststate.paths import leaves
from hoststate.policy import Policy, default_policy, default_rules, parse_rules
from hoststate.snapshot import load
from tests.conftest import FIXTURES

SEED = FIXTURES / "snapshots" / "seed-baseline.toml"


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, list):
        return [*value, "extra"]
    return f"{value}-other"


def _drifted_and_denied() -> tuple[dict, dict, str]:
    """The seed baseline, and a current snapshot whose dsa collector was denied and one invalidating value outside
    dsa changed: the path of that value."""
    base = load(str(SEED))
    cur = copy.deepcopy(base)
    cur["collectors"]["dsa"] = {"status": "denied", "reason": "EACCES"}
    cur.pop("dsa", None)
    policy = default_policy()
    path = next(p for p, _ in leaves({k: v for k, v in base.items() if k not in ("hoststate", "collectors", "dsa")})
                if policy.severity(p) == "invalidating")
    node = cur
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = _changed(node[path[-1]])
    return base, cur, ".".join(path)


def test_allow_unreadable_accepts_what_was_not_read_and_nothing_that_changed() -> None:
    base, cur, changed = _drifted_and_denied()
    result = evaluate(base, current=cur, allow_unreadable=True)
    assert result.verdict == "refused"
    assert [f.change for f in result.refused] == ["changed"] and result.refused[0].path.endswith(
        changed.rsplit(".", 1)[-1])
    assert result.accepted and {f.change for f in result.accepted} == {"unreadable"}
    assert any(f.path == "dsa" for f in result.accepted)
    without = evaluate(base, current=cur)
    assert {f.change for f in without.refused} == {"changed", "unreadable"} and not without.accepted
    assert ALLOW_UNREADABLE == "--allow-unreadable"


def test_accepting_what_could_not_be_read_makes_the_run_non_comparable() -> None:
    base, cur, _ = _drifted_and_denied()
    cur = copy.deepcopy(base)
    cur["collectors"]["dsa"] = {"status": "denied", "reason": "EACCES"}
    cur.pop("dsa", None)
    assert evaluate(base, current=cur).verdict == "refused"
    assert evaluate(base, current=cur, allow_unreadable=True).verdict == "non-comparable"
    assert evaluate(base, current=copy.deepcopy(base)).verdict == "comparable"


def _tolerant(tolerance: float) -> Policy:
    rule = {"path": "system.memory.total_bytes", "severity": "invalidating", "reason": "t", "tolerance": tolerance}
    return Policy(parse_rules({"rule": [rule]}, "t.toml") + list(default_rules()))


def _memory(total: int) -> dict:
    return {"hoststate": {}, "collectors": {"system": {"status": "ok"}}, "system": {"memory": {"total_bytes": total}}}


def test_a_tolerance_is_relative_to_the_baseline_not_to_the_larger_value() -> None:
    policy = _tolerant(0.5)
    # 100 -> 190: a change of 90, more than half the baseline (50) though less than half the larger value (95)
    assert compare(_memory(100), _memory(190), policy).verdict == "invalidating"
    # 190 -> 100: the same change, within half of this baseline (95)
    assert compare(_memory(190), _memory(100), policy).verdict == "clean"
    assert compare(_memory(100), _memory(150), policy).verdict == "clean"  # exactly at the limit: within
    assert compare(_memory(100), _memory(151), policy).verdict == "invalidating"


def test_invalidating_outranks_warning_in_the_verdict_and_the_order_of_findings() -> None:
    base = _memory(100)
    base["system"]["memory"]["swap_bytes"] = 1
    cur = copy.deepcopy(base)
    cur["system"]["memory"] = {"total_bytes": 900, "swap_bytes": 2}
    rules = [{"path": "system.memory.total_bytes", "severity": "invalidating", "reason": "i"},
             {"path": "system.memory.swap_bytes", "severity": "warning", "reason": "w"}]
    result = compare(base, cur, Policy(parse_rules({"rule": rules}, "t.toml") + list(default_rules())))
    assert result.verdict == "invalidating"
    assert [f.severity for f in result.findings] == ["invalidating", "warning"]
    assert result.counts["invalidating"] == 1 and result.counts["warning"] == 1


def test_a_region_that_is_one_leaf_keeps_its_value_and_the_more_severe_rating() -> None:
    """The current side could not read ``system.memory.total_bytes``: it might even be a table now, which the
    catch-all rates invalidating, so the leaf's own milder rule cannot decide; the finding keeps the old value."""
    from hoststate import coverage

    base = _memory(100)
    cur = {"hoststate": {}, "collectors": {"system": {"status": "partial", "unreadable": {
        "memory.total_bytes": coverage.entry("denied", "EACCES", "proc/meminfo")}}}, "system": {"memory": {}}}
    rules = [{"path": "system.**", "severity": "invalidating", "reason": "all"},
             {"path": "system.memory.total_bytes", "severity": "info", "reason": "leaf"}]
    result = compare(base, cur, Policy(parse_rules({"rule": rules}, "t.toml") + list(default_rules())))
    found = [f for f in result.findings if f.path == "system.memory.total_bytes"]
    assert [(f.change, f.old, f.severity, f.rule) for f in found] == [("unreadable", 100, "invalidating", "system.**")]


def test_a_user_rule_that_could_match_but_does_not_is_reported() -> None:
    """``env.*.*`` is tried on every env leaf (its leading keys fit) and matches none: still a rule that rates
    nothing, so the diff says so; ``env.*`` matches and is not reported."""
    base = {"hoststate": {}, "collectors": {"env": {"status": "ok"}}, "env": {"FOO": "1", "BAR": "2"}}
    cur = copy.deepcopy(base)
    rules = [{"path": "env.*.*", "severity": "info", "reason": "never"},
             {"path": "env.*", "severity": "info", "reason": "always"}]
    result = compare(base, cur, Policy(parse_rules({"rule": rules}, "t.toml") + list(default_rules())))
    assert [f.path for f in result.findings if f.change == "coverage"] == ['policy."t.toml"."env.*.*"']
