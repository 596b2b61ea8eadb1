"""The guard API a benchmark harness calls: evaluate / check_baseline / run_command, and the [guard] table.

In-process, on hand-made snapshots and the fixture trees; the CLI is covered by test_guard.py.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
import signal
import subprocess
import sys

import pytest

from hoststate.digest import digest
from hoststate.errors import HoststateError, InputError, PolicyError
from hoststate.guard import (
    GuardRefused,
    check_baseline,
    evaluate,
    guard_table,
    run_command,
    snap_host,
    with_guard_table,
)
from hoststate.snapshot import loads, to_toml
from tests.conftest import HOSTS, PYTHONPATH, REPO, require

WQ = 'dsa.devices.dsa0.wqs."wq0.0".state'


def snapshot(**tables) -> dict:
    """A minimal valid snapshot holding ``tables``; every table's collector is ok."""
    snap = {
        "hoststate": {"schema": 1, "version": "0.1.0", "taken_at": dt.datetime(2026, 6, 2, tzinfo=dt.timezone.utc),
                      "hostname": "b200-01"},
        "collectors": {name: {"status": "ok", "took_ms": 1.0} for name in tables},
        **copy.deepcopy(tables),
    }
    snap["hoststate"]["digest"] = digest(snap)
    return snap


def wq(state: str, **extra) -> dict:
    return {"devices": {"dsa0": {"wqs": {"wq0.0": {"state": state, "mode": "shared", **extra}}}}}


BASE = snapshot(dsa=wq("disabled"), system={"kernel": {"release": "6.8.0-45-generic"}})
SAME = snapshot(dsa=wq("disabled"), system={"kernel": {"release": "6.8.0-45-generic"}})
ENABLED = snapshot(dsa=wq("enabled"), system={"kernel": {"release": "6.8.0-45-generic"}})
BOTH = snapshot(dsa=wq("enabled"), system={"kernel": {"release": "6.8.0-51-generic"}})


def test_comparable() -> None:
    result = check_baseline(BASE, current=SAME)
    assert result.verdict == "comparable" and result.ok
    assert result.accepted == [] and result.refused == []
    assert result.baseline_digest == BASE["hoststate"]["digest"]


def test_refused_raises_guard_refused_with_the_result() -> None:
    with pytest.raises(GuardRefused) as info:
        check_baseline(BASE, current=ENABLED)
    refused = info.value
    assert isinstance(refused, HoststateError)
    assert refused.result.verdict == "refused" and not refused.result.ok
    assert [f.path for f in refused.result.refused] == [WQ]
    finding = refused.result.refused[0]
    assert (finding.old, finding.new, finding.severity) == ("disabled", "enabled", "invalidating")
    assert "re-measure" in finding.reason
    assert "\n" not in str(refused) and WQ in str(refused)


def test_evaluate_reports_a_refusal_without_raising() -> None:
    result = evaluate(BASE, current=ENABLED)
    assert result.verdict == "refused" and [f.path for f in result.refused] == [WQ]


@pytest.mark.parametrize("pattern", [WQ, "dsa.devices.*.wqs.*.state", "dsa.**", "**", "dsa.devices.dsa0.wqs.*.st*"])
def test_accept_patterns_use_the_policy_syntax(pattern) -> None:
    result = check_baseline(BASE, current=ENABLED, accept=[pattern])
    assert result.verdict == "non-comparable" and result.ok
    assert [f.path for f in result.accepted] == [WQ]
    assert result.unused_accept == []


@pytest.mark.parametrize("pattern", ["dsa.*.state", "dsa.devices.*.wqs.*.mode", "system.**"])
def test_non_matching_accept_patterns_leave_the_refusal(pattern) -> None:
    with pytest.raises(GuardRefused) as info:
        check_baseline(BASE, current=ENABLED, accept=[pattern])
    assert info.value.result.unused_accept == [pattern]


def test_every_invalidating_finding_must_be_accepted() -> None:
    result = evaluate(BASE, current=BOTH, accept=["dsa.**"])
    assert [f.path for f in result.accepted] == [WQ]
    assert [f.path for f in result.refused] == ["system.kernel.release"]
    assert check_baseline(BASE, current=BOTH, accept=["dsa.**", "system.kernel.*"]).verdict == "non-comparable"


@pytest.mark.parametrize("pattern", ['dsa."open', "dsa.a**", ""])
def test_a_bad_accept_pattern_is_an_input_error(pattern) -> None:
    with pytest.raises(InputError, match="--accept"):
        evaluate(BASE, current=SAME, accept=[pattern])


