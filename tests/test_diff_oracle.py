"""Differential test of the diff engine against an independent oracle that flattens every leaf of both sides.

The oracle knows nothing of the engine: it lists every (path, value) pair that is not a table on each side (a
list is one leaf, an empty table has none) and keeps the paths whose typed values differ, plus
``collectors.<name>.status`` where the statuses differ, plus each region a side could not read (a collector that
did not read, an ``unreadable`` entry) where neither side holds a value. `compare` must report exactly those paths,
for generated pairs of unrelated shapes with hostile keys, and for every ordered pair of the bundled and
fixture-tree snapshots.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoststate.diff import compare
from hoststate.paths import split_path
from hoststate.policy import Policy, default_policy, parse_rules
from hoststate.positions import align
from hoststate.snapshot import load
from tests.conftest import FIXTURES, HOSTS

#: Every difference is a finding under this policy: no set lists, no tolerance, nothing rated away.
EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "warning", "reason": "any"}]}, "exact.toml"))


# -- the oracle ----------------------------------------------------------------------------------------------------


def flatten(table: dict, prefix: tuple = ()) -> dict[tuple, Any]:
    out: dict[tuple, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def same(a: Any, b: Any) -> bool:
    """Typed equality: 1 != 1.0 != True, -0.0 != 0.0, NaN == NaN, datetimes equal only as written."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dt.datetime | dt.date | dt.time):
        return a.isoformat() == b.isoformat()
    return a == b


def oracle(a: dict, b: dict) -> set[tuple]:
    # Both sides with GPUs keyed by position, as compare keys them (hoststate.positions, tested on its own in
    # test_positions.py); from there on the oracle shares nothing with the engine.
    a, b = align(a, b)
    fa = flatten({k: v for k, v in a.items() if k != "collectors"})
    fb = flatten({k: v for k, v in b.items() if k != "collectors"})
    paths = {p for p in fa.keys() | fb.keys() if p not in fa or p not in fb or not same(fa[p], fb[p])}
    ca, cb = a.get("collectors", {}), b.get("collectors", {})
    for name in ca.keys() | cb.keys():
        if ca.get(name, {}).get("status") != cb.get(name, {}).get("status"):
            paths.add(("collectors", name, "status"))
    for region in unread(ca) + unread(cb):  # every unknown region, whatever either side holds there
        paths.add(region[:region.index("**")] if "**" in region else region)  # a '**' hides all below
    return paths


UNKNOWN_STATUS = ("error", "timeout", "denied", "skipped")


def unread(collectors: dict) -> list[tuple]:
    """Regions a snapshot says it could not read: a collector that did not read, or its non-absent entries."""
    out = []
    for name, entry in collectors.items():
        if entry.get("status") in UNKNOWN_STATUS:
            out.append((name,))
            continue
        for key, value in (entry.get("unreadable") or {}).items():
            if not str(value).startswith("absent: ") and str(value) not in ("ENOENT", "NotSupported"):
                out.append((name, *(("**",) if "/" in key else split_path(key))))
    return out


def found(a: dict, b: dict, policy: Policy = EXACT) -> set[tuple]:
    """The engine's finding paths, less the warnings about the policy itself (a rule that matched nothing)."""
    paths = [split_path(f.path) for f in compare(a, b, policy, include_ignored=True).findings
             if not (f.change == "coverage" and f.path.startswith("policy."))]
    assert len(paths) == len(set(paths)), "a path reported twice"
    return set(paths)


# -- generated pairs -------------------------------------------------------------------------------------------

#: Hostile keys among ordinary ones: private-looking (DeepDiff skipped ``__x`` by default), empty, dots, quotes,
#: bidi and zero-width characters, numeric-looking, very long, pattern characters.
HOSTILE = ["_", "_x", "__x", "__rope_hint", "__NV_PRIME_RENDER_OFFLOAD", "", ".", "a.b", '"', "'", "\\",
           "\u202ea", "a\u200b", "\u3164", "1", "-0", "1e3", "0x10", "nan", "k" * 300, "*", "**", "a*", "[0]"]
