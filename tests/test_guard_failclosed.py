"""Guard fails closed: what cannot be read now is not known to match, so it refuses unless accepted explicitly.

Every cause is produced for real: collectors skipped with --skip/--only, NVML replays whose nvmlInit fails
(error), is refused (denied) or hangs (timeout), and a captured tree with an unparsable sysfs/procfs file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hoststate.coverage import failures
from hoststate.snapshot import load
from tests.conftest import FIXTURES, HOSTS

HOSTSTATE = [sys.executable, "-m", "hoststate"]
SEED = HOSTS / "seed-baseline"
SEED_CMD = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 1 -O1"  # fits the one-GPU replay
VLLM = ("--vllm-cmd", SEED_CMD, "--vllm-version", "0.12.0")
H200_REPLAY = FIXTURES / "nvml" / "h200.json"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, **(env or {}))
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=timeout, env=full)


def replay(tmp_path: Path, init: dict[str, Any] | None) -> str:
    """The real H200's NVML replay, with nvmlInit failing or hanging as ``init`` says."""
    data = json.loads(H200_REPLAY.read_text())
    if init is not None:
        data["init"] = init
    path = tmp_path / f"nvml-{len(list(tmp_path.glob('nvml-*')))}.json"
    path.write_text(json.dumps(data))
    return str(path)


