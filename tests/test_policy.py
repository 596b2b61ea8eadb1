"""Policy: pattern matching, the most specific rule wins (user files above the shipped defaults, order never
decides), errors that name the rule, and the shipped default policy."""

from __future__ import annotations

import re

import pytest

from hoststate.errors import PolicyError
from hoststate.paths import split_path
from hoststate.policy import SEVERITIES, default_policy, default_rules, load_policy, parse_rules
from tests.conftest import IN_CI


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
    (("gpu", "devices", "GPU-1", "ecc_mode_current"), "invalidating"),
    (("gpu", "devices", "GPU-1", "ecc_mode_pending"), "warning"),  # what runs is the current mode
    (("gpu", "devices", "GPU-1", "mig_mode_pending"), "warning"),
    (("vllm", "args", "port"), "info"),
    (("vllm", "args", "host"), "info"),
    (("vllm", "args", "api_key"), "info"),
    (("vllm", "args", "uvicorn_log_level"), "info"),
    (("vllm", "args", "ssl_certfile"), "info"),
    (("vllm", "args", "allowed_origins"), "info"),
    (("vllm", "args", "enable_log_requests"), "info"),
    (("vllm", "servers", "8001", "args", "port"), "info"),
    (("vllm", "servers", "8001", "args", "max_num_seqs"), "invalidating"),
    (("vllm", "servers", "8001", "env", "NCCL_DEBUG_FILE"), "info"),
    (("vllm", "servers", "8001", "env", "NCCL_DEBUG"), "warning"),  # a level left among the variables: TRACE
    (("vllm", "servers", "8001", "env", "NCCL_ALGO"), "invalidating"),
    (("vllm", "env", "HF_HUB_OFFLINE"), "warning"),
    (("vllm", "env", "MAX_JOBS"), "info"),
    (("env", "HF_HUB_OFFLINE"), "warning"),
    (("env", "MAX_JOBS"), "info"),
    (("env", "TORCHDYNAMO_DISABLE"), "invalidating"),
    (("vllm", "env", "TORCHDYNAMO_DISABLE"), "invalidating"),
    (("env", "LD_LIBRARY_PATH"), "invalidating"),
    (("vllm", "env", "LD_PRELOAD"), "invalidating"),
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
        from hoststate.paths import split_path

        probe = tuple("x" if k in ("*", "**") else k.replace("*", "x") for k in split_path(rule.path))
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


def _specificity_oracle(path: str, keys: tuple[str, ...]) -> tuple | None:
    """Every way the pattern can take the keys (exhaustive backtracking: fine for these short paths), each scored
    key by key (literal 3, glob (2, its literal characters), '*' 1, '**' 0); the best, or None when none matches."""
    parts = [p for n, p in enumerate(split_path(path)) if not (p == "**" and n and split_path(path)[n - 1] == "**")]
    best = None

    def walk(i: int, j: int, score: tuple) -> None:
        nonlocal best
        if j == len(parts):
            if i == len(keys) and (best is None or score > best):
                best = score
            return
        part = parts[j]
        if part == "**":
            walk(i, j + 1, score)
            if i < len(keys) and keys[i]:
                walk(i + 1, j, (*score, (0, 0)))
            return
        if i == len(keys) or not keys[i]:
            return
        if part == "*":
            walk(i + 1, j + 1, (*score, (1, 0)))
        elif "*" in part:
            if re.fullmatch(".*".join(map(re.escape, part.split("*"))), keys[i], re.S):
                walk(i + 1, j + 1, (*score, (2, len(part) - part.count("*"))))
        elif part == keys[i]:
            walk(i + 1, j + 1, (*score, (3, 0)))

    walk(0, 0, ())
    return best


KEYS = ["gpu", "dsa", "devices", "dsa0", "wqs", "wq0.0", "state", "x", "system", "cpufreq", "power_limit_mw", "vllm",
        "args", "port", "env", "NCCL_DEBUG", "servers", "8000", "cudagraph", "declared", "packages", "torch", "zzz", ""]
USER = [
    {"path": "gpu.devices.*.power_*_mw", "severity": "info"},
    {"path": "**.state", "severity": "ignore"},
    {"path": "*.x", "severity": "warning"},
    {"path": "**.w*q*.**.*e", "severity": "info"},
    {"path": "vllm.**.port", "severity": "ignore"},
    {"path": "vllm.args.*", "severity": "warning"},
]