KEYS = st.sampled_from(["a", "b", "c", "state", "x y", "wq0.0", "GPU-1", "0", "dsa", "gpu", "é", *HOSTILE])
TIMES = st.one_of(
    st.datetimes(timezones=st.sampled_from([dt.timezone.utc, dt.timezone(dt.timedelta(hours=2))])),
    st.datetimes(), st.dates(), st.times(),
)
SCALARS = st.one_of(
    st.booleans(), st.integers(-3, 3), st.integers(-2**63, 2**63 - 1),
    st.floats(-3, 3, width=16), st.sampled_from([0.0, -0.0, 1.0, math.nan, math.inf, -math.inf]),
    st.text(max_size=3), st.sampled_from(["1", "true", "1.0", ""]), TIMES,
)
ARRAYS = st.lists(st.one_of(SCALARS, st.dictionaries(KEYS, SCALARS, max_size=2)), max_size=4)  # arrays of tables
TABLES = st.recursive(
    st.dictionaries(KEYS, st.one_of(SCALARS, ARRAYS), max_size=4),
    lambda inner: st.dictionaries(KEYS, st.one_of(SCALARS, ARRAYS, inner, st.just({})), max_size=5),
    max_leaves=24,
)
STATUS = st.sampled_from(["ok", "partial", "absent", "error", "timeout", "denied", "skipped"])
SECTIONS = ["system", "dsa", "gpu", "vllm", "env"]


@st.composite
def snapshots(draw: Any) -> dict:
    snap = {"hoststate": draw(TABLES)}
    snap["collectors"] = {name: {"status": draw(STATUS)} for name in draw(st.sets(st.sampled_from(SECTIONS)))}
    for name in draw(st.sets(st.sampled_from([*SECTIONS, "guard", "other"]))):
        snap[name] = draw(st.one_of(TABLES, SCALARS))
    return snap


@st.composite
def related(draw: Any) -> tuple[dict, dict]:
    """Two snapshots, often one derived from the other (few differences), sometimes unrelated."""
    a = draw(snapshots())
    if draw(st.booleans()):
        return a, draw(snapshots())
    b = {k: v for k, v in a.items()}
    for name in draw(st.sets(st.sampled_from([*SECTIONS, "hoststate"]), max_size=2)):
        b[name] = draw(st.one_of(TABLES, SCALARS, st.just(a.get(name, {}))))
    return a, b


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(related())
def test_generated_pairs_match_the_oracle(pair: tuple[dict, dict]) -> None:
    a, b = pair
    assert found(a, b) == oracle(a, b)


@pytest.mark.parametrize("key", HOSTILE)
def test_every_hostile_key_is_compared(key: str) -> None:
    """Each hostile key, at the top of a table and below one, in vLLM's argument tables and the environment."""
    for table, path in (("vllm", ("args", "hf_overrides", key)), ("env", (key,)), ("dsa", (key, "x"))):
        def snap(value: Any, table: str = table, path: tuple = path) -> dict:
            node: Any = value
            for part in reversed(path):
                node = {part: node}
            return {"hoststate": {}, table: node}

        a, b = snap(1), snap(2)
        assert found(a, b) == oracle(a, b) == {(table, *path)}
        assert compare(a, b).verdict != "clean"


def test_private_looking_keys_rate_as_their_plain_twins() -> None:
    """`--hf-overrides '{"__rope_hint": 1}'` against 2 is rated as the same change keyed `rope_hint`."""
    def snap(key: str, value: int) -> dict:
        return {"hoststate": {}, "vllm": {"args": {"hf_overrides": {key: value}}}, "env": {key.upper(): str(value)}}

    for key in ("rope_hint", "_rope_hint", "__rope_hint"):
        result = compare(snap(key, 1), snap(key, 2))
        assert {(f.path.split(".")[0], f.severity) for f in result.findings} == {
            (f.path.split(".")[0], f.severity) for f in compare(snap("rope_hint", 1), snap("rope_hint", 2)).findings}
        assert result.verdict == "invalidating", key


