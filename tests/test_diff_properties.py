"""Property tests on generated snapshots: diff(a, a) is clean; diff(b, a) mirrors diff(a, b)."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoststate.diff import compare

KEYS = st.sampled_from(["state", "mode", "clients", "size", "wq0.0", "dsa0", "GPU-1", "power_limit_mw", "a b",
                        "observed", "args", "engines", "x"])
SCALARS = st.one_of(st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=8))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4))
TABLES = st.recursive(st.dictionaries(KEYS, VALUES, max_size=4),
                      lambda inner: st.dictionaries(KEYS, st.one_of(VALUES, inner), max_size=4), max_leaves=20)
SECTIONS = ("system", "dsa", "gpu", "vllm", "packages")
STATUSES = st.sampled_from(["ok", "ok", "ok", "partial", "timeout", "absent"])


@st.composite
def snapshots(draw):
    snap = {"hoststate": {"schema": 1, "version": "0.1.0", "digest": "sha256:x"}, "collectors": {}}
    for name in SECTIONS:
        snap["collectors"][name] = {"status": draw(STATUSES)}
        table = draw(TABLES)
        if table:
            snap[name] = table
    return snap


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MIRROR = {"added": "removed", "removed": "added", "changed": "changed", "unreadable": "unreadable",
          "coverage": "coverage"}


@SETTINGS
@given(snapshots())
def test_diff_with_itself_is_clean(a):
    """Equal snapshots differ nowhere; what one could not read stays unknown even against itself (fail closed):
    then every finding is such a region, and nothing else."""
    result = compare(a, copy.deepcopy(a), include_ignored=True)
    unknown = {name for name, entry in a.get("collectors", {}).items()
               if entry.get("status") in ("error", "timeout", "denied", "skipped")}
    assert {f.path for f in result.findings} <= unknown
    assert all(f.change == "unreadable" for f in result.findings)
    if not unknown:
        assert result.findings == [] and result.verdict == "clean"


@SETTINGS
@given(snapshots(), snapshots())
def test_diff_is_symmetric(a, b):
    ab = {f.path: f for f in compare(a, b, include_ignored=True).findings}
    ba = {f.path: f for f in compare(b, a, include_ignored=True).findings}
    assert ab.keys() == ba.keys()
    for path, f in ab.items():
        g = ba[path]
        assert g.change == MIRROR[f.change]
        assert (g.old, g.new) == (f.new, f.old)
        if "tolerance" not in f.reason + g.reason:  # tolerance is relative to the baseline, so not symmetric
            assert g.severity == f.severity
        assert g.rule == f.rule


@SETTINGS
@given(snapshots(), snapshots())
def test_verdict_and_counts_follow_findings(a, b):
    result = compare(a, b, include_ignored=True)
    for severity, n in result.counts.items():
        assert n == sum(1 for f in result.findings if f.severity == severity)
    expected = ("invalidating" if result.counts["invalidating"] else "warning" if result.counts["warning"]
                else "clean")
    assert result.verdict == expected
