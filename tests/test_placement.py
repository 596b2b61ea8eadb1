"""A vLLM server's CPU placement, loaded libraries and NCCL config files (hoststate/collectors/vllm/placement.py).

A captured container tree (fixtures/hosts/vllm-container: a server in a docker cgroup with an 8-CPU quota and
docker's 64 MiB /dev/shm) is read through --root; real child processes give the live reads (their own maps, a
library mapped under a versioned name, an NCCL config read in the child's view). Every file read from the tree
is failed in turn (EACCES, ENOENT, EIO): the section keeps only ``unreadable`` entries of that class.
"""

from __future__ import annotations

import ctypes.util
import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hoststate import cgroups as cgroups_module
from hoststate import coverage, io
from hoststate.collectors import Section, settle_coverage
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm import placement
from hoststate.diff import compare
from hoststate.policy import Policy, default_policy, parse_rules
from tests.conftest import HOSTS, require
from tests.faults import reader_faults

TREE = str(HOSTS / "vllm-container")
PID = 4242
EXACT = Policy(parse_rules({"rule": [{"path": "**", "severity": "invalidating", "reason": "any"},
                                     {"path": "hoststate.**", "severity": "ignore", "reason": "bookkeeping"}]},
                           "exact.toml"))


def _section(fault: tuple[str, int] | None = None, seen: set[str] | None = None) -> dict[str, Any]:
    with reader_faults(fault, seen):
        sec = Section()
        sec.data = placement.server_facts(PID, {}, sec.unreadable, root=TREE)
        sec = settle_coverage(sec.settle(), vllm_collector.SOURCES)
    entry: dict[str, Any] = {"status": sec.status}
    if sec.unreadable:
        entry["unreadable"] = sec.unreadable
    return {"hoststate": {}, "collectors": {"vllm": entry}, "vllm": sec.data}


def test_the_container_tree_reads_as_its_placement() -> None:
    snap = _section()
    assert snap["collectors"]["vllm"]["status"] == "ok"
    p = snap["vllm"]["placement"]
    assert p["cgroup"] == "/system.slice/docker-4f1c.scope"
    assert (p["cpu_max"], p["cpu_quota_cpus"], p["cpus_allowed"]) == ("800000 100000", 8.0, "0-15")
    assert p["cpu_budget"] == 8.0  # 16 CPUs allowed, 8 of quota
    assert p["threads"] == 214 and p["mems_allowed"] == "0" and p["cpuset_cpus"] == "0-15"
    assert p["throttling"] == {"nr_periods": 182736, "nr_throttled": 20411, "throttled_usec": 95012345}
    assert p["dev_shm"] == {"mounted": True, "fs": "tmpfs", "size_bytes": 64 << 20}
    libs = snap["vllm"]["libraries"]
    assert libs["nccl"]["version"] == "2.27.3"  # from the wheel beside nvidia/nccl/lib, not the soname's "2"
    assert libs["cublas"]["version"] == libs["cublaslt"]["version"] == "12.8.4.1"
    assert libs["cudart"]["path"] == ["/opt/venv/lib/python3.12/site-packages/torch/lib/libcudart-9335f6a2.so.12",
                                      "/usr/local/cuda-12.8/lib64/libcudart.so.12.8.90"]
    assert libs["cuda_driver"]["version"] == "580.159.04"
    assert libs["cudnn"]["path"].endswith(" (deleted)")


def _shapes(paths: set[str]) -> list[str]:
    return sorted({re.sub(r"\d+", "N", p): p for p in paths}.values())