@pytest.mark.parametrize("old, new", [
    ({"t": 1}, 1), (1, {"t": 1}), ({"t": 1}, [1]), ([{"t": 1}], {"t": 1}), ({"t": {}}, {"t": []}),
    (dt.datetime(2026, 1, 1), {"t": dt.date(2026, 1, 1)}), ([dt.time(1, 2)], [dt.time(1, 2, 1)]),
    ([{"a": [{"b": 1}]}], [{"a": [{"b": 2}]}]), ({}, {"": ""}),
])
def test_shape_changes_match_the_oracle(old: Any, new: Any) -> None:
    a, b = {"hoststate": {}, "gpu": {"x": old}}, {"hoststate": {}, "gpu": {"x": new}}
    assert found(a, b) == oracle(a, b)
    assert found(b, a) == oracle(b, a)
    assert found(a, b)


def test_unrelated_top_levels_are_not_summarised() -> None:
    """DeepDiff >= 8 reports the whole root as one change when under a third of the keys are shared."""
    a = {"hoststate": {"schema": 1}, "gpu": {"count": 1}, "packages": {"torch": "2.1"}, "env": {"X": "1"}}
    b = {"hoststate": {"schema": 1}, "dsa": {"devices": {"dsa0": {"state": "enabled"}}}, "vllm": {"port": 1}}
    assert found(a, b) == oracle(a, b) == {("gpu", "count"), ("packages", "torch"), ("env", "X"),
                                           ("dsa", "devices", "dsa0", "state"), ("vllm", "port")}


def test_table_on_one_side_scalar_on_the_other() -> None:
    a = {"gpu": {"fabric": {"GPU-1": {"state": "completed", "clique_id": 3}}, "count": {"n": 1}}}
    b = {"gpu": {"fabric": "none", "count": 1}}
    assert found(a, b) == oracle(a, b) == {("gpu", "fabric", "GPU-1", "state"), ("gpu", "fabric", "GPU-1", "clique_id"),
                                           ("gpu", "fabric"), ("gpu", "count", "n"), ("gpu", "count")}


@pytest.mark.parametrize("old, new", [(1, 1.0), (True, 1), (0.0, -0.0), ("1", 1), (1, [1]), ([1], [1.0]),
                                      (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "2026-01-01T00:00:00+00:00"),
                                      ([dt.date(2026, 1, 1)], ["2026-01-01"]), ([{"a": 1}], [{"a": True}])])
def test_typed_leaves_differ(old: Any, new: Any) -> None:
    assert found({"vllm": {"x": old}}, {"vllm": {"x": new}}) == {("vllm", "x")}


# -- long lists ------------------------------------------------------------------------------------------------


def test_long_lists_are_one_leaf() -> None:
    """A list is one leaf, compared whole (an ordered list diff would be quadratic in the lengths)."""
    items = [f"item{i}" for i in range(20_000)]
    shuffled = items[10_000:] + items[:10_000]
    a = {"vllm": {"argv": items, "other": list(range(20_000))}, "env": {"A": "1"}}
    b = {"vllm": {"argv": shuffled, "other": list(range(1, 20_001))}, "env": {"A": "2"}}
    assert found(a, b) == oracle(a, b) == {("vllm", "argv"), ("vllm", "other"), ("env", "A")}
    result = compare(a, b, EXACT)
    argv = next(f for f in result.findings if f.path == "vllm.argv")
    assert argv.old == items and argv.new == shuffled  # the finding carries the whole list


# -- every ordered pair of real snapshots ------------------------------------------------------------------------