def test_user_policy_first(tmp_path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[[rule]]\npath = "dsa.**"\nseverity = "info"\nreason = "not used here"\n')
    assert check_baseline(BASE, current=ENABLED, policy_files=[str(policy)]).verdict == "comparable"
    policy.write_text("[[rule]]\n")
    with pytest.raises(PolicyError):
        evaluate(BASE, current=SAME, policy_files=[str(policy)])


def test_baseline_from_a_file_is_read_only_and_hashed(tmp_path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(to_toml(BASE))
    path.chmod(0o444)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    result = check_baseline(str(path), current=SAME)
    assert result.baseline == str(path) and result.baseline_sha256.startswith("sha256:")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.parametrize("content", [None, b"", b"not = [toml", b'[x]\ny = 1\n'])
def test_bad_baseline_files(tmp_path, content) -> None:
    path = tmp_path / "b.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as info:
        evaluate(str(path), current=SAME)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_guard_table_round_trips_through_toml() -> None:
    base = snapshot(dsa=wq("disabled"), vllm={"args": {"max_model_len": 16384}})
    cur = snapshot(dsa=wq("enabled", block_on_fault=True), vllm={"args": {"max_model_len": 8192,
                                                                          "speculative_config": {"method": "suffix"}}})
    result = check_baseline(base, current=cur, accept=["**"])
    saved = with_guard_table(result, command=["vllm", "bench", "serve", "--api-key", "sk-secret"])
    text = to_toml(saved)
    back = loads(text)
    table = back["guard"]
    assert table["verdict"] == "non-comparable"
    assert table["baseline"] == "<baseline>" and table["baseline_digest"] == base["hoststate"]["digest"]
    assert table["command"] == ["vllm", "bench", "serve", "--api-key", "<redacted>"]
    accepted = {a["path"]: a for a in table["accepted"]}
    assert accepted[WQ]["accepted_by"] == "**"
    # an added value has no "old" (TOML has no null); the change says why
    added = [a for a in table["accepted"] if a["change"] == "added"]
    assert all("old" not in a and "new" in a for a in added)
    assert digest(back) == back["hoststate"]["digest"] == cur["hoststate"]["digest"]


def test_a_baseline_carrying_a_guard_table_compares_as_host_state_only() -> None:
    previous = with_guard_table(check_baseline(BASE, current=ENABLED, accept=["**"]))
    result = check_baseline(previous, current=ENABLED)
    assert result.verdict == "comparable" and result.findings == []


def test_guard_table_of_a_refusal() -> None:
    table = guard_table(evaluate(BASE, current=BOTH, accept=["dsa.**"]))
    assert table["verdict"] == "refused"
    assert [r["path"] for r in table["refused"]] == ["system.kernel.release"]
    assert [a["path"] for a in table["accepted"]] == [WQ]


def test_result_to_dict_is_json() -> None:
    import json

    data = evaluate(BASE, current=BOTH).to_dict()
    assert json.loads(json.dumps(data))["verdict"] == "refused"
    assert data["diff"]["verdict"] == "invalidating" and len(data["refused"]) == 2


def test_snap_host_on_the_seed_trees() -> None:
    require((HOSTS / "seed-baseline").is_dir(), "seed fixture trees not built")
    base = snap_host(root=str(HOSTS / "seed-baseline"), only=["system", "dsa"])
    # The collectors left out of both are skipped on both: context (info), never a refusal.
    same = check_baseline(base, root=str(HOSTS / "seed-baseline"), only=["system", "dsa"])
    assert same.verdict == "comparable" and not same.accepted and not same.warnings
    skipped = {f.path for f in same.diff.findings if f.change == "unreadable"}
    assert skipped == {"gpu", "vllm", "env", "packages", "accel_config"}
    assert {f.severity for f in same.diff.findings if f.path in skipped} == {"info"}
    result = evaluate(base, root=str(HOSTS / "seed-experiment"), only=["system", "dsa"])
    assert WQ in {f.path for f in result.refused}
    with pytest.raises(InputError, match="not a directory"):
        snap_host(root="/nonexistent/tree")
    with pytest.raises(InputError, match="unknown collector"):
        snap_host(only=["nope"])


# -- run_command -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 7])
def test_run_command_status(code) -> None:
    assert run_command([sys.executable, "-c", f"raise SystemExit({code})"]) == code


def test_run_command_signal_death_and_missing_command(capfd) -> None:
    assert run_command([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]) == 143
    assert run_command(["/nonexistent/cmd"]) == 127
    assert capfd.readouterr().err.strip() == "hoststate: /nonexistent/cmd: command not found"
    with pytest.raises(InputError):
        run_command([])


def test_run_command_restores_guard_signal_handlers() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)}
    run_command([sys.executable, "-c", "pass"])
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_command_child_starts_with_default_signal_dispositions() -> None:
    code = ("import signal, sys; sys.exit(0 if all(signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler)"
            " for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)) else 5)")
    assert run_command([sys.executable, "-c", code]) == 0


# -- the documented example runs --------------------------------------------------------------------------------


def test_docs_guard_example_runs(tmp_path) -> None:
    require((HOSTS / "seed-baseline").is_dir(), "seed fixture trees not built")
    text = (REPO / "docs" / "guard.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/guard.md has a python example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refused" in proc.stdout and "comparable" in proc.stdout


def test_a_baseline_mapping_is_validated_like_a_file() -> None:
    with pytest.raises(InputError, match="<baseline>"):
        evaluate({"system": {}}, current=SAME)
