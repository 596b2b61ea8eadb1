"""A setting whose effect the snapshot records elsewhere is rated by that effect: a boot parameter against the
runtime value it sets (rated_by), a DSA group or engine setting against its device's state (inert_if), a server's
OMP_NUM_THREADS=1 against what vLLM's executor sets. Each change of one value, on the seed baseline's snapshot
(fixtures/snapshots/seed-baseline.toml) or the 8-GPU replay."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate.diff import compare
from hoststate.snapshot import load
from tests.conftest import FIXTURES, PYTHONPATH

SEED_B = FIXTURES / "snapshots" / "seed-baseline.toml"


@pytest.fixture(scope="module")
def base() -> dict:
    return load(str(SEED_B))


def changed(snap: dict, *edits: tuple[tuple[str, ...], object]) -> dict:
    """``snap`` with each (path, value) set; a value of None removes the key."""
    out = copy.deepcopy(snap)
    for path, value in edits:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return out


def severity(before: dict, after: dict, path: str) -> str:
    found = {f.path: f for f in compare(before, after, include_ignored=True).findings}
    return found[path].severity


PARAMS = ("system", "kernel", "params")


@pytest.mark.parametrize(("param", "runtime", "value", "other"), [
    ("transparent_hugepage", ("system", "thp", "enabled"), "madvise", "always"),
    ("numa_balancing", ("system", "numa", "balancing"), "disable", 1),
])
def test_a_boot_parameter_is_rated_by_the_runtime_value_it_sets(base: dict, param: str, runtime: tuple,
                                                                value: str, other: object) -> None:
    """transparent_hugepage= sets /sys/kernel/mm/transparent_hugepage/enabled at boot, numa_balancing= sets
    /proc/sys/kernel/numa_balancing (kernel-parameters.txt): where that value reads the same on both sides, the
    parameter changed only how it was set (info); where it differs too, the parameter refuses with it."""
    with_param = changed(base, ((*PARAMS, param), value))
    path = f"system.kernel.params.{param}"
    assert severity(base, with_param, path) == "info"
    assert severity(with_param, base, path) == "info"  # removed again: the runtime value still the same
    moved = changed(with_param, (runtime, other))
    assert severity(base, moved, path) == "invalidating"
    unread = changed(with_param, (runtime, None))
    unread["collectors"]["system"] = {**unread["collectors"]["system"], "status": "partial",
                                      "unreadable": {".".join(runtime[1:]): "denied: EACCES [x]"}}
    assert severity(base, unread, path) == "invalidating"  # the effect not known: the parameter is rated as such


GROUP = ("dsa", "devices", "dsa0", "groups")


@pytest.mark.parametrize(("leaf", "value"), [
    (("group0.0", "read_buffers_allowed"), 8),
    (("group0.0", "engines"), []),
    (("group0.0", "work_queues"), ["wq0.7"]),
])
def test_a_dsa_group_setting_is_not_in_effect_on_a_device_disabled_on_both_sides(base: dict, leaf: tuple,
                                                                                 value: object) -> None:
    """drivers/dma/idxd writes a device's group and engine configuration when the device is enabled
    (idxd_device_config): on a device disabled on both sides the change is stored, not run (warning)."""
    path = (*GROUP, *leaf)
    dotted = 'dsa.devices.dsa0.groups."group0.0".' + leaf[1]
    assert severity(base, changed(base, (path, value)), dotted) == "invalidating"  # enabled: it runs
    off = changed(base, (("dsa", "devices", "dsa0", "state"), "disabled"))
    assert severity(off, changed(off, (path, value)), dotted) == "warning"
    engine = ("dsa", "devices", "dsa0", "engines", "engine0.0", "group_id")
    assert severity(off, changed(off, (engine, 3)), 'dsa.devices.dsa0.engines."engine0.0".group_id') == "warning"
    assert severity(base, changed(base, (engine, 3)), 'dsa.devices.dsa0.engines."engine0.0".group_id') == \
        "invalidating"


def _server_snap(tmp: Path, name: str, cmd: str, version: str, only: str = "gpu,vllm") -> dict:
    out = tmp / f"{name}.toml"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(FIXTURES / "nvml" / "hgx-h100-8.json")}
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--only", only, "--vllm-version", version,
                    "--vllm-cmd", cmd, "-o", str(out)], env=env, timeout=120, check=True)
    return load(str(out))


@pytest.mark.parametrize(("args", "version", "only", "expect"), [
    ("-tp 2", "0.12.0", "gpu,vllm", "clean"),
    ("-tp 4 -pp 2", "0.10.2", "gpu,vllm", "clean"),
    ("-tp 2 --distributed-executor-backend mp", "0.11.0", "gpu,vllm", "clean"),
    ("-tp 1", "0.12.0", "gpu,vllm", "invalidating"),  # the one-process executor sets nothing
    ("-tp 2 --distributed-executor-backend ray", "0.12.0", "gpu,vllm", "invalidating"),
    ("-tp 16", "0.12.0", "gpu,vllm", "invalidating"),  # more than this host's 8 GPUs: not the local executor
    ("-tp 2", "0.12.0", "vllm", "invalidating"),  # the host's GPUs not read: not known to fit
    ("-tp 2", "0.33.0", "gpu,vllm", "invalidating"),  # decided elsewhere in 0.33 (not read)
])
def test_omp_num_threads_1_is_what_the_multiprocessing_executor_sets(tmp_path: Path, args: str, version: str,
                                                                     only: str, expect: str) -> None:
    """set_multiprocessing_worker_envs (multiproc_worker_utils.py in 0.10.2, v1/executor/multiproc_executor.py in
    0.11.0-0.12.0) sets OMP_NUM_THREADS=1 where it is unset, in the executor's process before the workers start:
    a server given 1 runs as one given nothing wherever that executor runs."""
    unset = _server_snap(tmp_path, "unset", f"vllm serve meta-llama/Llama-3.1-8B {args}", version, only)
    one = _server_snap(tmp_path, "one", f"OMP_NUM_THREADS=1 vllm serve meta-llama/Llama-3.1-8B {args}", version, only)
    result = compare(unset, one)
    assert result.verdict == expect, [(f.path, f.severity) for f in result.findings]
    if expect == "clean":
        assert "set_multiprocessing_worker_envs" in one["vllm"]["env_same_as_unset"]["OMP_NUM_THREADS"]["because"]
    two = _server_snap(tmp_path, "two", f"OMP_NUM_THREADS=2 vllm serve meta-llama/Llama-3.1-8B {args}", version, only)
    assert compare(unset, two).verdict == "invalidating"