def test_bucketed_matching_picks_what_an_exhaustive_scan_picks() -> None:
    """The fast matcher (first-key buckets, one table per pattern) picks the rule an exhaustive scan over every
    rule and every way each pattern can match picks: user layer first, then the best key-by-key score, then
    fewer '**', then the more severe rating."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hoststate.policy import RANK, Policy, default_rules, parse_rules

    user = parse_rules({"rule": USER}, "user.toml")
    rules = user + list(default_rules())
    fast = Policy(rules)

    def oracle(path: tuple[str, ...]):
        scored = []
        for r in rules:
            spec = _specificity_oracle(r.path, path)
            if spec is not None:
                doubles = sum(1 for n, p in enumerate(r.pattern.parts) if p == "**" and (
                    n == 0 or r.pattern.parts[n - 1] != "**"))
                scored.append(((r.layer, spec, -doubles, -RANK[r.severity]), r))
        if not scored:
            return None
        top = max(key for key, _ in scored)
        winners = [r for key, r in scored if key == top]
        assert len({(w.severity, w.one_side) for w in winners}) == 1, winners  # ties never split a rating
        return winners[0]

    @settings(max_examples=400, deadline=None, derandomize=IN_CI)
    @given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=7).map(tuple))
    def check(path: tuple[str, ...]) -> None:
        expected, got = oracle(path), fast.rule_for(path)
        assert (got is None) == (expected is None)
        if got is not None:
            assert (got.layer, got.path, got.severity) == (expected.layer, expected.path, expected.severity)

    check()


def test_shuffling_the_rules_never_changes_a_rating() -> None:
    """Order carries no meaning: any permutation of user and default rules rates every path the same."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hoststate.policy import Policy, default_rules, parse_rules

    rules = parse_rules({"rule": USER + [{"path": "vllm.args.port", "severity": "warning"},
                                         {"path": "vllm.args.port", "severity": "info", "reason": "same pattern"}]},
                        "user.toml") + list(default_rules())
    reference = Policy(rules)

    @settings(max_examples=60, deadline=None, derandomize=IN_CI)
    @given(st.integers(0, 2**32 - 1),
           st.lists(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6).map(tuple), min_size=1, max_size=30))
    def check(seed: int, paths: list[tuple[str, ...]]) -> None:
        import random

        order = list(rules)
        random.Random(seed).shuffle(order)  # a permutation of ~2000 rules drawn as one seed, not swap by swap
        shuffled = Policy(order)
        for path in paths:
            assert shuffled.rule_for(path) == reference.rule_for(path), path

    check()


