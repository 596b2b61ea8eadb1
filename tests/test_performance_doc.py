"""docs/performance.md shows the benchmark tables as the suite printed them (benchmarks/results/run-*.txt), and
names each of the issue's targets as met or not met."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from tests.conftest import REPO

DOC = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("machine", ["vm", "h200"])
def test_the_doc_shows_each_recorded_run_whole(machine: str) -> None:
    rows = _table((REPO / "benchmarks" / "results" / f"run-{machine}.txt").read_text(encoding="utf-8"))
    assert len(rows) > 10  # the header, its rule and the suite's rows
    assert "\n".join(rows) in DOC, f"docs/performance.md lacks the table of run-{machine}.txt as printed"


@pytest.mark.parametrize("target", ["guard -- true <= 1.1x snap", "diff of two snapshots of one host",
                                    "snap <= 1.0x pyperf collect_metadata",
                                    "snap --only gpu <= 1.3x a bare pynvml read", "show and check <= 0.7x pyperf show",
                                    "Growth"])
def test_each_target_is_named_met_or_not(target: str) -> None:
    line = next((ln for ln in DOC.splitlines() if ln.startswith(f"- **{target}")), None)
    assert line is not None, target
    assert re.search(r"(met|not met|linear)\b", line), line


def test_the_side_by_side_script_times_each_command_and_refuses_a_failing_one(tmp_path: pathlib.Path) -> None:
    """benchmarks/ab.py took the A/B rows (benchmarks/results/ab-*.txt): one line per command, in the order given;
    a command that fails is no timing."""
    import subprocess
    import sys

    samples = tmp_path / "samples.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.ab", f"--samples={samples}", "3", "one=true",
                           "two=sleep 0.02"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    lines = [line for line in done.stdout.splitlines() if "wall median" in line]
    assert [line.split()[0] for line in lines] == ["one", "two"]
    medians = [float(line.split()[3]) for line in lines]
    assert medians[1] > medians[0] and medians[1] >= 20  # the sleep is in the second's wall time, in ms
    paired = [line for line in done.stdout.splitlines() if "rounds' ratios" in line]
    assert len(paired) == 1 and paired[0].split()[:3] == ["two", "/", "one:"]
    assert float(paired[0].split("ratios ")[1].split()[0]) > 1  # the sleep is longer than true, round by round
    recorded = json.loads(samples.read_text(encoding="utf-8"))
    assert sorted(recorded) == ["one", "two"] and all(len(v) == 3 for v in recorded.values())
    assert min(recorded["two"]) >= 0.02
    failed = subprocess.run([sys.executable, "-m", "benchmarks.ab", "2", "bad=false"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    assert failed.returncode == 1 and "false: exit 1" in failed.stderr and failed.stdout == ""
