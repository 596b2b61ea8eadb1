"""`hoststate snap` shows what each collector cost, and with -v where the command's own time went (start-up,
collecting, writing), so a slow snapshot can be explained without a profiler. Only the lines' form is checked:
tests never assert a time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIXTURES, PYTHONPATH

TREE = FIXTURES / "hosts" / "seed-baseline"
NAMES = ("system", "dsa", "accel_config", "gpu", "vllm", "env", "packages")
MS = r"\s+\d+\.\d ms"


def snap(tmp_path: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "hoststate", "snap", "--root", str(TREE), "-o",
                           str(tmp_path / "s.toml"), "--force", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_every_collector_line_has_its_cost(tmp_path: Path) -> None:
    err = snap(tmp_path)
    for name in NAMES:
        assert re.search(rf"^  {name}\s+\w+{MS}", err, re.M), (name, err)
    assert "start-up" not in err  # the control for -v below


def test_verbose_adds_start_up_collecting_and_writing(tmp_path: Path) -> None:
    err = snap(tmp_path, "-v")
    lines = err.splitlines()
    phases = [ln.split()[0] for ln in lines if re.match(rf"^  (start-up|collect|write){MS}", ln)]
    assert phases == ["start-up", "collect", "write"], err
    assert lines.index(next(ln for ln in lines if ln.startswith("wrote "))) < len(lines) - 3  # after the write
    assert all(re.search(rf"^  {name}\s+\w+{MS}", err, re.M) for name in NAMES)


def test_quiet_wins_over_verbose(tmp_path: Path) -> None:
    assert snap(tmp_path, "-q", "-v") == ""
