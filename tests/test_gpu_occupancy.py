"""What occupies a GPU at snapshot time (hoststate/collectors/gpu_occupancy.py), read through the NVML replay of
the real H200 recordings: idle (fixtures/nvml/h200.json) and with another process holding a CUDA context and
1 GiB (fixtures/nvml/h200-occupied.json, from fixtures/real/h200-occupancy.json), and real child processes for
the server's own descendants."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from hoststate.collectors import Context, gpu_occupancy
from hoststate.diff import compare
from hoststate.nvml_replay import ReplayNvml
from tests.conftest import FIXTURES

IDLE = json.loads((FIXTURES / "nvml" / "h200.json").read_text())
OCCUPIED = json.loads((FIXTURES / "nvml" / "h200-occupied.json").read_text())
REAL = json.loads((FIXTURES / "real" / "h200-occupancy.json").read_text())


def _snap(replay: dict, server_pid: int | None = None) -> dict:
    """A snapshot of the gpu collector alone, as `hoststate snap --only gpu` takes it, from a replay."""
    from hoststate.capture import collect

    snap = collect(Context(root="/nonexistent", nvml=ReplayNvml(replay), vllm_pid=server_pid), ("gpu",))
    snap["hoststate"] = {}
    return snap


def _occupancy(snap: dict) -> dict:
    (dev,) = snap["gpu"]["devices"].values()
    return dev.get("occupancy", {})


def test_idle_h200_reads_the_drivers_reservation_and_no_process():
    assert _occupancy(_snap(IDLE)) == {"memory_used_bytes": REAL["idle"]["used"]}


def test_another_process_on_the_gpu_is_recorded_and_refuses():
    occupied = _occupancy(_snap(OCCUPIED))
    assert occupied == {"memory_used_bytes": REAL["one_gib"]["used"], "foreign_compute_processes": 1,
                        "foreign_process_names": ["/opt/torch/.venv/bin/python3"]}
    found = {f.path.rsplit(".", 1)[-1]: f.severity for f in compare(_snap(IDLE), _snap(OCCUPIED)).findings
             if ".occupancy." in f.path}
    assert found == {"memory_used_bytes": "invalidating", "foreign_compute_processes": "invalidating",
                     "foreign_process_names": "info"}


def test_the_servers_own_processes_are_not_foreign():
    """The server given by --vllm-pid: its memory is taken out. A process named as vLLM's whose owner is not known
    (a replay: no /proc to ask) is foreign all the same: anyone can name a process so."""
    named = copy.deepcopy(OCCUPIED)
    (pid,) = [str(p["pid"]) for p in REAL["one_gib"]["processes"]]
    named["system"]["nvmlSystemGetProcessName"] = {"by_arg": {pid: "VLLM::Worker_TP0"}}
    server = _snap(OCCUPIED, server_pid=int(pid))
    assert _occupancy(server) == {"memory_used_bytes": REAL["one_gib"]["used"] - REAL["one_gib"]["processes"][0][
        "usedGpuMemory"]}
    assert _occupancy(_snap(named, server_pid=int(pid))) == _occupancy(server)
    # the server's memory aside, what is left is the driver's reservation: within the tolerance of the idle GPU
    assert not [f for f in compare(_snap(IDLE), server).findings if ".occupancy." in f.path]
    assert _occupancy(_snap(named))["foreign_process_names"] == ["VLLM::Worker_TP0"]


def test_a_process_named_as_vllms_is_the_benchmarks_only_when_the_invoking_user_runs_it(tmp_path):
    """Real processes: one named ``vllm`` (``exec -a``) of the user hoststate runs for is the benchmark's; the same
    name under another uid, or a process whose owner cannot be read, is not."""
    from hoststate.filetrust import invoking_uid
    from hoststate.io import Reader

    me = invoking_uid()[0]
    trusted = lambda uids: all(uid == me for uid in uids)  # noqa: E731 - the invoking user alone, root aside
    owner_of = gpu_occupancy.owner_reader(Reader("/").read)
    parent_of = gpu_occupancy.parent_reader(Reader("/").read)
    mine = subprocess.Popen(["bash", "-c", "exec -a vllm sleep 30"])
    others = []
    if os.geteuid() == 0:
        others.append(subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c",
                                        "exec -a vllm sleep 30"]))
    try:
        for proc in (mine, *others):  # until each has exec'd the sleeper (setpriv changes the uid before that)
            deadline = time.monotonic() + 30
            while pathlib.Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":
                assert time.monotonic() < deadline, "the sleeper was not started"
                time.sleep(0.02)
        assert owner_of(mine.pid) == (os.getuid(), os.geteuid())
        assert gpu_occupancy.is_own(mine.pid, "vllm", None, parent_of, owner_of, trusted) is (me == os.getuid())
        for other in others:
            assert owner_of(other.pid) == (65534, 65534)
            assert not gpu_occupancy.is_own(other.pid, "vllm", None, parent_of, owner_of, trusted)
        assert not gpu_occupancy.is_own(2 ** 22 + 7, "vllm", None, parent_of, owner_of, trusted)  # no such process
        assert not gpu_occupancy.is_own(mine.pid, "vllm", None, parent_of)  # no owner reader: the name alone
    finally:
        for proc in (mine, *others):
            proc.kill()
            proc.wait()


def test_memory_jitter_within_256_mib_is_ignored_more_is_invalidating():
    for delta, severity in ((64 << 20, "ignore"), (300 << 20, "invalidating")):
        more = copy.deepcopy(IDLE)
        info = more["devices"][0]["calls"]["nvmlDeviceGetMemoryInfo"]
        info["used"] += delta
        found = [f for f in compare(_snap(IDLE), _snap(more), include_ignored=True).findings
                 if f.path.endswith("occupancy.memory_used_bytes")]
        assert [f.severity for f in found] == [severity]


def test_a_failed_process_list_leaves_occupancy_unknown_and_refuses():
    broken = copy.deepcopy(IDLE)
    broken["devices"][0]["calls"]["nvmlDeviceGetComputeRunningProcesses"] = {"error": "NoPermission"}
    snap = _snap(broken)
    assert "occupancy" not in next(iter(snap["gpu"]["devices"].values()))
    found = [f for f in compare(_snap(IDLE), snap).findings if "occupancy" in f.path]
    assert found and all(f.severity == "invalidating" and f.change == "unreadable" for f in found)


def test_descendants_of_the_server_are_its_own_real_processes(tmp_path):
    """Real processes: a child of a child of this process descends from it; this process's parent does not."""
    from hoststate.io import Reader

    script = "import subprocess,sys; p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']);" \
             "print(p.pid, flush=True); p.wait()"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        parent_of = gpu_occupancy.parent_reader(Reader("/").read)
        assert gpu_occupancy.is_own(grandchild, "python3", os.getpid(), parent_of)
        assert gpu_occupancy.is_own(grandchild, "python3", child.pid, parent_of)
        # walked up and not found: the server's parent (this process) and its parent (PID 1 in a test worker's own
        # PID namespace, where the walk ends at once)
        assert not gpu_occupancy.is_own(os.getpid(), "python3", child.pid, parent_of)
        assert not gpu_occupancy.is_own(os.getppid(), "bash", os.getpid(), parent_of)
        assert not gpu_occupancy.is_own(grandchild, "python3", None, parent_of)
    finally:
        with contextlib.suppress(ProcessLookupError, NameError):
            os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