def _tree_snapshot(root: str) -> dict:
    from hoststate.capture import collect
    from hoststate.collectors import Context

    return collect(Context(root=root, vllm_cmd="vllm serve m -tp 8 -O1", vllm_version="0.12.0"))


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict]:
    files = sorted((FIXTURES / "snapshots").glob("*.toml")) + sorted((FIXTURES / "real").glob("*snapshot*.toml"))
    snaps = {str(p.relative_to(FIXTURES)): load(str(p)) for p in files}
    trees = sorted(p for p in HOSTS.iterdir() if p.is_dir())
    assert len(files) >= 6 and len(trees) >= 9
    for tree in trees:
        snaps[f"--root {tree.name}"] = _tree_snapshot(str(tree))
    return snaps


def test_every_ordered_pair_of_bundled_and_tree_snapshots_matches_the_oracle(corpus: dict[str, dict]) -> None:
    pairs = 0
    for (na, a), (nb, b) in itertools.permutations(corpus.items(), 2):
        assert found(a, b) == oracle(a, b), (na, nb)
        pairs += 1
    assert pairs == len(corpus) * (len(corpus) - 1)


def test_default_policy_reports_the_oracle_paths_but_reordered_sets(corpus: dict[str, dict]) -> None:
    """Under the shipped policy only lists a rule compares as sets may drop out, and only when they are equal as
    multisets (checked here independently)."""
    from collections import Counter

    for (na, a), (nb, b) in itertools.permutations(corpus.items(), 2):
        expected, got = oracle(a, b), found(a, b, default_policy())
        assert got <= expected, (na, nb)
        fa, fb = (flatten(dict(s)) for s in align(a, b))
        for path in expected - got:
            assert isinstance(fa.get(path), list) and isinstance(fb.get(path), list), (na, nb, path)
            assert Counter(map(repr, fa[path])) == Counter(map(repr, fb[path])), (na, nb, path)


# -- the H200 VM against the seed's DGX tree, as a user runs it ------------------------------------------------------

SEED_CMD = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 -O1"
H200 = FIXTURES / "real" / "h200-snapshot.toml"


def _cli(*args: str) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, timeout=300)


def test_cli_diff_of_unrelated_hosts_reports_every_differing_leaf(tmp_path: Any) -> None:
    import json

    seed = tmp_path / "seed.toml"
    proc = _cli("snap", "--root", str(HOSTS / "seed-baseline"), "--vllm-cmd", SEED_CMD, "--vllm-version", "0.12.0",
                "-o", str(seed))
    assert proc.returncode == 0, proc.stderr
    proc = _cli("diff", str(H200), str(seed), "--all", "--format", "json")
    assert proc.returncode == 1, proc.stdout
    paths = {split_path(f["path"]) for f in json.loads(proc.stdout)["findings"]}
    assert paths == oracle(load(str(H200)), load(str(seed)))
    assert len(paths) > 500
    for expected in (("system", "cpu", "model_name"), ("dsa", "devices", "dsa0", "state"),
                     ("vllm", "cudagraph", "declared"), ("collectors", "dsa", "status")):
        assert expected in paths


@pytest.mark.parametrize("key", ['"a**b"', '"unbalanced', "", '""', "**", "a/b", '"\u202e"', "x." * 400])
def test_hostile_unreadable_entries_never_raise_and_fail_closed(key: str) -> None:
    """An ``unreadable`` entry whose key no pattern can spell (a hand-edited or hostile snapshot) hides its whole
    collector table at worst: the diff reports the region, rated invalidating where any rule inside is, and never
    raises."""
    a = {"hoststate": {}, "collectors": {"env": {"status": "partial", "unreadable": {key: "denied: EACCES [x]"}}}}
    b = {"hoststate": {}, "collectors": {"env": {"status": "partial", "unreadable": {key: "denied: EACCES [x]"}}}}
    result = compare(a, b)
    assert result.verdict == "invalidating"
    assert all(f.change == "unreadable" for f in result.findings)
