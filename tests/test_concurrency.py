"""Two writers at once never leave a corrupt, partial or silently replaced snapshot."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hoststate.errors import WriteError
from hoststate.snapshot import load, loads, write
from tests.conftest import HOSTS

SNAP = [sys.executable, "-m", "hoststate", "snap", "--root", str(HOSTS / "xeon-2s"), "--only", "system"]


def test_two_snaps_to_one_path_one_wins_one_refuses(tmp_path) -> None:
    for round_ in range(3):
        out = tmp_path / f"baseline-{round_}.toml"
        procs = [subprocess.Popen([*SNAP, "-o", str(out), "--label", f"w{i}"], stderr=subprocess.PIPE)
                 for i in range(2)]
        codes = sorted(p.wait(120) for p in procs)
        errors = [p.stderr.read().decode() for p in procs]
        assert codes == [0, 2], errors
        assert any("exists" in e for e in errors)
        snap = load(str(out))  # whole and valid
        assert snap["hoststate"]["label"] in ("w0", "w1")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".hoststate-")]


def test_forced_replacement_is_atomic_for_readers(tmp_path) -> None:
    out = tmp_path / "current.toml"
    first = subprocess.run([*SNAP, "-o", str(out)], capture_output=True, timeout=120)
    assert first.returncode == 0
    writers = [subprocess.Popen([*SNAP, "-o", str(out), "--force", "--label", f"w{i}"], stderr=subprocess.DEVNULL)
               for i in range(4)]
    reads = 0
    while any(w.poll() is None for w in writers):
        loads(out.read_bytes())  # a reader never sees a torn file
        reads += 1
    assert all(w.wait(120) == 0 for w in writers)
    assert reads > 0
    assert load(str(out))["hoststate"]["label"] in {f"w{i}" for i in range(4)}


def test_library_write_is_exclusive_without_force(tmp_path) -> None:
    target = str(tmp_path / "x.toml")
    write(target, "a = 1\n")
    with pytest.raises(WriteError, match="exists"):
        write(target, "a = 2\n")
    assert (tmp_path / "x.toml").read_text() == "a = 1\n"
