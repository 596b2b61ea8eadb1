"""The verdict where values could not be read: generated region contents on both sides, generated policy layers.

Two promises (docs/policy.md, "Unreadable regions"):

- an unread region refuses at the rating of the most severe rule that could rate a path inside it, whatever
  either side holds there or elsewhere in the same table (no value the other side holds vouches for a path it
  does not hold);
- the rule and reason named, and the rating, never depend on the order of ``--policy`` files, and a user rule
  that overrides the default inside the region decides its rating.

The oracle is independent of the engine's region code: it instantiates concrete paths from every rule pattern
(``*`` as a key, ``**`` as none or one key), keeps those the region hides, and asks the policy how each one would be
rated if it had changed; the diff must be at least as severe as the most severe of them.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hoststate import coverage
from hoststate.diff import compare
from hoststate.policy import RANK, Policy, default_rules, load_policy, parse_rules

SECTIONS = ("dsa", "gpu", "system", "vllm", "env", "packages")
#: Keys that instantiate a wildcard: ordinary ones and names the shipped rules spell.
KEYS = st.sampled_from(["dsa0", "wq0.0", "GPU-0", "x", "VLLM_X", "NCCL_ALGO", "drivers", "devices", "args"])


def instances(parts: tuple[str, ...], fill: str = "w") -> list[tuple[str, ...]]:
    """Concrete paths matching a pattern: ``*`` and a glob become one key, ``**`` none or one key."""
    out: list[tuple[str, ...]] = [()]
    for part in parts:
        if part == "**":
            out = [p for q in out for p in (q, (*q, fill))]
        elif "*" in part:
            out = [(*q, part.replace("*", fill)) for q in out]
        else:
            out = [(*q, part) for q in out]
    return out


def witnesses(policy: Policy, region: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Concrete paths the region hides, one or more per rule that can reach into it."""
    paths = {p for r in policy.rules if r.pattern is not None for p in instances(r.pattern.parts)}
    paths |= set(instances((*region, "**")))
    return [p for p in paths if p and coverage.covers(region, p)]


def worst(findings: list[Any]) -> int:
    ranks = [RANK[f.severity] for f in findings if not f.path.startswith("policy.")]
    return min(ranks, default=RANK["ignore"] + 1)


def instantiate(pattern: tuple[str, ...], keys: list[str]) -> tuple[str, ...]:
    """One concrete path of a pattern, wildcards taken from ``keys``."""
    it = iter(keys)
    out: list[str] = []
    for part in pattern:
        if part == "**":
            continue
        out.append(next(it, "k") if "*" in part else part)
    return tuple(out)