def test_reordering_the_shipped_policy_changes_nothing() -> None:
    """Reversed, rotated and shuffled, the default policy rates every path of the bundled snapshots and a probe
    for every rule (with '**' as zero, one and two keys) exactly as shipped."""
    import random

    from hoststate.paths import leaves
    from hoststate.policy import Policy, default_rules
    from hoststate.positions import canonical
    from hoststate.snapshot import load
    from tests.conftest import FIXTURES

    rules = list(default_rules())
    probes: set[tuple[str, ...]] = set()
    for path in sorted(FIXTURES.glob("snapshots/*.toml")) + sorted(FIXTURES.glob("real/*-snapshot.toml")):
        probes.update(p for p, _ in leaves(canonical(load(str(path)))))
    for rule in rules:
        for fill in ((), ("x",), ("servers", "8000")):
            probe: list[str] = []
            for key in rule.pattern.parts:
                probe.extend(fill if key == "**" else ["x" if key == "*" else key.replace("*", "x")])
            if probe:
                probes.add(tuple(probe))
    shipped = Policy(rules)
    expected = {p: shipped.rule_for(p) for p in probes}
    rng = random.Random(20)
    orders = [rules[::-1], rules[len(rules) // 2:] + rules[:len(rules) // 2]]
    orders += [rng.sample(rules, len(rules)) for _ in range(3)]
    for order in orders:
        policy = Policy(order)
        assert {p: policy.rule_for(p) for p in probes} == expected
    assert len(probes) > 1000


@pytest.mark.parametrize("a, b, path", [
    ("vllm.args.port", "vllm.args.*", "vllm.args.port"),               # literal > '*'
    ("vllm.args.p*", "vllm.args.*", "vllm.args.port"),                  # glob > '*'
    ("vllm.args.po*", "vllm.args.p*", "vllm.args.port"),                # a glob with more literal characters
    ("vllm.args.*", "vllm.args.**", "vllm.args.port"),                  # '*' > '**'
    ("vllm.args.**", "vllm.**.port", "vllm.args.port"),                 # the longer run of literal keys first
    ("vllm.**.env.NCCL_DEBUG*", "vllm.**.env.*", "vllm.servers.8000.env.NCCL_DEBUG"),
    ("a.b", "a.b.**", "a.b"),                                           # fewer '**'
    ("**.state", "**", "dsa.devices.dsa0.state"),
])
def test_the_more_specific_pattern_wins_in_either_order(a, b, path) -> None:
    from hoststate.policy import Policy, parse_rules

    rules = parse_rules({"rule": [{"path": a, "severity": "ignore"}, {"path": b, "severity": "invalidating"}]}, "t")
    parts = split_path(path)
    assert Policy(rules).rule_for(parts).path == a
    assert Policy(rules[::-1]).rule_for(parts).path == a


def test_equally_specific_patterns_resolve_to_the_more_severe_rating() -> None:
    from hoststate.policy import Policy, parse_rules

    rules = parse_rules({"rule": [{"path": "a.x*", "severity": "info"}, {"path": "a.*y", "severity": "warning"},
                                  {"path": "a.*", "severity": "invalidating"}]}, "t")
    for order in (rules, rules[::-1], rules[1:] + rules[:1]):
        assert Policy(order).rule_for(("a", "xy")).severity == "warning"


def test_a_user_rule_beats_every_default_rule_whatever_its_pattern(tmp_path) -> None:
    f = tmp_path / "u.toml"
    f.write_text('[[rule]]\npath = "**"\nseverity = "info"\nreason = "lab: everything is context"\n')
    policy = load_policy([str(f)])
    assert policy.rule_for(("vllm", "args", "tensor_parallel_size")).origin == str(f)
    assert policy.rule_for(("gpu", "devices", "GPU0", "power_limit_mw")).severity == "info"


def test_unmatched_user_rules_are_found() -> None:
    from hoststate.policy import default_rules, parse_rules, unmatched_reason, unmatched_rules

    user = parse_rules({"rule": [{"path": "vllm.args.max_num_seqs", "severity": "info"},
                                 {"path": "vllm.argz.max_num_seqs", "severity": "info"},
                                 {"path": "gpu.devices.*.power_limit_mw", "severity": "info"}]}, "lab.toml")
    base = {"vllm": {"args": {"max_num_seqs": 8}}}
    current = {"gpu": {"devices": {"GPU0": {"power_limit_mw": 1}}}}
    found = unmatched_rules(user + list(default_rules()), base, current)
    assert [r.path for r in found] == ["vllm.argz.max_num_seqs"]
    assert "lab.toml" in unmatched_reason(found[0]) and "vllm.argz.max_num_seqs" in unmatched_reason(found[0])
    assert unmatched_rules(list(default_rules()), {}, {}) == []  # shipped rules never warn


@pytest.mark.parametrize("a, b, expected", [
    ("a.b", "a.b", True), ("a.b", "a.c", False), ("**", "x.y", True), ("a.**", "b.**", False),
    ("a.*.c", "a.**", True), ("gpu.devices.*.power_*", "gpu.**", True), ("a.*", "a", False), ("a.**", "a", True),
    ("**.x", "y.**", True), ("p_*", "*_q", True), ("ab*", "cd*", False), ("vllm.**", "vllm.args.port", True),
])
def test_intersects(a, b, expected) -> None:
    from hoststate.policy import intersects

    assert intersects(split_path(a), split_path(b)) is expected
    assert intersects(split_path(b), split_path(a)) is expected


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
    real = Pattern._advance

    def counting(self, states, key):
        nonlocal steps
        steps += len(states)
        return real(self, states, key)

    Pattern._advance = counting
    try:
        assert pattern.match(deep) is False
    finally:
        Pattern._advance = real
    assert steps <= (len(deep) + 1) * (len(pattern.parts) + 1)

    small = STARS[family](3)
    oracle, compiled = _regex_oracle(small), Pattern(split_path(small))

    @settings(max_examples=200, deadline=None, derandomize=IN_CI)
    @given(st.lists(st.sampled_from(["a", "ab", "b", "x", "zz", "aab", "aaa"]), max_size=9).map(tuple))
    def agrees(keys: tuple[str, ...]) -> None:
        assert compiled.match(keys) == bool(oracle.match("".join("\x1f" + k for k in keys)))

    agrees()


def test_a_pattern_matches_and_ranks_as_exhaustive_backtracking_does() -> None:
    """Any pattern of literals, globs, ``*`` and ``**`` (none, one: the path that takes its head and tail keys
    directly, or several: the table walk) matches the keys its regex matches and ranks them key by key as the
    best of every way to take them; keys include the empty key, which neither ``*`` nor ``**`` takes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hoststate.policy import Pattern

    parts = st.sampled_from(["a", "b", "ab", "*", "a*", "*b", "**"])
    keys = st.sampled_from(["a", "b", "ab", "abb", "ba", ""])

    @settings(max_examples=1500, deadline=None, derandomize=IN_CI)
    @given(st.lists(parts, min_size=1, max_size=5).map(".".join), st.lists(keys, max_size=6).map(tuple))
    def agrees(path: str, path_keys: tuple[str, ...]) -> None:
        pattern = Pattern(split_path(path))
        assert pattern.match(path_keys) == bool(_regex_oracle(path).match("".join("\x1f" + k for k in path_keys)))
        assert pattern.specificity(path_keys) == _specificity_oracle(path, path_keys), (path, path_keys)

    agrees()
