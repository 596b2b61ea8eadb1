"""A diff at the input cap stays linear and bounded (benchmarks/bench_diff_cap.py measures the time): each leaf is
rated by trying only the rules that could match it, and the JSON report is written a finding at a time, with
every finding in it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.bench_diff_cap import SHAPES, shaped
from hoststate.diff import compare
from hoststate.paths import leaves
from hoststate.policy import default_policy
from hoststate.report import iter_json, render_diff, to_json
from tests.conftest import PYTHONPATH, REPO
from tests.test_verdict_properties import instances

#: At most this many rules are tried per leaf, whatever the number of rules in the policy.
CANDIDATES_MAX = 24


def test_each_leaf_tries_a_bounded_number_of_rules() -> None:
    policy = default_policy()
    assert len(policy.rules) > 10 * CANDIDATES_MAX  # the bound means something: most rules are never tried
    paths = [p for shape in SHAPES for p, _ in leaves(shaped(shape, 2000, 0))]
    paths += [p for r in policy.rules for p in instances(r.pattern.parts, "leaf") if p]  # every rule's own paths
    tried = {p: len(list(policy.candidates(p))) for p in paths}
    worst = max(tried, key=tried.__getitem__)
    assert tried[worst] <= CANDIDATES_MAX, (worst, tried[worst])


def test_the_streamed_json_report_is_the_whole_report() -> None:
    for shape in ("lists", "wide", "rated"):  # list values, text with non-ASCII and escapes, ratings shared
        a, b = shaped(shape, 600, 0), shaped(shape, 600, 1)
        if shape == "wide":
            b["env"]["VAR_0000001_PADDING"] = 'é "quoted" \\ \n\t\u202e'
            b["env"]["VAR_0000002_PADDING"] = [{"k": [1, {}]}, [], 1.5]
            for n, value in enumerate((True, False, 0, -7, 10**30, 1e300, -0.0, float("nan"), float("inf"), [], {},
                                       "", "\x00\x1f\u2028")):  # every scalar the fast encoder writes itself
                b["env"][f"VAR_{n + 3:07d}_PADDING"] = value
        result = compare(a, b, include_ignored=True)
        text = "".join(iter_json(result, baseline="a", current="b", batch=7))
        assert text == json.dumps(to_json(result, baseline="a", current="b"), indent=2, ensure_ascii=False) + "\n"
    result = compare(shaped("deep", 3000, 0), shaped("deep", 3000, 1))
    text = "".join(iter_json(result, baseline="a", current="b", batch=7))
    assert text == json.dumps(to_json(result, baseline="a", current="b"), indent=2, ensure_ascii=False) + "\n"
    assert text == render_diff(result, "json", baseline="a", current="b")
    report = json.loads(text)
    assert len(report["findings"]) == sum(report["counts"].values()) - report["counts"]["ignore"] >= 2999


def test_diff_json_at_scale_through_the_cli_loses_no_finding(tmp_path) -> None:
    """Every leaf differs: the report written piece by piece holds one finding per leaf, in order."""
    from benchmarks.bench_diff_cap import write_pair

    a, b, _ = write_pair(str(tmp_path), "wide", 256 * 1024)
    done = subprocess.run([sys.executable, "-m", "hoststate", "diff", a, b, "--format", "json"], cwd=REPO,
                          capture_output=True, text=True, env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    env = [f for f in report["findings"] if f["path"].startswith("env.")]
    assert len(env) == report["counts"]["invalidating"] and len(env) > 3000
    assert [f["path"] for f in env] == sorted(f["path"] for f in env)
    assert all(f["old"] != f["new"] for f in env)


def test_evidence_is_read_once_per_pattern_whatever_the_number_of_findings_it_rates(monkeypatch) -> None:
    """2,000 packages moved by a patch release, each rated by the serving path (``listed_in``): the snapshots are
    read for that pattern once a side, not once a finding (once a finding made such a diff at the cap quadratic:
    2,000 packages beside 100,000 other leaves took minutes)."""
    import hoststate.diff as diff
    from benchmarks.bench_diff_cap import _base

    read: list[str] = []
    real = diff._evidence
    monkeypatch.setattr(diff, "_evidence", lambda pattern, *rest: read.append(pattern) or real(pattern, *rest))

    def snap(patch: int) -> dict:
        return _base({"vllm": {"serving_path": ["torch", "vllm-x7"],
                               "packages": {f"vllm-x{i}": f"1.0.{patch}" for i in range(2000)}}})

    rated = {f.path: f.severity for f in compare(snap(0), snap(1)).findings}
    assert rated["vllm.packages.vllm-x7"] == "invalidating"  # on the serving path
    assert rated["vllm.packages.vllm-x8"] == "warning"  # a patch release of a package the server does not load
    assert sorted(read) == ["vllm.**.serving_path"] * 2


def test_a_pair_loaded_together_holds_each_key_once(tmp_path) -> None:
    """The current snapshot takes the baseline's key objects (hoststate.snapshot.share_keys): equal to what it
    would be alone, the baseline unchanged, and each key held once (at the cap that is 396,000 keys a side)."""
    from benchmarks.bench_diff_cap import write_pair
    from hoststate.snapshot import load

    a, b, _ = write_pair(str(tmp_path), "deep", 64 * 1024)
    base = load(a)
    alone, shared = load(b), load(b, like=base)
    assert shared == alone and load(a) == base
    pairs = [(p, q) for (p, _), (q, _) in zip(_key_paths(base), _key_paths(shared), strict=True)]
    assert len(pairs) > 1000 and all(p == q and p[-1] is q[-1] for p, q in pairs)


def _key_paths(tree: dict, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path, value) of every key, the keys themselves (not copies) in the path, in key order."""
    out = []
    for key in sorted(tree):
        out.append(((*prefix, key), tree[key]))
        if isinstance(tree[key], dict):
            out.extend(_key_paths(tree[key], (*prefix, key)))
    return out