def put(table: dict, path: tuple[str, ...], value: Any) -> None:
    node = table
    for key in path[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = node[key] = {}
        node = nxt
    node[path[-1]] = value


@st.composite
def contents(draw: Any, section: str) -> dict:
    """A table for ``section`` holding some of the paths the shipped rules name there, each with a value."""
    pats = sorted({r.pattern.parts for r in default_rules() if r.pattern is not None and r.pattern.parts[0] == section
                   and len(r.pattern.parts) > 1})
    table: dict = {}
    for pattern in draw(st.lists(st.sampled_from(pats), max_size=6)):
        path = instantiate(pattern[1:], draw(st.lists(KEYS, min_size=4, max_size=4)))
        if path:
            put(table, path, draw(st.one_of(st.integers(0, 3), st.sampled_from(["a", "b", ""]),
                                            st.lists(st.sampled_from(["a", "b"]), max_size=2))))
    return table


@st.composite
def unread_region(draw: Any, section: str) -> tuple[dict, tuple[str, ...]]:
    """A collector entry that declares a region of ``section`` unknown, and the region's parts."""
    if draw(st.booleans()):
        status = draw(st.sampled_from(["denied", "error", "timeout"]))
        return {"status": status, "reason": "EACCES"}, (section,)
    pats = sorted({r.pattern.parts[1:] for r in default_rules() if r.pattern is not None
                   and r.pattern.parts[0] == section and len(r.pattern.parts) > 1})
    sub = draw(st.sampled_from(pats))
    sub = sub[:draw(st.integers(1, len(sub)))]
    if sub == ("**",):
        sub = ("*",)
    cls = draw(st.sampled_from(["denied", "missing", "timeout", "error"]))
    key = coverage.format_pattern(sub)
    entry = {"status": "partial", "unreadable": {key: coverage.entry(cls, "EACCES", "sys/x")}}
    return entry, (section, *sub)


@st.composite
def pairs(draw: Any) -> tuple[dict, dict, tuple[str, ...], int]:
    """A baseline and a current snapshot, one of them declaring a region unknown; both sides hold generated values
    in that section (the unread side too: nothing it holds may vouch for what it could not read)."""
    section = draw(st.sampled_from(SECTIONS))
    entry, region = draw(unread_region(section))
    side = draw(st.integers(0, 1))
    snaps = []
    for n in (0, 1):
        snap: dict = {"hoststate": {}, "collectors": {section: {"status": "ok"}}}
        if n == side:
            snap["collectors"][section] = entry
        body = draw(contents(section))
        if n == side and draw(st.booleans()):
            body = coverage.prune(body, [region[1:]]) if len(region) > 1 else {}
        if body or draw(st.booleans()):
            snap[section] = body
        snaps.append(snap)
    return snaps[0], snaps[1], region, side


@functools.cache
def shipped() -> Policy:
    """One Policy of the shipped rules for every example: what it caches (each path's winner, each region's
    rule) is the same in every example, and rule_for's cache is checked against a scan of every rule elsewhere
    (test_perf_shortcuts)."""
    return Policy(list(default_rules()))


@settings(max_examples=300, deadline=None)
@given(pairs())
def test_an_unread_region_refuses_at_its_most_severe_rule_whatever_either_side_holds(case: Any) -> None:
    base, cur, region, _ = case
    policy = shipped()
    result = compare(base, cur, policy)
    hidden = witnesses(policy, region)
    expected = min(RANK[policy.severity(p)] for p in hidden)
    assert worst(result.findings) <= expected, (region, [(f.path, f.severity) for f in result.findings])
    named = coverage.format_pattern(region[:region.index("**")] if "**" in region else region)
    assert any(f.path == named and f.change == "unreadable" for f in result.findings), named


def test_baseline_drivers_do_not_vouch_for_devices_a_denied_dsa_could_not_show() -> None:
    """The case that failed open: the baseline's dsa holds drivers but no devices, the current dsa is denied."""
    base = {"hoststate": {}, "collectors": {"dsa": {"status": "ok"}}, "dsa": {"drivers": ["idxd"]}}
    cur = {"hoststate": {}, "collectors": {"dsa": {"status": "denied", "reason": "EACCES"}}}
    result = compare(base, cur)
    region = [f for f in result.findings if f.path == "dsa"]
    assert result.verdict == "invalidating"
    assert [f.severity for f in region] == ["invalidating"]
    assert region[0].rule.startswith("dsa.") and "rated as the most severe rule inside" in region[0].reason


# -- order never decides ---------------------------------------------------------------------------------------

PATTERNS = st.sampled_from(["dsa.**", "dsa.devices.**", "dsa.devices.*", "dsa.devices.*.state", "dsa.drivers",
                            "dsa.*", "gpu.**", "gpu.devices.*.power_limit_mw", "env.NCCL_*", "env.*", "**",
                            "system.**", "dsa.devices.*.wqs.**"])
SEVERITY = st.sampled_from(["invalidating", "warning", "info", "ignore"])
REASON = st.sampled_from(["r1", "r2", "a reason"])


@st.composite
def user_files(draw: Any) -> list[dict]:
    return [{"rule": [{"path": draw(PATTERNS), "severity": draw(SEVERITY), "reason": draw(REASON)}
                      for _ in range(draw(st.integers(1, 3)))]} for _ in range(draw(st.integers(2, 3)))]


def shown(result: Any) -> list[tuple[str, str, str, str, str]]:
    return [(f.path, f.change, f.severity, f.rule, f.reason) for f in result.findings]


@settings(max_examples=120, deadline=None)
@given(user_files(), pairs())
def test_permuting_policy_files_gives_identical_findings(files: list[dict], case: Any) -> None:
    base, cur, _, _ = case
    layers = [parse_rules(doc, f"p{n}.toml") for n, doc in enumerate(files)]
    results = {tuple(shown(compare(base, cur, Policy([r for layer in order for r in layer] + list(default_rules())))))
               for order in itertools.permutations(layers)}
    assert len(results) == 1


@settings(max_examples=120, deadline=None)
@given(SEVERITY, pairs())
def test_a_user_rule_over_the_whole_region_decides_its_rating(severity: str, case: Any) -> None:
    base, cur, region, _ = case
    path = coverage.format_pattern((*(region[:region.index("**")] if "**" in region else region), "**"))
    user = parse_rules({"rule": [{"path": path, "severity": severity, "reason": "user says"}]}, "mine.toml")
    result = compare(base, cur, Policy(user + list(default_rules())), include_ignored=True)
    named = coverage.format_pattern(region[:region.index("**")] if "**" in region else region)
    found = [f for f in result.findings if f.path == named]
    assert [(f.severity, f.rule) for f in found] == [(severity, path)]


def test_the_region_rule_is_the_same_through_policy_files_in_either_order(tmp_path: Path) -> None:
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text('[[rule]]\npath = "dsa.devices.**"\nseverity = "warning"\nreason = "one"\n')
    two.write_text('[[rule]]\npath = "dsa.drivers"\nseverity = "warning"\nreason = "two"\n')
    cur = {"hoststate": {}, "collectors": {"dsa": {"status": "denied"}}}
    base = {"hoststate": {}, "collectors": {"dsa": {"status": "ok"}}, "dsa": {"drivers": ["idxd"]}}
    found = [shown(compare(base, cur, load_policy([str(a), str(b)]))) for a, b in ((one, two), (two, one))]
    assert found[0] == found[1]
    region = [f for f in found[0] if f[0] == "dsa"]
    # the user's rules override the default under dsa.devices and at dsa.drivers; the rest of dsa (module,
    # cdevs, pci, crypto, the catch-all) still rates by the shipped rules
    assert region and region[0][2] == "invalidating" and not region[0][3].startswith("dsa.devices.")


# -- the pattern index loses nothing ---------------------------------------------------------------------------

PART = st.sampled_from(["a", "b", "ab", "abc", "*", "**", "a*", "ab*", "*b", "a*c", "x"])
KEY = st.sampled_from(["a", "b", "ab", "abc", "ac", "x", "bb", "abcb", "", "q", "zzz"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(PART, min_size=1, max_size=4), min_size=1, max_size=12),
       st.lists(st.lists(KEY, min_size=1, max_size=5), min_size=1, max_size=12))
def test_the_pattern_index_finds_every_rule_and_region_that_matches(patterns: list, paths: list) -> None:
    from hoststate.paths import PatternIndex

    rules = parse_rules({"rule": [{"path": ".".join(p), "severity": "warning", "reason": str(n)}
                                  for n, p in enumerate(patterns)]}, "x.toml")
    policy = Policy(rules)
    regions = PatternIndex()
    for n, p in enumerate(patterns):
        regions.add(tuple(p), n)
    for path in map(tuple, paths):
        found = set(map(id, policy.candidates(path)))
        assert {id(r) for r in rules if r.matches(path)} <= found
        ranked = [(r.precedence(path), n) for n, r in enumerate(rules) if r.matches(path)]
        assert policy.rule_for(path) is (rules[max(ranked)[1]] if ranked else None)  # the brute-force winner
        assert {n for n, p in enumerate(patterns) if coverage.covers(tuple(p), path)} <= set(regions.candidates(path))