@pytest.mark.parametrize("err", [errno.EACCES, errno.ENOENT, errno.EIO])
def test_every_read_failure_is_unreadable_with_its_class(err: int) -> None:
    seen: set[str] = set()
    clean = _section(seen=seen)
    shapes = _shapes(seen)
    assert len(shapes) >= 9, shapes
    cls = {errno.EACCES: "denied", errno.ENOENT: "missing", errno.EIO: "error"}[err]
    checked = 0
    for rel in shapes:
        faulted = _section((rel, err))
        unreadable = faulted["collectors"]["vllm"].get("unreadable", {})
        assert "not a declared source" not in str(unreadable), (rel, unreadable)
        _paths, src = coverage.lands(vllm_collector.SOURCES, rel)
        assert src is not None, rel
        if errno.errorcode[err] in src.absent:
            continue  # an observed absence (no cpu controller here), declared so
        assert coverage.failures(unreadable).get(rel) == errno.errorcode[err], (rel, unreadable)
        for f in compare(clean, faulted, EXACT).findings:
            if f.change == "coverage":
                continue
            assert f.change == "unreadable" and f"({cls})" in str(f.new), (rel, f)
        checked += 1
    assert checked >= len(shapes) // 2


def test_without_a_quota_the_budget_is_the_allowed_cpus(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(TREE, tree, symlinks=True)
    (tree / "sys/fs/cgroup/system.slice/docker-4f1c.scope/cpu.max").write_text("max 100000\n")
    (tree / "proc/4242/mountinfo").write_text(
        "820 814 0:50 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,inode64\n")
    u: dict[str, str] = {}
    p = placement.server_facts(PID, {}, u, root=str(tree))["placement"]
    assert not u and "cpu_quota_cpus" not in p and p["cpu_budget"] == 16.0
    assert p["dev_shm"] == {"mounted": True, "fs": "tmpfs", "size": "default (half of RAM)"}


def test_cgroup_v1_quota_and_throttled_time(tmp_path: Path) -> None:
    tree = tmp_path / "v1"
    d = tree / "sys/fs/cgroup/cpu,cpuacct/kubepods/pod1"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("200000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    (d / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 7000000\n")
    proc = tree / "proc/7"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("3:cpu,cpuacct:/kubepods/pod1\n1:name=systemd:/kubepods/pod1\n")
    (proc / "status").write_text("Threads:\t64\nCpus_allowed_list:\t0-31\nMems_allowed_list:\t0-1\n")
    (proc / "mountinfo").write_text("")
    u: dict[str, str] = {}
    p = placement.placement(io.Reader(str(tree), u), 7)
    assert not u, u
    assert (p["cpu_max"], p["cpu_quota_cpus"], p["cpu_budget"]) == ("200000 100000", 2.0, 2.0)
    assert p["throttling"] == {"nr_periods": 10, "nr_throttled": 4, "throttled_usec": 7000}
    assert p["dev_shm"] == {"mounted": False}


def _child(env: dict[str, str], code: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


def test_a_live_process_its_mapped_library_and_its_nccl_files(tmp_path: Path) -> None:
    """A real library copied under NCCL's versioned name and mapped by a real child; the child's HOME holds
    ~/.nccl.conf, read in the child's view (NCCL takes the home from getpwuid: $NCCL_CONF_FILE names it here)."""
    libm = ctypes.util.find_library("m")
    src = next((p for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                            "/lib/aarch64-linux-gnu") if libm and os.path.exists(p := f"{d}/{libm}")), None)
    require(src is not None, "a libm to map")
    lib = tmp_path / "libnccl.so.2.21.5"
    shutil.copy(src, lib)
    conf = tmp_path / "nccl.conf"
    conf.write_text("# tuned\nNCCL_P2P_LEVEL=NVL\nNCCL_IB_DISABLE = 1\n")
    os.chmod(tmp_path, 0o755)
    env = {"PATH": os.environ.get("PATH", ""), "NCCL_CONF_FILE": str(conf)}
    child = _child(env, f"import ctypes,sys,time; ctypes.CDLL({str(lib)!r}); print('ready', flush=True); "
                        "time.sleep(30)")
    try:
        u: dict[str, str] = {}
        facts = placement.server_facts(child.pid, env, u)
    finally:
        child.kill()
        child.wait()
    assert facts["libraries"]["nccl"] == {"path": str(lib), "version": "2.21.5"}
    assert facts["nccl_conf"]["user"] == {"file": str(conf),
                                          "settings": {"NCCL_P2P_LEVEL": "NVL", "NCCL_IB_DISABLE": "1"}}
    system = facts["nccl_conf"]["system"]
    assert system["file"] == "/etc/nccl.conf" and ("settings" in system or system == {
        "file": "/etc/nccl.conf", "exists": False})
    p = facts["placement"]
    assert p["threads"] == 1 and p["cpu_budget"] <= len(os.sched_getaffinity(0))
    assert p["cpus_allowed"] and "dev_shm" in p
    assert not {k: v for k, v in u.items() if "nccl" in k}, u


def test_the_vllm_section_of_a_named_process_carries_the_facts() -> None:
    """Through the collector itself (--vllm-pid): placement and libraries land in [vllm]."""
    from hoststate.collectors import Context

    child = _child(dict(os.environ), "import time; print('ready', flush=True); time.sleep(30)")
    try:
        sec = vllm_collector.collect(Context(vllm_pid=child.pid))
    finally:
        child.kill()
        child.wait()
    assert sec.data["placement"]["threads"] >= 1
    assert sec.data["placement"]["cpu_budget"] >= 1
    assert "nccl_conf" in sec.data


def test_the_policy_rates_each_fact() -> None:
    policy = default_policy()
    rated = {path: policy.rule_for(tuple(path.split("."))).severity for path in (
        "vllm.placement.cpu_budget", "vllm.placement.cpu_quota_cpus", "vllm.placement.dev_shm.size_bytes",
        "vllm.placement.throttling.nr_throttled", "vllm.placement.threads", "vllm.libraries.nccl.version",
        "vllm.libraries.nccl.path", "vllm.nccl_conf.user.settings.NCCL_P2P_LEVEL",
        "vllm.servers.8000.placement.cpu_budget", "vllm.env.LD_PRELOAD")}
    assert rated == {
        "vllm.placement.cpu_budget": "invalidating", "vllm.placement.cpu_quota_cpus": "invalidating",
        "vllm.placement.dev_shm.size_bytes": "invalidating",  # below 1 GiB on a side; above: info (its floor)
        "vllm.placement.throttling.nr_throttled": "info",
        "vllm.placement.threads": "info", "vllm.libraries.nccl.version": "invalidating",
        "vllm.libraries.nccl.path": "warning", "vllm.nccl_conf.user.settings.NCCL_P2P_LEVEL": "invalidating",
        "vllm.servers.8000.placement.cpu_budget": "invalidating", "vllm.env.LD_PRELOAD": "invalidating",
    }


def test_a_tree_budget_change_is_invalidating(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(TREE, tree, symlinks=True)
    (tree / "sys/fs/cgroup/system.slice/docker-4f1c.scope/cpu.max").write_text("400000 100000\n")
    before = {"vllm": placement.server_facts(PID, {}, {}, root=TREE)}
    after = {"vllm": placement.server_facts(PID, {}, {}, root=str(tree))}
    found = {f.path: f.severity for f in compare(before, after, default_policy()).findings}
    assert found["vllm.placement.cpu_budget"] == "invalidating", found


def test_cuda13_wheels_share_one_directory(tmp_path: Path) -> None:
    """CUDA 13 wheels put every library in nvidia/cu13/lib: the version comes from the wheel that ships each one
    (the layout and versions of a live H200's PyTorch 2.11 environment, fixtures/real/h200-placement.json)."""
    site = "opt/torch/.venv/lib/python3.12/site-packages"
    for wheel in ("nvidia_cublas-13.1.0.3", "nvidia_cuda_runtime-13.0.96", "nvidia_nccl_cu13-2.28.9"):
        (tmp_path / site / f"{wheel}.dist-info").mkdir(parents=True)
    libs = ("cu13/lib/libcublas.so.13", "cu13/lib/libcublasLt.so.13", "cu13/lib/libcudart.so.13",
            "nccl/lib/libnccl.so.2")
    maps = "".join(f"7f00{i:08x}-7f01{i:08x} r--p 00000000 00:31 {i} /{site}/nvidia/{lib}\n"
                   for i, lib in enumerate(libs))
    (tmp_path / "proc/9").mkdir(parents=True)
    (tmp_path / "proc/9/maps").write_text(maps)
    u: dict[str, str] = {}
    found = placement.libraries(io.Reader(str(tmp_path), u), 9, lambda p: io.Reader(str(tmp_path), u).listdir(p))
    assert {k: v["version"] for k, v in found.items()} == {
        "cublas": "13.1.0.3", "cublaslt": "13.1.0.3", "cudart": "13.0.96", "nccl": "2.28.9"}, u


def _tree(root: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


def _quota(root: str, cgroups: str = "proc/self/cgroup") -> float | None:
    def read(rel: str) -> str | None:
        try:
            return (Path(root) / rel).read_text()
        except OSError:
            return None

    return cgroups_module.cpu_quota(read, read(cgroups) or "")


V2 = "sys/fs/cgroup"
V1 = "sys/fs/cgroup/cpu,cpuacct"


@pytest.mark.parametrize("files, expected", [
    # a leaf without a quota under a pod that has one: the pod's limits the leaf too
    ({"proc/self/cgroup": "0::/kubepods/pod1/ctr\n", f"{V2}/cgroup.controllers": "cpu\n",
      f"{V2}/kubepods/pod1/cpu.max": "250000 100000\n", f"{V2}/kubepods/pod1/ctr/cpu.max": "max 100000\n"}, 2.5),
    # the smaller of two levels, wherever it is
    ({"proc/self/cgroup": "0::/a/b\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/a/cpu.max": "800000 100000\n",
      f"{V2}/a/b/cpu.max": "50000 100000\n"}, 0.5),
    # a container in its own cgroup namespace sees its cgroup as the root of the mount
    ({"proc/self/cgroup": "0::/\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/cpu.max": "150000 100000\n"}, 1.5),
    # no quota anywhere, an unreadable level, a value that is not one
    ({"proc/self/cgroup": "0::/a\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/a/cpu.max": "max 100000\n"}, None),
    ({"proc/self/cgroup": "0::/a\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/a/cpu.max": "lots 100000\n"}, None),
    ({"proc/self/cgroup": "0::/a\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/a/cpu.max": "50000 0\n"}, None),
    ({"proc/self/cgroup": "0::/a\n", f"{V2}/cgroup.controllers": "cpu\n", f"{V2}/a/cpu.max": "9" * 400 + " 1\n"}, None),
    ({"proc/self/cgroup": "0::/a\n"}, None),
    ({}, None),
    # cgroup v1: the cpu controller's quota and period; -1 is no quota
    ({"proc/self/cgroup": "3:cpu,cpuacct:/kubepods/pod1\n1:name=systemd:/kubepods/pod1\n",
      f"{V1}/kubepods/pod1/cpu.cfs_quota_us": "300000\n", f"{V1}/kubepods/pod1/cpu.cfs_period_us": "100000\n"}, 3.0),
    ({"proc/self/cgroup": "3:cpu,cpuacct:/kubepods/pod1\n", f"{V1}/kubepods/pod1/cpu.cfs_quota_us": "-1\n",
      f"{V1}/kubepods/pod1/cpu.cfs_period_us": "100000\n"}, None),
    # a hybrid host (v1 controllers, an empty unified line): the cpu controller's hierarchy
    ({"proc/self/cgroup": "1:cpu:/job\n0::/\n", "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us": "400000\n",
      "sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "100000\n"}, 4.0),
], ids=["pod-above-leaf", "smaller-level", "namespace-root", "max", "garbage", "zero-period", "huge", "no-files",
        "nothing", "v1", "v1-none", "hybrid"])
def test_the_cpu_quota_is_the_smallest_on_the_way_up(tmp_path: Path, files: dict[str, str], expected: float | None):
    assert _quota(_tree(tmp_path, files)) == expected


def test_the_cpu_quota_of_the_captured_container_is_the_placements() -> None:
    """The same cgroup files as [vllm.placement] reads for the server: its 8-CPU docker quota."""
    assert _quota(TREE, f"proc/{PID}/cgroup") == _section()["vllm"]["placement"]["cpu_quota_cpus"] == 8.0


def test_the_host_job_counts_a_cgroup_quota_below_the_cpus_it_may_run_on(tmp_path: Path, monkeypatch) -> None:
    """A pod limited to half a CPU keeps every CPU in its affinity: the host job is not forked there."""
    from hoststate import ahead

    monkeypatch.setattr(ahead, "HOST_CPUS", 1)  # the quota is read where the affinity would allow the job
    limited = _tree(tmp_path / "pod", {"proc/self/cgroup": "0::/\n", f"{V2}/cgroup.controllers": "cpu\n",
                                       f"{V2}/cpu.max": "50000 100000\n"})
    free = _tree(tmp_path / "free", {"proc/self/cgroup": "0::/\n", f"{V2}/cgroup.controllers": "cpu\n",
                                     f"{V2}/cpu.max": "max 100000\n"})
    assert ahead._cpus(limited) == 0.5
    assert ahead._cpus(free) == len(os.sched_getaffinity(0))
    assert ahead.host_wanted(["snap"], cpus=ahead._cpus(limited)) is False
    assert ahead.host_wanted(["snap"], cpus=ahead._cpus(free)) is True
    assert ahead._cpus() > 0  # this machine's own files read without an error

    def broken(*_args: object) -> None:
        raise RuntimeError("a bug in the reader")

    monkeypatch.setattr(cgroups_module, "cpu_quota", broken)
    assert ahead._cpus(limited) == len(os.sched_getaffinity(0))  # the command still starts: the affinity decides


def _conf(files: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
    """nccl_conf() on config files given as text, in place of the server's view (a missing one is ENOENT)."""
    def read_text(path: str) -> tuple[str | None, str | None]:
        return (files[path], None) if path in files else (None, f"{path}: ENOENT")

    return placement.nccl_conf(read_text, env, "/home/u", {}, "proc/1")


@pytest.mark.parametrize(("lines", "env", "acts"), [
    ("NCCL_DEBUG=INFO\n", {}, False),  # set-up logging only: the default subsystems
    ("NCCL_DEBUG=WARN\n", {}, False),
    ("NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=COLL\n", {}, True),  # a line per collective
    ("NCCL_DEBUG=INFO\n", {"NCCL_DEBUG_SUBSYS": "COLL"}, True),  # the subsystem from the server's environment
    ("NCCL_DEBUG=TRACE\n", {}, True),
])
def test_an_nccl_config_files_settings_are_read_as_nccl_reads_them(lines: str, env: dict[str, str],
                                                                     acts: bool) -> None:
    """A file's NCCL_DEBUG is judged as the server's own variable is (env_reads), in the whole environment NCCL
    builds from the variables and the files (nccl src/misc/param.cc): logging at set-up only is the server without
    the line (info), logging per call a setting (rated by variables.toml) -- before, both were warnings."""
    user = _conf({"/home/u/.nccl.conf": lines}, env)["user"]["settings"]
    assert ("NCCL_DEBUG" in user) is acts, user
    assert ("NCCL_DEBUG" in user.get("same_as_unset", {})) is not acts, user
    base = {"vllm": {"nccl_conf": {"user": {"file": "/home/u/.nccl.conf", "settings": {}}}}}
    cur = {"vllm": {"nccl_conf": {"user": {"file": "/home/u/.nccl.conf", "settings": user}}}}
    worst = {f.severity for f in compare(base, cur, default_policy()).findings}
    assert worst == ({"warning"} if acts else {"info"}), worst


def test_a_spelling_nccl_reads_alike_in_a_config_file_is_one_setting() -> None:
    """``NCCL_ALGO=ring`` and ``Ring`` in a config file: NCCL compares algorithm names case-insensitively."""
    a = _conf({"/etc/nccl.conf": "NCCL_ALGO=ring\n"}, {})
    b = _conf({"/etc/nccl.conf": "NCCL_ALGO=Ring\n"}, {})
    assert a["system"]["settings"]["NCCL_ALGO"] == b["system"]["settings"]["NCCL_ALGO"] == "Ring"
    result = compare({"vllm": {"nccl_conf": a}}, {"vllm": {"nccl_conf": b}}, default_policy())
    assert result.verdict == "clean" and {f.severity for f in result.findings} == {"info"}, result.findings
