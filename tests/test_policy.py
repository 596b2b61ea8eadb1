"""Policy: pattern matching, user files first, errors that name the rule, and the shipped default policy."""

from __future__ import annotations

import re

import pytest

from hoststate.errors import PolicyError
from hoststate.paths import split_path
from hoststate.policy import SEVERITIES, default_policy, default_rules, load_policy, parse_rules


def rule_path(parts: tuple[str, ...]) -> str:
    rule = default_policy().rule_for(parts)
    assert rule is not None
    return rule.severity


@pytest.mark.parametrize("parts, severity", [
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "state"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "mode"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "type"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "size"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "priority"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "group_id"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "threshold"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "op_config"), "invalidating"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "clients"), "info"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "occupancy"), "ignore"),
    (("dsa", "devices", "dsa0", "wqs", "wq0.0", "cdev_minor"), "ignore"),
    (("dsa", "devices", "dsa0", "state"), "invalidating"),
    (("dsa", "devices", "dsa0", "clients"), "info"),
    (("dsa", "devices", "dsa0", "cdev_major"), "ignore"),
    (("accel_config", "saved", "matches_live"), "warning"),
    (("vllm", "args", "tensor_parallel_size"), "invalidating"),
    (("vllm", "args", "speculative_config", "method"), "invalidating"),
    (("vllm", "cudagraph", "declared"), "invalidating"),
    (("vllm", "servers", "8000", "cudagraph", "declared"), "invalidating"),
    (("vllm", "model"), "invalidating"),
    (("vllm", "version"), "invalidating"),
    (("vllm", "env", "VLLM_USE_V1"), "invalidating"),
    (("vllm", "pid"), "ignore"),
    (("gpu", "devices", "GPU-1", "power_limit_mw"), "invalidating"),
    (("gpu", "devices", "GPU-1", "clocks_applications_sm_mhz"), "invalidating"),
    (("gpu", "devices", "GPU-1", "ecc_mode_pending"), "invalidating"),
    (("gpu", "devices", "GPU-1", "mig_mode_current"), "invalidating"),
    (("gpu", "devices", "GPU-1", "compute_mode"), "invalidating"),
    (("gpu", "devices", "GPU-1", "nvlink", "links_active"), "invalidating"),
    (("gpu", "devices", "GPU-1", "persistence_mode"), "warning"),
    (("gpu", "devices", "GPU-1", "observed", "clocks_sm_mhz"), "ignore"),
    (("gpu", "driver_version"), "invalidating"),
    (("gpu", "topology", "GPU0", "GPU1"), "invalidating"),
    (("system", "cpufreq", "governor", "0-223"), "invalidating"),
    (("system", "cpufreq", "no_turbo"), "invalidating"),
    (("system", "cpu", "smt_active"), "invalidating"),
    (("system", "thp", "enabled"), "invalidating"),
    (("system", "numa", "balancing"), "invalidating"),
    (("system", "kernel", "release"), "invalidating"),
    (("hoststate", "hostname"), "info"),
    (("hoststate", "taken_at"), "ignore"),
    (("packages", "torch"), "invalidating"),
    (("something", "new"), "warning"),
])
def test_default_policy_rates_the_issue_paths(parts, severity):
    assert rule_path(parts) == severity


def test_every_default_rule_has_an_actionable_reason_and_catch_all_is_last():
    rules = default_rules()
    assert all(r.severity in SEVERITIES and len(r.reason) >= 30 for r in rules)
    assert rules[-1].path == "**" and rules[-1].severity == "warning"
    assert len({r.path for r in rules}) == len(rules), "duplicate pattern: the second can never match"


def test_every_default_rule_is_reachable():
    """A rule shadowed by an earlier, more general one is dead data: each rule must win for its own path."""
    policy = default_policy()
    for rule in default_rules():
        probe = tuple("x" if k in ("*", "**") else k.replace("*", "x") for k in rule.path.replace('"', "").split("."))
        probe = tuple(k for k in probe if k != "x") if rule.path == "**" else probe
        assert policy.rule_for(probe or ("zzz",)) is not None
        if "**" not in rule.path:
            assert policy.rule_for(probe) == rule, f"{rule.path} is shadowed by {policy.rule_for(probe).path}"


def test_patterns_star_doublestar_and_in_key_globs():
    rules = parse_rules({"rule": [
        {"path": "a.*.c", "severity": "info"}, {"path": "a.**", "severity": "warning"},
        {"path": "g.power_*_mw", "severity": "ignore"}, {"path": "**", "severity": "invalidating"}]}, "t")
    from hoststate.policy import Policy

    p = Policy(rules)
    assert p.severity(("a", "b", "c")) == "info"
    assert p.severity(("a", "b", "x", "c")) == "warning"
    assert p.severity(("a",)) == "warning"  # ** matches zero keys
    assert p.severity(("g", "power_limit_mw")) == "ignore"
    assert p.severity(("g", "power_limit")) == "invalidating"


