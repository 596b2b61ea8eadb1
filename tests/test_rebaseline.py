"""`hoststate rebaseline`: a new baseline only knowingly, with provenance; `show` displays it and a [guard] table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hoststate.digest import digest
from hoststate.snapshot import loads
from tests.conftest import HOSTS, PYTHONPATH

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"


def hs(*args: str, cwd=None, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The README's seed baseline, and guard's saved current snapshot of the experiment (refused)."""
    d = tmp_path_factory.mktemp("rebase")
    assert hs("snap", "-q", "--root", str(HOSTS / "seed-baseline"), "--vllm-cmd", SERVE + " -O1", "--vllm-version",
              "0.12.0", "-o", "base.toml", cwd=d).returncode == 0
    g = hs("guard", "--baseline", "base.toml", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE,
           "--vllm-version", "0.12.0", "--save-current", "now.toml", cwd=d)
    assert g.returncode == 3, g.stderr
    return d


def _accepts(stderr: str) -> list[str]:
    """The --accept options guard's 'next:' line names."""
    import shlex

    text = stderr[stderr.index("next: "):stderr.index("  or make this the baseline")]
    words = shlex.split(" ".join(text.split()))
    return [w for i, w in enumerate(words) if i and words[i - 1] == "--accept"]


def test_guard_advice_rebaselines_and_records_provenance(seed):
    before = (seed / "base.toml").read_bytes()
    g = hs("guard", "--baseline", "base.toml", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE,
           "--vllm-version", "0.12.0", "--save-current", "now.toml", "--force", cwd=seed)
    accepts = _accepts(g.stderr)
    assert "dsa.**" in accepts and "vllm.**" in accepts, g.stderr
    assert "hoststate rebaseline base.toml now.toml -o NEW.toml" in g.stderr
    args = [a for p in accepts for a in ("--accept", p)]
    r = hs("rebaseline", "base.toml", "now.toml", *args, "-o", "new.toml", "--by", "alice", cwd=seed)
    assert r.returncode == 0, r.stderr
    assert (seed / "base.toml").read_bytes() == before  # the old baseline is only read
    new = loads((seed / "new.toml").read_bytes(), "new.toml")
    prov = new["hoststate"]["rebaseline"]
    old = loads(before, "base.toml")
    assert prov["replaces"] == str(seed / "base.toml") and prov["replaces_digest"] == old["hoststate"]["digest"]
    assert prov["from"] == str(seed / "now.toml") and prov["by"] == "alice" and prov["accept"] == accepts
    assert prov["at"].tzinfo is not None
    paths = {a["path"] for a in prov["accepted"]}
    assert 'dsa.devices.dsa0.wqs."wq0.0".state' in paths and "vllm.cudagraph.declared" in paths
    assert len(prov["accepted"]) == prov["counts"]["invalidating"]
    assert "guard" not in new  # the guarded run's table is not carried into a baseline
    assert digest(new) == new["hoststate"]["digest"]  # provenance is bookkeeping: the digest stands
    # the new baseline matches the experiment: guard now passes
    again = hs("guard", "--baseline", "new.toml", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE,
               "--vllm-version", "0.12.0", "--", "true", cwd=seed)
    assert again.returncode == 0, again.stderr
    shown = hs("show", "new.toml", cwd=seed).stdout
    assert "rebaseline (this baseline replaces another):" in shown and "alice at " in shown
    assert "8 x dsa.devices.*.wqs.*.state (by dsa.**)" in shown
    assert all(len(line) <= 120 for line in shown.splitlines())


def test_rebaseline_refuses_what_is_not_accepted_and_writes_nothing(seed):
    r = hs("rebaseline", "base.toml", "now.toml", "--accept", "dsa.**", "-o", "partial.toml", cwd=seed)
    assert r.returncode == 3, r.stderr
    assert not (seed / "partial.toml").exists()
    assert "REFUSED (" in r.stderr and "vllm.cudagraph.declared" in r.stderr and "ACCEPTED (" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("hoststate: ") and "nothing written" in r.stderr


def test_rebaseline_never_overwrites_silently(seed):
    (seed / "taken.toml").write_text("keep me")
    r = hs("rebaseline", "base.toml", "now.toml", "--accept", "**", "-o", "taken.toml", cwd=seed)
    assert r.returncode == 2 and (seed / "taken.toml").read_text() == "keep me", r.stderr
    r = hs("rebaseline", "base.toml", "now.toml", "--accept", "**", "-o", "base.toml", "--force", cwd=seed)
    assert r.returncode == 2, r.stderr  # never over an input, even with --force
    r = hs("rebaseline", "base.toml", "now.toml", "--accept", "**", "-o", "taken.toml", "--force", cwd=seed)
    assert r.returncode == 0, r.stderr
    assert loads((seed / "taken.toml").read_bytes(), "t")["hoststate"]["rebaseline"]["accept"] == ["**"]


def test_show_displays_a_saved_guard_table(seed):
    shown = hs("show", "now.toml", cwd=seed)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "guard (this snapshot is a guarded run's):" in text
    assert "verdict                refused (" in text
    assert "8 x dsa.devices.*.wqs.*.state" in text
    assert all(len(line) <= 120 for line in text.splitlines())
