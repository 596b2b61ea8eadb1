"""docs/policy.md's precision table: every single change is snapped again with the real collectors, rated at the
severity written by hand for it, and matches its row in the document (so the table cannot go stale)."""

from __future__ import annotations

import re

import pytest

from scripts.precision_table import BEGIN, CASES, DOC, END, Workspace, row

SEVERITY = ("invalidating", "warning", "info", "ignore", "clean")


def _doc_rows() -> dict[int, str]:
    doc = DOC.read_text()
    block = doc[doc.index(BEGIN):doc.index(END)]
    return {int(m.group(1)): line for line in block.splitlines() if (m := re.match(r"^\| (\d+) \|", line))}


@pytest.fixture(scope="module")
def workspace():
    ws = Workspace()
    try:
        yield ws
    finally:
        ws.close()


@pytest.mark.parametrize("n", range(1, len(CASES) + 1), ids=[f"{c.collector}: {c.change}" for c in CASES])
def test_each_change_is_rated_as_expected_and_documented(n, workspace):
    case = CASES[n - 1]
    found = row(n, case, workspace)
    assert found.rating == case.expect, found.findings
    assert _doc_rows().get(n) == found.markdown(), "run: python scripts/precision_table.py"


def test_the_table_covers_every_collector_with_at_least_80_cases():
    assert len(CASES) >= 80
    assert len(_doc_rows()) == len(CASES)
    assert {c.collector for c in CASES} >= {"system", "dsa", "accel_config", "gpu", "vllm", "env", "packages"}
    assert {c.expect for c in CASES} <= set(SEVERITY)
    assert len({(c.collector, c.change) for c in CASES}) == len(CASES)


def test_every_row_names_the_reason_and_the_source_of_its_rule():
    for n, line in _doc_rows().items():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        reason, source = cells[5], cells[6]
        if cells[3] != "clean":
            assert len(reason) >= 30 and source not in ("", "-"), (n, line)


@pytest.mark.parametrize("flag", ["--port 8001", "--host 0.0.0.0", "--api-key sk-test-0123456789abcdef",
                                  "--uvicorn-log-level warning", "--ssl-keyfile key.pem", "--enable-log-requests",
                                  "--allowed-headers '[\"x\"]'"])
def test_server_plumbing_never_refuses_a_benchmark(flag, workspace):
    """The issue's false refusals, through the same path as the table: no invalidating finding."""
    from scripts.precision_table import CMD, Case

    case = Case("vllm", flag, "cmd", (f"{CMD} {flag}",), "info")
    found = row(0, case, workspace)
    assert found.rating in ("info", "clean"), found.findings


def test_a_rule_that_matches_nothing_is_reported(tmp_path):
    """A misspelt user rule is a warning naming the rule, through the real CLI."""
    import json
    import subprocess
    import sys

    from tests.conftest import FIXTURES, PYTHONPATH, REPO

    policy = tmp_path / "lab.toml"
    policy.write_text('[[rule]]\npath = "vllm.argz.port"\nseverity = "info"\nreason = "lab-only port"\n'
                      '[[rule]]\npath = "system.kernel.release"\nseverity = "info"\nreason = "lab kernels"\n')
    base = FIXTURES / "snapshots" / "seed-baseline.toml"
    out = subprocess.run([sys.executable, "-m", "hoststate", "diff", str(base), str(base), "--policy", str(policy),
                          "--format", "json"], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"}, timeout=120)
    report = json.loads(out.stdout)
    unmatched = [f for f in report["findings"] if f["path"].startswith("policy.")]
    assert [f["severity"] for f in unmatched] == ["warning"], report
    assert "vllm.argz.port" in unmatched[0]["path"] and "lab-only" not in unmatched[0]["reason"]
    assert "vllm.argz.port" in unmatched[0]["reason"] and str(policy) in unmatched[0]["reason"]
    assert report["verdict"] == "warning" and out.returncode == 0, out.stderr
