"""What was not read is never "absent" or "removed": the cases that used to let guard run over real drift.

The denied cases are real: the tree is copied, a directory is made mode 000, and hoststate runs as root without
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv drops them from its bounding set), so the kernel answers EACCES
exactly as it would for an unprivileged reader. Each guard runs a command that leaves a marker, so "refused"
also means "the command did not start".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate.snapshot import load
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, REPO, require

SEED_CMD = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 1 -O1"
H200_REPLAY = FIXTURES / "nvml" / "h200.json"
NO_DAC = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def hoststate(*args: str, env: dict[str, str] | None = None, drop_dac: bool = False) -> subprocess.CompletedProcess:
    prefix = NO_DAC if drop_dac else ()
    if drop_dac:
        require(shutil.which("setpriv") is not None, "setpriv (util-linux) to drop root's DAC override")
    full = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    if env is None or "HOSTSTATE_NVML_REPLAY" not in env:
        full.pop("HOSTSTATE_NVML_REPLAY", None)
    return subprocess.run([*prefix, sys.executable, "-m", "hoststate", *args], capture_output=True, text=True,
                          cwd=REPO, env=full, timeout=300, check=False)


def guard(baseline: Path, marker: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return hoststate("guard", "-v", "--baseline", str(baseline), *args, "--", sys.executable, "-c",
                     f"open({str(marker)!r}, 'w').write('ran')", **kw)


def refused(proc: subprocess.CompletedProcess, marker: Path, *needles: str) -> None:
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not marker.exists(), "the command ran"
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def snap(out: Path, *args: str, **kw) -> Path:
    proc = hoststate("snap", "-q", "-o", str(out), *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return out


def test_seed_scenario_with_the_dsa_bus_denied_refuses(tmp_path: Path) -> None:
    """A baseline from a host without DSA; now the seed host with 8 WQs enabled, but /sys/bus/dsa denied: the
    guard refuses with "unreadable (denied)", never taking the denied bus for an absent driver."""
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-experiment", tree, symlinks=True)
    (tree / "sys" / "bus" / "dsa").chmod(0)
    base = snap(tmp_path / "base.toml", "--root", str(HOSTS / "xeon-2s"), "--only", "system,dsa")
    assert "dsa" not in load(str(base)) and load(str(base))["collectors"]["dsa"]["status"] == "absent"
    marker = tmp_path / "ran"
    proc = guard(base, marker, "--root", str(tree), "--only", "system,dsa", drop_dac=True)
    refused(proc, marker, "unreadable (denied)", "EACCES")
    now = snap(tmp_path / "now.toml", "--root", str(tree), "--only", "dsa", drop_dac=True)
    entry = load(str(now))["collectors"]["dsa"]
    assert entry["status"] == "denied" and "not loaded" not in entry["reason"], entry


@pytest.mark.parametrize("rel, path", [
    ("proc/sys/kernel/osrelease", "system.kernel.release"),
    ("proc/cmdline", "system.kernel.cmdline"),
    ("sys/devices/system/cpu/cpu0/cpufreq", "system.cpufreq"),
])
def test_denied_system_files_are_unreadable_not_removed(tmp_path: Path, rel: str, path: str) -> None:
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", tree, symlinks=True)
    base = snap(tmp_path / "base.toml", "--root", str(tree), "--only", "system")
    target = tree / rel
    target.chmod(0)
    now = snap(tmp_path / "now.toml", "--root", str(tree), "--only", "system", drop_dac=True)
    proc = hoststate("diff", str(base), str(now), "--format", "json")
    import json

    findings = [f for f in json.loads(proc.stdout)["findings"] if f["path"] == path or
                f["path"].startswith(path + ".")]
    assert findings, proc.stdout[:2000]
    assert all(f["change"] == "unreadable" and "(denied)" in str(f["new"]) for f in findings), findings
    assert proc.returncode == 1


def others(name: str) -> tuple[str, ...]:
    """--accept for every collector but ``name``: the guard then refuses on ``name`` alone, or runs."""
    from hoststate.collectors import NAMES

    return tuple(a for n in NAMES if n != name for a in ("--accept", n, "--accept", f"{n}.**"))


def test_a_skipped_env_with_a_launch_blocking_variable_refuses(tmp_path: Path) -> None:
    """--skip env now, with CUDA_LAUNCH_BLOCKING=1 set: the baseline's environment (none of the variables set) is
    not known to match, so the guard refuses; with env read it refuses on the variable itself."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "NCCL_", "TORCH", "VLLM_"))}
    tree = ("--root", str(HOSTS / "seed-baseline"))
    base = snap(tmp_path / "base.toml", *tree, "--only", "env")
    marker = tmp_path / "ran"
    assert guard(base, marker, *tree, "--only", "env", *others("env"), env=clean).returncode == 0  # control
    marker.unlink()
    blocking = clean | {"CUDA_LAUNCH_BLOCKING": "1"}
    refused(guard(base, marker, *tree, "--skip", "env", *others("env"), env=blocking), marker,
            "unreadable (skipped)")
    refused(guard(base, marker, *tree, "--only", "env", *others("env"), env=blocking), marker,
            "CUDA_LAUNCH_BLOCKING")


