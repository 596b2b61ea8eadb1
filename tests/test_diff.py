"""The diff engine and `hoststate diff`: the seed scenario, coverage/unreadable, lists, tolerance, exit codes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from hoststate.coverage import failures
from hoststate.diff import compare
from hoststate.digest import digest
from hoststate.policy import Policy, parse_rules
from hoststate.snapshot import load, to_toml
from tests.conftest import FIXTURES, HOSTS, require

SNAPS = FIXTURES / "snapshots"
SEED_B, SEED_E = SNAPS / "seed-baseline.toml", SNAPS / "seed-experiment.toml"
SEED_WQS = [f'dsa.devices.dsa{d}.wqs."wq{d}.{n}"' for d in (0, 1) for n in range(4)]
HOSTSTATE = [sys.executable, "-m", "hoststate"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=120)


def by_path(result) -> dict:
    return {f.path: f for f in result.findings}


@pytest.fixture(scope="module")
def seed():
    return load(str(SEED_B)), load(str(SEED_E))


def test_seed_scenario_is_invalidating_for_wq_state_and_cudagraph(seed):
    result = compare(*seed)
    found = by_path(result)
    assert result.verdict == "invalidating"
    for wq in SEED_WQS:
        f = found[f"{wq}.state"]
        assert (f.change, f.old, f.new, f.severity) == ("changed", "disabled", "enabled", "invalidating")
        assert "by a third" in f.reason and "clients=0" in f.reason  # the measurement, and why it is not the cause
    graph = found["vllm.cudagraph.declared"]
    assert (graph.old, graph.new, graph.severity) == ("PIECEWISE", "FULL_AND_PIECEWISE", "invalidating")
    assert "cudagraph" in graph.reason.lower() or "graph mode" in graph.reason
    # clients did not change (0 both sides): no finding; and a clients change would never invalidate
    assert not any(p.endswith(".clients") for p in found)
    assert all(f.severity != "invalidating" for f in result.findings if f.path.endswith(".clients"))


def test_clients_change_is_info_not_invalidating(seed):
    base, exp = seed
    exp = copy.deepcopy(exp)
    exp["dsa"]["devices"]["dsa0"]["wqs"]["wq0.0"]["clients"] = 4
    f = by_path(compare(base, exp))['dsa.devices.dsa0.wqs."wq0.0".clients']
    assert f.severity == "info"


def test_diff_of_a_snapshot_with_itself_is_clean(seed):
    for snap in seed:
        result = compare(snap, copy.deepcopy(snap), include_ignored=True)
        assert result.findings == [] and result.verdict == "clean"
        assert result.counts == {"invalidating": 0, "warning": 0, "info": 0, "ignore": 0}


def test_findings_sorted_by_severity_then_path(seed):
    result = compare(*seed, include_ignored=True)
    rank = {"invalidating": 0, "warning": 1, "info": 2, "ignore": 3}
    keys = [(rank[f.severity], f.path) for f in result.findings]
    assert keys == sorted(keys)
    assert any(f.severity == "ignore" for f in result.findings)  # --all lists them
    assert not any(f.severity == "ignore" for f in compare(*seed).findings)
    assert compare(*seed).counts["ignore"] == result.counts["ignore"] > 0


def _minimal(**tables) -> dict:
    snap = {"hoststate": {"schema": 1, "version": "0.1.0", "digest": "sha256:x"},
            "collectors": {name: {"status": "ok"} for name in tables}}
    snap.update(copy.deepcopy(tables))
    return snap


def test_coverage_finding_when_a_collector_stops_being_ok():
    base = _minimal(gpu={"count": 8, "driver_version": "570.1"})
    cur = _minimal()
    cur["collectors"]["gpu"] = {"status": "timeout", "reason": "did not finish within 20s"}
    found = by_path(compare(base, cur))
    cov = found["collectors.gpu.status"]
    assert (cov.change, cov.old, cov.new, cov.severity, cov.rule) == ("coverage", "ok", "timeout", "warning",
                                                                      "coverage")
    # values the current side could not read are "unreadable", never "removed", and rated by their rule as if they
    # had changed: not known to match (fail closed)
    assert found["gpu.count"].change == "unreadable"
    assert found["gpu.count"].new.startswith("<unreadable (timeout): collector gpu timeout")
    assert found["gpu.count"].severity == "invalidating"
    # and the other way round
    back = by_path(compare(cur, base))
    assert back["collectors.gpu.status"].change == "coverage"
    assert back["gpu.count"].change == "unreadable" and back["gpu.count"].new == 8


def test_unreadable_listed_path_vs_really_removed():
    base = _minimal(dsa={"devices": {"dsa0": {"state": "enabled", "clients": 0}}})
    cur = copy.deepcopy(base)
    del cur["dsa"]["devices"]["dsa0"]["clients"]
    cur["collectors"]["dsa"] = {"status": "partial", "unreadable": {"devices.dsa0.clients": "EACCES"}}
    f = by_path(compare(base, cur))["dsa.devices.dsa0.clients"]
    assert f.change == "unreadable" and "EACCES" in f.new
    cur["collectors"]["dsa"] = {"status": "ok"}
    f = by_path(compare(base, cur))["dsa.devices.dsa0.clients"]
    assert f.change == "removed" and f.new is None


def test_group_engine_lists_compare_as_sets_argv_as_sequence():
    base = _minimal(dsa={"devices": {"dsa0": {"groups": {"group0.0": {"engines": ["engine0.0", "engine0.1"],
                                                                       "work_queues": ["wq0.0", "wq0.1"]}}}}},
                    vllm={"argv": ["vllm", "serve", "m", "-O1", "-cc.cudagraph_mode=FULL"]})
    cur = copy.deepcopy(base)
    cur["dsa"]["devices"]["dsa0"]["groups"]["group0.0"]["engines"].reverse()
    cur["dsa"]["devices"]["dsa0"]["groups"]["group0.0"]["work_queues"].reverse()
    cur["vllm"]["argv"] = ["vllm", "serve", "m", "-cc.cudagraph_mode=FULL", "-O1"]  # last one wins: order matters
    found = by_path(compare(base, cur))
    assert list(found) == ["vllm.argv"]
    cur["dsa"]["devices"]["dsa0"]["groups"]["group0.0"]["engines"] = ["engine0.0"]
    assert by_path(compare(base, cur))['dsa.devices.dsa0.groups."group0.0".engines'].severity == "invalidating"


def test_typed_values_1_vs_1_0_differ():
    base = _minimal(vllm={"args": {"gpu_memory_utilization": 1}})
    cur = _minimal(vllm={"args": {"gpu_memory_utilization": 1.0}})
    assert by_path(compare(base, cur))["vllm.args.gpu_memory_utilization"].severity == "invalidating"


def test_tolerance_downgrades_small_relative_changes_to_ignore():
    policy = Policy(parse_rules({"rule": [{"path": "system.memory.total_bytes", "severity": "warning",
                                           "tolerance": 0.01, "reason": "memory"}]}, "t.toml"))
    base = _minimal(system={"memory": {"total_bytes": 1_000_000}})
    small, big = copy.deepcopy(base), copy.deepcopy(base)
    small["system"]["memory"]["total_bytes"] = 1_009_000  # 0.9 % < 1 %
    big["system"]["memory"]["total_bytes"] = 1_020_000
    assert compare(base, small, policy).findings == []
    f = by_path(compare(base, small, policy, include_ignored=True))["system.memory.total_bytes"]
    assert f.severity == "ignore" and f.reason.startswith("Within tolerance")
    assert by_path(compare(base, big, policy))["system.memory.total_bytes"].severity == "warning"


def test_host_memory_within_4_gib_is_jitter_a_lost_dimm_refuses():
    gib = 1 << 30
    base = _minimal(system={"memory": {"total_bytes": 2016 * gib}})
    for delta, severity in ((-gib, "ignore"), (3 * gib, "ignore"), (-8 * gib, "invalidating"),
                            (16 * gib, "invalidating")):
        after = copy.deepcopy(base)
        after["system"]["memory"]["total_bytes"] += delta
        assert by_path(compare(base, after, include_ignored=True))["system.memory.total_bytes"].severity == severity


def test_user_rule_before_default_first_match_wins(seed):
    user = parse_rules({"rule": [{"path": "dsa.devices.*.wqs.*.state", "severity": "info", "reason": "lab host"}]},
                       "user.toml")
    from hoststate.policy import default_rules

    result = compare(*seed, Policy(user + list(default_rules())))
    f = by_path(result)[f"{SEED_WQS[0]}.state"]
    assert (f.severity, f.rule, f.reason) == ("info", "dsa.devices.*.wqs.*.state", "lab host")


def test_added_and_removed_tables_give_leaf_findings():
    base = _minimal(gpu={"count": 1, "devices": {"GPU-a": {"name": "H200", "power_limit_mw": 700000}}})
    cur = _minimal(gpu={"count": 1, "devices": {"GPU-b": {"name": "H200", "power_limit_mw": 700000}}})
    found = by_path(compare(base, cur))
    assert found["gpu.devices.GPU-a.name"].change == "removed"
    assert found["gpu.devices.GPU-b.power_limit_mw"].change == "added"
    assert found["gpu.devices.GPU-b.power_limit_mw"].severity == "invalidating"


def test_digest_equal_iff_no_invalidating_values_differ(seed):
    base, exp = seed
    assert digest(base) != digest(exp)
    quiet = copy.deepcopy(base)
    quiet["dsa"]["devices"]["dsa0"]["wqs"]["wq0.0"]["clients"] = 9  # info only
    quiet["hoststate"]["label"] = "other"
    assert digest(quiet) == digest(base)
    assert compare(base, quiet).counts["invalidating"] == 0


# -- CLI ---------------------------------------------------------------------------------------------------------


def test_cli_diff_exit_codes_and_formats(tmp_path):
    same = run("diff", str(SEED_B), str(SEED_B))
    assert same.returncode == 0 and "verdict: clean" in same.stdout
    proc = run("diff", str(SEED_B), str(SEED_E), "--format", "json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["verdict"] == "invalidating" and report["baseline"] == str(SEED_B)
    assert "\x1b[" not in run("diff", str(SEED_B), str(SEED_E)).stdout  # not a TTY: no colour
    md = run("diff", str(SEED_B), str(SEED_E), "--format", "markdown")
    assert md.returncode == 1 and "| severity | rule |" in md.stdout


@pytest.mark.parametrize("content, needle", [
    ('[[rule]]\npath = "a.b"\nseverity = "fatal"\n', "rule 1 (a.b): severity 'fatal'"),
    ('[[rule]]\nseverity = "info"\n', "rule 1: 'path' is missing"),
    ('[[rule]]\npath = "a.**x"\nseverity = "info"\n', "rule 1 (a.**x): bad pattern"),
    ('[[rule]]\npath = "a"\nseverity = "info"\n[[rule]]\npath = "b"\nseverity = "info"\ntolerance = "5%"\n',
     "rule 2 (b): 'tolerance' must be a non-negative number"),
    ('[[rule]]\npath = "a"\nseverity = "info"\nreason = 3\n', "rule 1 (a): 'reason' must be a string"),
    ("[[rule]\n", "not valid TOML"),
])
def test_cli_malformed_policy_is_one_line_exit_2(tmp_path, content, needle):
    pol = tmp_path / "p.toml"
    pol.write_text(content)
    proc = run("diff", str(SEED_B), str(SEED_E), "--policy", str(pol))
    assert proc.returncode == 2
    assert needle in proc.stderr and str(pol) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_cli_user_policy_can_accept_the_drift(tmp_path):
    pol = tmp_path / "accept.toml"
    pol.write_text('[[rule]]\npath = "dsa.**"\nseverity = "info"\nreason = "DSA unused"\n'
                   '[[rule]]\npath = "vllm.**"\nseverity = "info"\nreason = "pinned elsewhere"\n')
    proc = run("diff", str(SEED_B), str(SEED_E), "--policy", str(pol))
    assert proc.returncode == 0, proc.stdout


def test_cli_bad_snapshot_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("not = [toml")
    proc = run("diff", str(bad), str(SEED_E))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert run("diff", str(tmp_path / "missing.toml"), str(SEED_E)).returncode == 2


def test_cli_digest_prints_the_stored_digest(tmp_path):
    proc = run("digest", str(SEED_E))
    assert proc.returncode == 0 and proc.stdout.strip() == load(str(SEED_E))["hoststate"]["digest"]
    edited = load(str(SEED_E))
    edited["vllm"]["model"] = "other"
    path = tmp_path / "edited.toml"
    path.write_text(to_toml(edited))
    proc = run("digest", str(path))
    assert proc.returncode == 0 and "differs" in proc.stderr


# -- end to end from the seed fixture trees ------------------------------------------------------------------------

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"


def test_seed_end_to_end_from_fixture_trees(tmp_path):
    require((HOSTS / "seed-baseline").is_dir() and (HOSTS / "seed-experiment").is_dir(), "seed trees missing")
    base, exp = tmp_path / "b.toml", tmp_path / "e.toml"
    for root, out, cmd in (("seed-baseline", base, SERVE + " -O1"), ("seed-experiment", exp, SERVE)):
        proc = run("snap", "--root", str(HOSTS / root), "--vllm-cmd", cmd, "--vllm-version", "0.12.0", "-o", str(out))
        assert proc.returncode == 0, proc.stderr
    proc = run("diff", str(base), str(exp), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    found = {f["path"]: f for f in json.loads(proc.stdout)["findings"]}
    states = [f for p, f in found.items() if p.endswith(".state") and ".wqs." in p]
    assert len(states) == 8
    assert all((f["old"], f["new"], f["severity"]) == ("disabled", "enabled", "invalidating") for f in states)
    graph = found["vllm.cudagraph.declared"]
    assert (graph["old"], graph["new"], graph["severity"]) == ("PIECEWISE", "FULL_AND_PIECEWISE", "invalidating")
    assert all(f["severity"] != "invalidating" for p, f in found.items() if p.endswith(".clients"))
    check = run("check", str(exp), "--format", "json")
    assert check.returncode == 1
    codes = [a["code"] for a in json.loads(check.stdout)["advisories"]]
    assert "HS201" in codes and codes.count("HS202") == 8


def _snap_tree(tree: str, faults: dict | None = None) -> dict:
    from hoststate.capture import collect
    from hoststate.collectors import Context
    from tests.faults import inject

    if faults:
        with inject(faults, on_read=True):
            return collect(Context(root=str(HOSTS / tree)), ("dsa", "accel_config"))
    return collect(Context(root=str(HOSTS / tree)), ("dsa", "accel_config"))


def test_a_file_the_collector_could_not_read_is_unreadable_not_removed() -> None:
    """Real collector output: EACCES on one WQ attribute is recorded as a file path; diff maps it to the value."""
    import errno

    base = _snap_tree("seed-experiment")
    cur = _snap_tree("seed-experiment", {"dsa2/wq2.1/priority": errno.EACCES})
    assert failures(cur["collectors"]["dsa"]["unreadable"]) == {"sys/bus/dsa/devices/dsa2/wq2.1/priority": "EACCES"}
    found = by_path(compare(base, cur))
    f = found['dsa.devices.dsa2.wqs."wq2.1".priority']
    assert (f.change, f.old, f.severity) == ("unreadable", 10, "invalidating")
    assert "EACCES" in f.new
    assert compare(base, cur).verdict == "invalidating"


def test_devices_gone_with_collector_absent_are_removed_and_invalidating() -> None:
    """`absent` is knowledge (the driver found no device), so enabled WQs that vanished are invalidating drift."""
    base = _snap_tree("seed-experiment")
    cur = copy.deepcopy(base)
    del cur["dsa"]
    cur["collectors"]["dsa"] = {"status": "absent", "reason": "no /sys/bus/dsa"}
    result = compare(base, cur)
    found = by_path(result)
    f = found['dsa.devices.dsa0.wqs."wq0.0".state']
    assert (f.change, f.old, f.severity) == ("removed", "enabled", "invalidating")
    assert found["collectors.dsa.status"].change == "coverage"
    assert result.verdict == "invalidating"


def test_a_missing_file_is_knowledge_so_its_values_are_removed(tmp_path) -> None:
    """ENOENT (a kernel without cpufreq) is not a read failure: the governor the baseline pinned is gone."""
    import shutil

    from hoststate.capture import collect
    from hoststate.collectors import Context

    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "vm-nocpufreq", tree, symlinks=True)
    cur = collect(Context(root=str(tree)), ("system",))
    assert cur["system"]["cpufreq"] == {"absent": True} and cur["collectors"]["system"]["status"] == "ok"
    base = copy.deepcopy(cur)
    base["system"]["cpufreq"] = {"governor": {"0-7": "performance"}}
    base["collectors"]["system"] = {"status": "ok", "took_ms": 1.0}
    f = by_path(compare(base, cur))["system.cpufreq.governor.0-7"]
    assert (f.change, f.old, f.severity) == ("removed", "performance", "invalidating")