def snap(out: Path, root: Path = SEED, *extra: str, env: dict[str, str] | None = None) -> Path:
    proc = run("snap", "--root", str(root), *VLLM, *extra, "-o", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    return out


def guard(baseline: Path, marker: Path, *args: str, root: Path = SEED, env: dict[str, str] | None = None,
          save: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ("--save-current", str(save)) if save else ()
    return run("guard", "-v", "--baseline", str(baseline), "--root", str(root), *VLLM, *extra, *args,
               "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')", env=env)


def assert_refused(proc: subprocess.CompletedProcess[str], marker: Path, *needles: str) -> None:
    assert proc.returncode == 3, proc.stderr
    assert not marker.exists(), "the command ran"
    assert "refused" in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def assert_ran(proc: subprocess.CompletedProcess[str], marker: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ran"
    marker.unlink()


# -- the pair from the README: an H200 VM against a DGX tree with DSA ------------------------------------------------


def test_h200_baseline_against_the_seed_tree_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = guard(FIXTURES / "real" / "h200-snapshot.toml", marker)
    assert_refused(proc, marker, "system.cpu.model_name", "gpu.")
    assert ": comparable (" not in proc.stderr


# -- a collector not run now that the baseline had ----------------------------------------------------------------


@pytest.fixture(scope="module")
def full_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "full.toml"
    return snap(out, SEED, env={"HOSTSTATE_NVML_REPLAY": str(H200_REPLAY)})


@pytest.mark.parametrize("selection, accept, unreadable_path", [
    (("--skip", "dsa"), "dsa.**", "dsa.devices.dsa0.state"),
    (("--only", "dsa"), "system.**", "system.cpu.model_name"),
    (("--skip", "gpu"), "gpu.**", "gpu.driver_version"),
])
def test_a_collector_skipped_now_refuses_unless_accepted(full_baseline: Path, tmp_path: Path, selection: tuple,
                                                         accept: str, unreadable_path: str) -> None:
    marker = tmp_path / "ran"
    env = {"HOSTSTATE_NVML_REPLAY": str(H200_REPLAY)}
    proc = guard(full_baseline, marker, *selection, env=env)
    assert_refused(proc, marker, unreadable_path, "<unreadable (skipped): collector")

    save = tmp_path / "allowed.toml"
    assert_ran(guard(full_baseline, marker, *selection, "--allow-unreadable", env=env, save=save), marker)
    table = load(str(save))["guard"]
    assert table["verdict"] == "non-comparable" and table["allow_unreadable"] is True
    accepted = {a["path"]: a for a in table["accepted"]}
    assert accepted[unreadable_path]["change"] == "unreadable"
    assert accepted[unreadable_path]["accepted_by"] == "--allow-unreadable"
    assert all(a["change"] == "unreadable" for a in table["accepted"])

    save = tmp_path / "accepted.toml"
    proc = guard(full_baseline, marker, *selection, "--accept", accept, env=env, save=save)
    if selection[0] == "--only":  # --only dsa leaves more than system unread: accepting system alone is not enough
        assert_refused(proc, marker)
        assert load(str(save))["guard"]["verdict"] == "refused"
        save = tmp_path / "accepted-all.toml"
        proc = guard(full_baseline, marker, *selection, "--accept", "**", env=env, save=save)
    assert_ran(proc, marker)
    table = load(str(save))["guard"]
    assert "allow_unreadable" not in table
    assert {a["path"]: a["accepted_by"] for a in table["accepted"]}[unreadable_path] in (accept, "**")


def test_the_same_selection_on_both_sides_is_context_not_a_gap(tmp_path: Path) -> None:
    """Leaving a collector out of both the baseline and the run by scope is no failed read: neither side makes a
    claim there, so it is info and the command runs; a failed read on either side still refuses."""
    base = snap(tmp_path / "b.toml", SEED, "--skip", "dsa")
    marker = tmp_path / "ran"
    assert_ran(guard(base, marker, "--skip", "dsa"), marker)
    diff = run("diff", str(base), str(base), "--format", "json", "--all")
    [dsa] = [f for f in json.loads(diff.stdout)["findings"] if f["path"] == "dsa"]
    assert (dsa["change"], dsa["severity"]) == ("unreadable", "info") and "Skipped in both" in dsa["reason"]


# -- each other cause: collector error, timeout, denied, an unparsable file -------------------------------------------


@pytest.mark.parametrize("init, status, extra", [
    ({"error": "Unknown"}, "error", ()),
    ({"error": "NoPermission"}, "denied", ()),
    ({"hang": 120.0}, "timeout", ("--timeout", "2")),  # each guard waits this long for the hung GPU collector
])
def test_gpu_collector_failing_now_refuses_unless_accepted(full_baseline: Path, tmp_path: Path, init: dict,
                                                           status: str, extra: tuple) -> None:
    env = {"HOSTSTATE_NVML_REPLAY": replay(tmp_path, init)}
    marker = tmp_path / "ran"
    proc = guard(full_baseline, marker, *extra, env=env)
    assert_refused(proc, marker, "gpu.driver_version", f"<unreadable ({status}): collector gpu {status}")

    save = tmp_path / "allowed.toml"
    assert_ran(guard(full_baseline, marker, *extra, "--allow-unreadable", env=env, save=save), marker)
    saved = load(str(save))
    assert saved["collectors"]["gpu"]["status"] == status
    accepted = {a["path"]: a for a in saved["guard"]["accepted"]}
    assert accepted["gpu.driver_version"]["accepted_by"] == "--allow-unreadable"
    assert accepted["gpu.driver_version"]["old"] == "580.159.04"

    save = tmp_path / "accepted.toml"
    assert_ran(guard(full_baseline, marker, *extra, "--accept", "gpu.**", env=env, save=save), marker)
    assert {a["accepted_by"] for a in load(str(save))["guard"]["accepted"]} == {"gpu.**"}


def test_an_unparsable_file_refuses_unless_accepted(full_baseline: Path, tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(SEED, tree, symlinks=True)
    (tree / "proc" / "sys" / "kernel" / "numa_balancing").write_text("on\n")
    env = {"HOSTSTATE_NVML_REPLAY": str(H200_REPLAY)}
    marker = tmp_path / "ran"
    base = load(str(full_baseline))
    assert "balancing" in base["system"]["numa"]
    proc = guard(full_baseline, marker, root=tree, env=env)
    assert_refused(proc, marker, "system.numa.balancing", "<unreadable (error): not an integer")

    save = tmp_path / "allowed.toml"
    assert_ran(guard(full_baseline, marker, "--allow-unreadable", root=tree, env=env, save=save), marker)
    saved = load(str(save))
    assert failures(saved["collectors"]["system"]["unreadable"]) == {
        "proc/sys/kernel/numa_balancing": "not an integer: 'on'"}
    [accepted] = saved["guard"]["accepted"]
    assert (accepted["path"], accepted["change"], accepted["accepted_by"]) == (
        "system.numa.balancing", "unreadable", "--allow-unreadable")

    save = tmp_path / "accepted.toml"
    assert_ran(guard(full_baseline, marker, "--accept", "system.numa.*", root=tree, env=env, save=save), marker)
    [accepted] = load(str(save))["guard"]["accepted"]
    assert accepted["accepted_by"] == "system.numa.*"


def test_diff_rates_an_unreadable_invalidating_value_invalidating(full_baseline: Path, tmp_path: Path) -> None:
    cur = snap(tmp_path / "c.toml", SEED, "--skip", "gpu")
    proc = run("diff", str(full_baseline), str(cur), "--format", "json")
    assert proc.returncode == 1
    found = {f["path"]: f for f in json.loads(proc.stdout)["findings"]}
    f = found["gpu.driver_version"]
    assert (f["change"], f["severity"], f["old"]) == ("unreadable", "invalidating", "580.159.04")
    assert f["new"].startswith("<unreadable (skipped): collector gpu skipped")
    assert found["collectors.gpu.status"]["severity"] == "warning"


def test_a_denied_nvml_baseline_against_a_readable_host_is_refused_too(tmp_path: Path) -> None:
    """Symmetric: a value the baseline could not read is not known to match what is read now."""
    base = snap(tmp_path / "b.toml", SEED, env={"HOSTSTATE_NVML_REPLAY": replay(tmp_path, {"error": "NoPermission"})})
    marker = tmp_path / "ran"
    env = {"HOSTSTATE_NVML_REPLAY": str(H200_REPLAY)}
    assert_refused(guard(base, marker, env=env), marker, "gpu.driver_version",
                   "<unreadable (denied): collector gpu denied")
    assert_ran(guard(base, marker, "--allow-unreadable", env=env), marker)


# -- --timeout ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["snap", "guard", "check", "export"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc"])
def test_timeout_must_be_finite_and_positive(command: str, value: str, tmp_path: Path) -> None:
    args = {"snap": ["snap"], "guard": ["guard", "--baseline", str(tmp_path / "none.toml")], "check": ["check"],
            "export": ["export", "prometheus"]}[command]
    marker = tmp_path / "ran"
    tail = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"] if command == "guard" else []
    proc = run(*args, "--root", str(SEED), "--timeout", value, *tail)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "--timeout" in proc.stderr
    assert not marker.exists()


def test_timeout_api_rejects_non_finite(full_baseline: Path) -> None:
    from hoststate.errors import InputError
    from hoststate.guard import evaluate

    for value in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(InputError, match="timeout"):
            evaluate(str(full_baseline), root=str(SEED), timeout=value)