def test_gpu_absent_in_the_baseline_and_nvml_failing_now_refuses(tmp_path: Path) -> None:
    tree = ("--root", str(HOSTS / "seed-baseline"), "--only", "gpu", *others("gpu"))
    absent = {"HOSTSTATE_NVML_REPLAY": str(_replay(tmp_path, {"error": "DriverNotLoaded"}))}
    base = snap(tmp_path / "base.toml", "--root", str(HOSTS / "seed-baseline"), "--only", "gpu", env=absent)
    assert load(str(base))["collectors"]["gpu"]["status"] == "absent"
    marker = tmp_path / "ran"
    assert guard(base, marker, *tree, env=absent).returncode == 0  # control: absent on both sides
    marker.unlink()
    broken = {"HOSTSTATE_NVML_REPLAY": str(_replay(tmp_path, {"error": "Unknown"}))}
    refused(guard(base, marker, *tree, env=broken), marker, "unreadable (error)")
    assert guard(base, marker, *tree, "--allow-unreadable", env=broken).returncode == 0
    assert marker.exists()


def test_vllm_absent_in_the_baseline_and_skipped_now_refuses(tmp_path: Path) -> None:
    """No server in the baseline (discovery found none); now vLLM is not read: cannot tell."""
    from hoststate.snapshot import to_toml

    base = snap(tmp_path / "base.toml", "--root", str(HOSTS / "seed-baseline"), "--only", "system")
    data = load(str(base))
    data["collectors"]["vllm"] = {"status": "absent", "took_ms": 1.0, "reason": "no vLLM server running"}
    base.write_text(to_toml(data))
    tree = ("--root", str(HOSTS / "seed-baseline"), *others("vllm"))
    marker = tmp_path / "ran"
    refused(guard(base, marker, *tree, "--only", "system"), marker, "unreadable (skipped)", "vllm")


@pytest.mark.parametrize("key", ["__rope_hint", "_rope_hint", "rope_hint"])
def test_hf_overrides_with_private_looking_keys_are_invalidating(tmp_path: Path, key: str) -> None:
    """`--hf-overrides '{"__rope_hint": 1}'` against 2 is rated as the same change keyed `rope_hint`."""
    def cmd(value: int) -> str:
        return f"{SEED_CMD} --hf-overrides '{{\"{key}\": {value}}}'"

    root = ("--root", str(HOSTS / "seed-baseline"), "--only", "vllm", "--vllm-version", "0.12.0")
    a = snap(tmp_path / "a.toml", *root, "--vllm-cmd", cmd(1))
    marker = tmp_path / "ran"
    assert guard(a, marker, *root, *others("vllm"), "--vllm-cmd", cmd(1)).returncode == 0  # control
    marker.unlink()
    refused(guard(a, marker, *root, *others("vllm"), "--vllm-cmd", cmd(2)), marker, key)


def _replay(tmp_path: Path, init: dict) -> Path:
    import json

    data = json.loads(H200_REPLAY.read_text())
    data["init"] = init
    path = tmp_path / f"replay-{init.get('error')}.json"
    path.write_text(json.dumps(data))
    return path
