"""docs/performance.md shows the benchmark tables as the suite printed them (benchmarks/results/run-*.txt), and
names each of the issue's targets as met or not met."""

from __future__ import annotations

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