def test_user_files_come_first(tmp_path):
    f = tmp_path / "u.toml"
    f.write_text('[[rule]]\npath = "packages.*"\nseverity = "ignore"\nreason = "stack pinned by image"\n')
    policy = load_policy([str(f)])
    assert policy.rule_for(("packages", "torch")).origin == str(f)
    assert policy.rule_for(("packages", "torch")).severity == "ignore"


@pytest.mark.parametrize("rule, message", [
    ({"path": "a", "severity": "critical"}, "rule 1 (a): severity 'critical' is not one of"),
    ({"severity": "info"}, "rule 1: 'path' is missing"),
    ({"path": 5, "severity": "info"}, "rule 1: 'path' is missing or not a string"),
    ({"path": "a.b**", "severity": "info"}, "rule 1 (a.b**): bad pattern"),
    ({"path": 'a."b', "severity": "info"}, "bad pattern"),
    ({"path": "a", "severity": "info", "tolerance": -1}, "'tolerance' must be a non-negative number"),
    ({"path": "a", "severity": "info", "tolerance": True}, "'tolerance' must be a non-negative number"),
    ({"path": "a", "severity": "info", "compare": "bag"}, "'compare' must be"),
    ({"path": "a", "severity": "info", "one_side": "maybe"}, "one_side 'maybe' is not one of"),
    ({"path": "a", "severity": "info", "sevrity": "x"}, "unknown key(s) ['sevrity']"),
])
def test_malformed_rules_name_the_rule(rule, message):
    with pytest.raises(PolicyError) as err:
        parse_rules({"rule": [rule]}, "mine.toml")
    assert message in str(err.value) and "mine.toml" in str(err.value)


def _regex_oracle(path: str) -> re.Pattern[str]:
    """The pattern syntax as a regex over keys joined with \x1f: an independent statement of the semantics
    (fine for the short patterns here; a backtracking regex is what the product must not use)."""
    out = []
    for part in split_path(path):
        if part == "**":
            out.append("(?:\x1f[^\x1f]+)*")
        elif part == "*":
            out.append("\x1f[^\x1f]+")
        else:
            out.append("\x1f" + "[^\x1f]*".join(re.escape(p) for p in part.split("*")))
    return re.compile("".join(out) + r"\Z")


def test_bucketed_matching_equals_a_linear_first_match_scan() -> None:
    """The fast matcher (first-key buckets, key-by-key patterns) picks the rule a plain regex scan would."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hoststate.policy import Policy, default_rules, parse_rules

    user = parse_rules({"rule": [
        {"path": "gpu.devices.*.power_*_mw", "severity": "info"},
        {"path": "**.state", "severity": "ignore"},
        {"path": "*.x", "severity": "warning"},
        {"path": "**.w*q*.**.*e", "severity": "info"},
    ]}, "user.toml")
    rules = user + list(default_rules())
    oracle = [(_regex_oracle(r.path), r) for r in rules]
    fast = Policy(rules)
    keys = st.sampled_from(["gpu", "dsa", "devices", "dsa0", "wqs", "wq0.0", "state", "x", "system", "cpufreq",
                            "power_limit_mw", "vllm", "args", "cudagraph", "declared", "packages", "torch", "zzz", ""])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(keys, min_size=1, max_size=7).map(tuple))
    def check(path: tuple[str, ...]) -> None:
        joined = "".join("\x1f" + k for k in path)
        linear = next((r for regex, r in oracle if regex.match(joined)), None)
        assert fast.rule_for(path) is linear

    check()


#: Pattern families that make a backtracking regex run for minutes at n = 15..30 (n: how many stars).
STARS = {
    "one-key stars": lambda n: "*." * n + "x",
    "any-key stars": lambda n: "**." * n + "x",
    "globs": lambda n: ".".join(["a*" * n] * 3),
    "mixed": lambda n: ".".join(["**", "*"] * n) + ".zz",
    "glob in a deep path": lambda n: "**." + "*a" * n + "*b",
}


@pytest.mark.parametrize("family", sorted(STARS))
def test_many_stars_match_in_linear_steps(family) -> None:
    """Every match is bounded by keys x pattern steps. Counted, not timed: the matcher's work is the number of
    positions it carries from key to key. The semantics are checked against the regex oracle at a size where
    backtracking is still cheap."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hoststate.policy import Pattern

    pattern = Pattern(split_path(STARS[family](30)))
    deep = tuple(["a" * 40] * 60)  # 60 keys of 40 'a's, no final 'x'/'zz'/'b': the worst case for backtracking
    steps = 0
    real = Pattern._close

    def counting(self, states):
        nonlocal steps
        steps += len(states)
        return real(self, states)

    Pattern._close = counting
    try:
        assert pattern.match(deep) is False
    finally:
        Pattern._close = real
    assert steps <= (len(deep) + 1) * (len(pattern.parts) + 1)

    small = STARS[family](3)
    oracle, compiled = _regex_oracle(small), Pattern(split_path(small))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(["a", "ab", "b", "x", "zz", "aab", "aaa"]), max_size=9).map(tuple))
    def agrees(keys: tuple[str, ...]) -> None:
        assert compiled.match(keys) == bool(oracle.match("".join("\x1f" + k for k in keys)))

    agrees()
