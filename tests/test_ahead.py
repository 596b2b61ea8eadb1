"""The GPU section collected ahead in a forked child (hoststate.ahead): forked only where the command reads the
GPUs with a default context, the same section as the collector run in the parent, a child that hangs, fails or
is not taken never outlives the collection, one that answered is reaped without the parent waiting on its exit,
the command's own processes are never a vLLM server, and on a live host NVML starts in the child before the
collector's modules are imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hoststate import ahead, capture
from hoststate.nvml import NVML_REPLAY_ENV
from hoststate.snapshot import toml_loads
from tests.conftest import PYTHONPATH, REPO

REPLAY = REPO / "fixtures" / "nvml" / "h200.json"

CASES = [
    (["snap"], True),
    (["snap", "-q", "-o", "a.toml"], True),
    (["--debug", "snap"], True),
    (["snap", "--only", "gpu"], True),
    (["snap", "--only=system,gpu"], True),
    (["snap", "--skip", "dsa"], True),
    (["guard", "--baseline", "b.toml", "--", "vllm", "serve", "--root", "x", "--vllm-pid", "3"], True),
    (["snap", "--root", "/srv/tree"], False),
    (["snap", "--root=/srv/tree"], False),
    (["snap", "--vllm-pid", "4242"], False),
    (["snap", "--help"], False),
    (["snap", "--only", "dsa,system"], False),
    (["snap", "--only"], False),
    (["snap", "--skip=gpu"], False),
    (["snap", "--skip", "dsa, gpu"], False),  # click strips each name
    (["snap", "--only", "system, gpu"], True),
    (["snap", "--only", "gpu", "--only", "system"], False),  # the last one, as click keeps it
    (["guard", "--skip", "env,gpu", "--", "true"], False),
    (["show", "a.toml"], False),
    (["diff", "a.toml", "b.toml"], False),
    (["check"], False),
    ([], False),
]


@pytest.mark.parametrize(("argv", "expected"), CASES)
def test_forked_only_where_the_command_reads_the_gpus_with_a_default_context(argv: list[str],
                                                                            expected: bool) -> None:
    assert ahead.wanted(argv, {}, exists=lambda _p: True) is expected
    assert ahead.wanted(argv, {}, exists=lambda _p: False) is False  # no driver: nothing to read
    assert ahead.wanted(argv, {NVML_REPLAY_ENV: str(REPLAY)}, exists=lambda _p: False) is expected


HOST_CASES = [
    (["snap"], True),
    (["snap", "-q", "-o", "a.toml", "--label", "x"], True),
    (["--debug", "snap"], True),
    (["snap", "--vllm-pid", "4242"], True),  # the host job's sections do not read the server
    (["guard", "--baseline", "b.toml", "--", "vllm", "serve", "--only", "x", "--root", "y"], True),  # CMD's own
    (["snap", "--only", "gpu"], False),
    (["snap", "--only=system,dsa,accel_config,env,packages"], False),  # a selection: the parent may differ
    (["snap", "--skip", "gpu"], False),
    (["snap", "--root", "/"], False),
    (["snap", "--root=/srv/tree"], False),
    (["snap", "--timeout", "5"], False),
    (["snap", "--timeout=5"], False),
    (["snap", "-h"], False),
    (["guard", "--help"], False),
    (["show", "a.toml"], False),
    (["check"], False),
    ([], False),
]


@pytest.mark.parametrize(("argv", "expected"), HOST_CASES)
def test_the_host_job_is_forked_only_for_a_plain_snap_of_every_host_collector(argv: list[str],
                                                                               expected: bool) -> None:
    """And only with a core free for it beside the parent: HOST_CPUS or more."""
    assert ahead.host_wanted(argv, cpus=16) is expected
    assert ahead.host_wanted(argv, cpus=ahead.HOST_CPUS) is expected
    assert ahead.host_wanted(argv, cpus=ahead.HOST_CPUS - 1) is False
    assert ahead.JOBS[ahead.HOST](argv, {}) is (expected and len(os.sched_getaffinity(0)) >= ahead.HOST_CPUS)


#: A command run as the installed `hoststate` runs it, or entered after the imports (no child), writing the
#: modules the parent process loaded.
ENTRY = """
import atexit, json, os, sys
out, how, args = sys.argv[1], sys.argv[2], sys.argv[3:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
if os.environ.get("RECORD_PARSE"):  # the snapshot texts this process parses, written beside the modules
    import hoststate.snapshot as snapshot
    parsed, real = [], snapshot.parse
    snapshot.parse = lambda data, source="<snapshot>": parsed.append(source) or real(data, source)
    atexit.register(lambda: open(out + ".parsed", "w").write(json.dumps(parsed)))
sys.argv = ["hoststate", *args]
if how == "ahead":
    from hoststate import ahead
    ahead.HOST_CPUS = 1  # the host job's child on a machine of any size (the project's VM has 2 CPUs)
    from hoststate.__main__ import main
    main()
else:
    from hoststate.cli import main
    main(args)
"""


def _snap(tmp_path: Path, how: str, *args: str) -> tuple[dict, set[str]]:
    out, modules = tmp_path / f"{how}.toml", tmp_path / f"{how}.json"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, NVML_REPLAY_ENV: str(REPLAY)}
    done = subprocess.run([sys.executable, "-c", ENTRY, str(modules), how, "snap", "-q", "-o", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return toml_loads(out.read_text()), set(json.loads(modules.read_text()))


@pytest.mark.parametrize("args", [("--only", "gpu"), ("--only", "gpu,system,env")])
def test_the_section_collected_ahead_is_the_one_the_parent_would_collect(tmp_path: Path, args: tuple) -> None:
    early, early_modules = _snap(tmp_path, "ahead", *args)
    here, here_modules = _snap(tmp_path, "here", *args)
    assert "hoststate.collectors.gpu" in here_modules
    assert "hoststate.collectors.gpu" not in early_modules  # the child read the GPUs, not the parent
    assert "hoststate.nvml_replay" not in early_modules
    assert "pickle" not in early_modules  # the section crosses the pipe in marshal's format
    for snap in (early, here):
        snap["collectors"]["gpu"].pop("took_ms")
    assert early["gpu"] == here["gpu"] and early["gpu"]["devices"]
    assert early["collectors"]["gpu"] == here["collectors"]["gpu"]
    assert early["hoststate"]["digest"] == here["hoststate"]["digest"]


def test_the_host_sections_collected_ahead_are_the_ones_the_parent_would_collect(tmp_path: Path) -> None:
    """A plain snap takes system, DSA, accel-config, env and packages from the host job's child: the same sections
    and digest as collected in the parent. The parent's own work (vLLM's collector imports system, env and
    packages) never imports the dsa and accel_config collectors, so their absence shows the child read them."""
    early, early_modules = _snap(tmp_path, "ahead")
    here, here_modules = _snap(tmp_path, "here")
    for name in ("dsa", "accel_config"):
        assert f"hoststate.collectors.{name}" in here_modules
        assert f"hoststate.collectors.{name}" not in early_modules
    for name in ahead.HOST_NAMES:
        for snap in (early, here):
            snap["collectors"][name].pop("took_ms")
        assert early["collectors"][name] == here["collectors"][name]
        assert early.get(name) == here.get(name)
    assert early["system"] and early["hoststate"]["digest"] == here["hoststate"]["digest"]


#: A guard whose benchmark's command line names vLLM: the command's own processes (the parent and its GPU child)
#: share that command line (``python .../hoststate guard ... -- vllm serve M`` reads as a vLLM server's), and
#: neither is the server a snapshot describes.
def test_the_commands_own_processes_are_no_vllm_server(tmp_path: Path) -> None:
    from hoststate.collectors.vllm.argv import locate

    base, script = tmp_path / "b.toml", tmp_path / "hoststate"
    script.write_text(ENTRY)
    _snap(tmp_path, "here", "--only", "system")
    base.write_text((tmp_path / "here.toml").read_text())
    for how in ("ahead", "here"):
        saved = tmp_path / f"{how}.saved.toml"
        argv = [sys.executable, str(script), str(tmp_path / "modules.json"), how, "guard", "--baseline", str(base),
                "--only", "system,gpu,vllm", "--accept", "**", "--save-current", str(saved), "--",
                sys.executable, "-c", "pass", "vllm", "serve", "m"]
        assert locate(argv).program == "vllm serve"
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, NVML_REPLAY_ENV: str(REPLAY)}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        snap = toml_loads(saved.read_text())
        assert snap["collectors"]["vllm"]["status"] == "absent", (how, snap.get("vllm"))


@pytest.mark.parametrize("state", ["_children", "_exiting"])
def test_discovery_passes_over_the_commands_child_running_or_exiting(monkeypatch: pytest.MonkeyPatch,
                                                                     state: str) -> None:
    """A real process with the command's command line stands in for its GPU child: a server to discovery until
    hoststate.ahead holds it as its child, running or answered and exiting."""
    from hoststate.collectors.vllm.discovery import discover

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "vllm", "serve", "m"])
    try:
        deadline = time.monotonic() + 10
        while b"vllm" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd
        assert proc.pid in {p.pid for p in discover({})}
        standing_in = {ahead.NAME: (proc.pid, -1)} if state == "_children" else [(proc.pid, None, None)]
        monkeypatch.setattr(ahead, state, standing_in)
        assert ahead.ours() == {os.getpid(), proc.pid}
        assert proc.pid not in {p.pid for p in discover({})}
    finally:
        proc.kill()
        proc.wait()


def _child(argv: list[str], data: bytes | None = None, job: str = ahead.NAME) -> subprocess.Popen:
    """A process standing in for ``job``'s forked child, with the read end of a pipe it may have written."""
    read, write = os.pipe()
    if data is not None:
        os.write(write, data)
        os.close(write)
    proc = subprocess.Popen(argv, pass_fds=() if data is not None else (write,))
    if data is None:
        os.close(write)  # the child holds the only write end: the pipe stays open while it runs
    ahead._children[job] = (proc.pid, read)
    ahead._locks[job] = __import__("_thread").allocate_lock()
    return proc


def _gone(proc: subprocess.Popen) -> bool:
    """Whether the stand-in was ended and reaped by hoststate.ahead (its pid is no process any more)."""
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_that_does_not_answer_is_killed_at_the_timeout() -> None:
    proc = _child(["sleep", "60"])
    section = capture._early("gpu", capture.context(timeout=0.3)[0])
    assert section is not None and section.status == "timeout" and "0.3s" in section.reason
    assert _gone(proc) and ahead.NAME not in ahead._children


def test_a_child_that_fails_leaves_the_collector_to_the_parent() -> None:
    proc = _child(["true"], b"\x80\x04not marshal data")
    assert capture._early("gpu", capture.context(timeout=5)[0]) is None
    assert _gone(proc) and ahead.NAME not in ahead._children


@pytest.mark.parametrize("options", [{"root": str(REPO / "fixtures" / "hosts" / "seed-baseline")},
                                     {"vllm_pid": 4242}])
def test_a_child_collected_for_another_context_is_not_used(options: dict) -> None:
    proc = _child(["sleep", "60"])
    assert capture._early("gpu", capture.context(**options)[0]) is None
    assert _gone(proc) and ahead.NAME not in ahead._children


def test_a_child_not_taken_is_ended_with_the_collection() -> None:
    proc = _child(["sleep", "60"])
    assert capture._early("system", capture.context()[0]) is None and ahead.NAME in ahead._children  # gpu only
    capture.snap(capture.SnapOptions(root=str(REPO / "fixtures" / "hosts" / "seed-baseline"), only=("system",)))
    assert _gone(proc) and ahead.NAME not in ahead._children


def test_the_host_jobs_sections_are_taken_once_and_shared_by_its_collectors() -> None:
    """Each host collector gets its own section from the one answer; one the child did not hand over is left to
    the parent."""
    import marshal

    bundle = {name: {"status": "ok", "data": {"from": name}} for name in ahead.HOST_NAMES if name != "packages"}
    proc = _child(["true"], marshal.dumps(bundle), job=ahead.HOST)
    ctx = capture.context()[0]
    for name in ahead.HOST_NAMES[:-1]:
        section = capture._early(name, ctx)
        assert section is not None and section.data == {"from": name}
    assert capture._early("packages", ctx) is None
    assert _until_gone(proc) and ahead.HOST not in ahead._children  # reaped by take's thread once it exited
    ahead.settle(5)
    ahead.discard()


def test_a_host_child_that_does_not_answer_makes_each_of_its_sections_a_timeout() -> None:
    proc = _child(["sleep", "60"], job=ahead.HOST)
    ctx = capture.context()[0]
    ctx.timeout = 0.2  # the plain snap's context (for which the child is kept), with a short wait for this test
    started = time.perf_counter()
    sections = [capture._early(name, ctx) for name in ahead.HOST_NAMES]
    assert all(s is not None and s.status == "timeout" and "0.2s" in s.reason for s in sections)
    assert time.perf_counter() - started < 5  # one wait for all of them
    assert _gone(proc) and ahead.HOST not in ahead._children
    ahead.discard()


@pytest.mark.parametrize("options", [{"root": str(REPO / "fixtures" / "hosts" / "seed-baseline")},
                                     {"only": ("system", "dsa")}, {"skip": ("packages",)}, {"timeout": 5.0}])
def test_a_host_child_collected_for_another_context_is_ended_and_not_used(options: dict) -> None:
    proc = _child(["sleep", "60"], job=ahead.HOST)
    ctx = capture.context(**options)[0]
    assert _gone(proc) and ahead.HOST not in ahead._children
    assert capture._early("system", ctx) is None


def test_a_failing_host_child_leaves_its_collectors_to_the_parent() -> None:
    proc = _child(["true"], b"\x80\x04not marshal data", job=ahead.HOST)
    ctx = capture.context()[0]
    assert [capture._early(name, ctx) for name in ahead.HOST_NAMES] == [None] * len(ahead.HOST_NAMES)
    assert _gone(proc)
    ahead.discard()


#: A parent that forks the child (whose work never ends), then is killed by a signal: no exit handler runs.
KILLED_PARENT = """
import os, signal, sys, time
from hoststate import ahead
def work():
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
assert ahead.start({ahead.NAME: work}, ["snap"]) == (ahead.NAME,)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that still runs (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_dies_with_a_parent_killed_by_a_signal(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, NVML_REPLAY_ENV: str(REPLAY)}
    with open(tmp_path / "stderr", "wb") as err:  # not a pipe: the child would hold it open
        done = subprocess.run([sys.executable, "-c", KILLED_PARENT, str(marker)], env=env, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=60, check=False)
    assert done.returncode == -9, (tmp_path / "stderr").read_text()
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)  # killed with its parent, not left sleeping for two minutes


#: A child that answers at once and then takes long to exit, as one closing NVML's handles might.
SLOW_EXIT = "import marshal, os, sys, time; w = int(sys.argv[1]); os.write(w, marshal.dumps({'status': 'ok'})); " \
            "os.close(w); time.sleep(120)"


def _answered_then_exiting() -> subprocess.Popen:
    """A stand-in child that answered; ``take`` has taken its answer and left it to the reaper."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_EXIT, str(write)], pass_fds=(write,))
    os.close(write)
    ahead._children[ahead.NAME] = (proc.pid, read)
    ahead._locks[ahead.NAME] = __import__("_thread").allocate_lock()
    state, value = ahead.take(ahead.NAME, time.perf_counter() + 60)
    ahead._handed.clear()
    assert (state, value) == ("ok", {"status": "ok"}) and ahead.NAME not in ahead._children
    return proc


def _until_gone(proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + 30
    while not _gone(proc) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(proc)


def test_a_child_that_answered_is_reaped_without_waiting_for_its_exit() -> None:
    proc = _answered_then_exiting()
    assert _alive(proc.pid)  # still exiting: take did not wait for it
    os.kill(proc.pid, 15)
    assert _until_gone(proc)  # reaped once it exited, not left a zombie
    ahead._exiting.clear()


def test_settle_waits_for_the_exiting_child_and_kills_one_that_does_not_exit() -> None:
    proc = _answered_then_exiting()
    ahead.settle(0.2)  # it sleeps for two minutes: killed once the wait is over
    assert _gone(proc) and ahead._exiting == []
    ahead.settle(0.2)  # nothing left to settle


def test_without_a_thread_for_the_reaper_the_child_is_reaped_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_EXIT.replace("time.sleep(120)", "time.sleep(0.5)"),
                             str(write)], pass_fds=(write,))
    os.close(write)
    ahead._children[ahead.NAME] = (proc.pid, read)
    ahead._locks[ahead.NAME] = __import__("_thread").allocate_lock()

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    assert ahead.take(ahead.NAME, time.perf_counter() + 60)[0] == "ok"
    ahead._handed.clear()
    assert _gone(proc) and ahead._exiting == []  # reaped before take returned


def test_a_collection_ahead_that_raises_leaves_the_collector_to_run_here() -> None:
    def broken(_name: str, _ctx: object) -> None:
        raise RuntimeError("no thread")

    ctx = capture.context(root=str(REPO / "fixtures" / "hosts" / "seed-baseline"), only=("system",))[0]
    ctx.early = broken
    from hoststate.collectors import run_all

    section = run_all(ctx, ("system",))["system"]
    assert section.status in ("ok", "partial") and section.data


#: The child's value must be one marshal writes; one it cannot fails the child and the parent collects itself.
UNWRITABLE = """
import os, sys
from hoststate import ahead
assert ahead.start({ahead.NAME: lambda: {"status": "ok", "data": {"handle": object()}}}, ["snap"]) == (ahead.NAME,)
print(ahead.take(ahead.NAME, __import__("time").perf_counter() + 60)[0])
"""


def test_a_child_whose_section_marshal_cannot_write_fails_and_the_parent_collects() -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, NVML_REPLAY_ENV: str(REPLAY)}
    done = subprocess.run([sys.executable, "-c", UNWRITABLE], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["failed"]


class _Library:
    """NVML's library as ctypes loads it, standing in: nvmlInitWithFlags waits for ``release`` and returns
    ``code`` (an NVML return code), recording who called it with which flags."""

    def __init__(self, code: int = 0):
        self.release = threading.Event()
        self.calls: list[tuple[str, int]] = []
        self.code = code

    def nvmlInitWithFlags(self, flags: int) -> int:  # noqa: N802 - NVML's name
        self.calls.append((threading.current_thread().name, flags))
        self.release.wait(30)
        return self.code


class _Devices:
    """NVML's library standing in for warm_devices: ``count`` GPUs, the handle of those in ``lost`` refused (an
    NVML error code), every call recorded by name and device."""

    def __init__(self, count: int, lost: tuple[int, ...] = (), count_code: int = 0):
        self.count, self.lost, self.count_code = count, lost, count_code
        self.calls: list[tuple[str, int | None]] = []

    def nvmlDeviceGetCount_v2(self, out: object) -> int:  # noqa: N802 - NVML's names
        self.calls.append(("count", None))
        out._obj.value = self.count  # type: ignore[attr-defined] - ctypes.byref's object
        return self.count_code

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, out: object) -> int:  # noqa: N802
        self.calls.append(("handle", index))
        out._obj.value = 0x1000 + index  # type: ignore[attr-defined]
        return 15 if index in self.lost else 0  # NVML_ERROR_GPU_IS_LOST

    def _device(self, name: str, handle: object) -> int:
        self.calls.append((name, handle.value - 0x1000))  # type: ignore[attr-defined]
        return 0

    def nvmlDeviceGetApplicationsClock(self, handle: object, clock: int, out: object) -> int:  # noqa: N802
        assert clock == 0
        return self._device("applications_clock", handle)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object, out: object) -> int:  # noqa: N802
        return self._device("power_limit", handle)

    def nvmlDeviceGetEccMode(self, handle: object, current: object, pending: object) -> int:  # noqa: N802
        return self._device("ecc_mode", handle)


def test_nvmls_first_use_work_is_done_for_every_gpu_whose_handle_it_gets() -> None:
    """After NVML starts, the early thread gets every GPU's handle, then asks each the queries whose first call
    costs most; a GPU whose handle is refused is left to the collector, as is everything when the count fails."""
    library = _Devices(3, lost=(1,))
    ahead.warm_devices(library)
    per_device = [("applications_clock", 0), ("power_limit", 0), ("ecc_mode", 0),
                  ("applications_clock", 2), ("power_limit", 2), ("ecc_mode", 2)]
    assert library.calls == [("count", None), ("handle", 0), ("handle", 1), ("handle", 2), *per_device]
    failing = _Devices(3, count_code=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    ahead.warm_devices(failing)
    assert failing.calls == [("count", None)]


@pytest.mark.parametrize("code", [0, 9])  # NVML_SUCCESS, NVML_ERROR_DRIVER_NOT_LOADED
def test_the_early_thread_warms_the_gpus_only_after_nvml_started(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    library = _Devices(1)
    library.nvmlInitWithFlags = lambda flags: library.calls.append(("init", flags)) or code  # type: ignore
    monkeypatch.setattr(ahead, "_library", lambda: library)
    thread = ahead.start_nvml({})
    thread.join(30)  # type: ignore[union-attr]
    warmed = [("count", None), ("handle", 0), ("applications_clock", 0), ("power_limit", 0), ("ecc_mode", 0)]
    assert library.calls == [("init", 0), *(warmed if code == 0 else [])]


def _missing() -> _Library:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("failure", [None, "driver not loaded", "no library"])
def test_nvml_starts_in_a_thread_and_leaves_a_failure_to_the_collector(monkeypatch: pytest.MonkeyPatch,
                                                                      failure: str | None) -> None:
    library = _Library(code=9 if failure == "driver not loaded" else 0)  # NVML_ERROR_DRIVER_NOT_LOADED
    monkeypatch.setattr(ahead, "_library", _missing if failure == "no library" else lambda: library)
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    before = set(sys.modules)
    thread = ahead.start_nvml({})
    assert isinstance(thread, threading.Thread)
    if failure != "no library":
        assert thread.is_alive()  # the caller goes on while the driver starts
    library.release.set()
    thread.join(30)
    assert not thread.is_alive() and raised == []
    assert library.calls == ([] if failure == "no library" else [("nvml-init", 0)])
    assert "pynvml" not in set(sys.modules) - before  # the driver's start does not wait for pynvml's import


def test_nvml_is_not_started_under_a_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    library = _Library()
    monkeypatch.setattr(ahead, "_library", lambda: library)
    assert ahead.start_nvml({NVML_REPLAY_ENV: str(REPLAY)}) is None
    assert library.calls == []


def test_the_early_start_loads_the_library_the_installed_pynvml_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both name it to ctypes.CDLL; the collector's nvmlInit then gets the library the child started (dlopen hands
    back the one loaded) instead of a second copy of NVML."""
    import ctypes

    from hoststate.nvml import import_pynvml

    pynvml = import_pynvml()
    loaded: list[str] = []

    def record(name: str, *args: object, **kwargs: object) -> object:
        loaded.append(name)
        raise OSError(f"{name}: not here")

    monkeypatch.setattr(ctypes, "CDLL", record)
    monkeypatch.setattr(pynvml, "CDLL", record)
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    with pytest.raises(OSError):
        ahead._library()
    with pytest.raises(pynvml.NVMLError):
        pynvml._LoadNvmlLibrary()
    assert loaded[0] == loaded[1] and len(loaded) == 2


#: The installed command on a "live" host: a stand-in pynvml module (the replay, as a module, logging each
#: nvmlInit and nvmlShutdown with its thread and whether the collector was imported yet), a driver marker
#: that exists; argv[1] is the log, argv[2] the marker, the rest the command.
LIVE = """
import sys, threading, time
log, marker = sys.argv[1], sys.argv[2]
import hoststate.nvml
hoststate.nvml.DRIVER_MARKERS = (marker,)  # before hoststate.ahead takes its copy
import hoststate.ahead

class _Library:  # NVML's library as the child's early start loads it, logging as the stand-in pynvml does
    def nvmlInitWithFlags(self, flags):
        with open(log, "a") as fh:
            fh.write(f"init {threading.current_thread().name} {'hoststate.collectors.gpu' in sys.modules}\\n")
        time.sleep(0.2)
        return 0

hoststate.ahead._library = _Library
sys.argv = ["hoststate", *sys.argv[3:]]
from hoststate.__main__ import main
main()
"""

STAND_IN = """
import os, sys, threading, time
from hoststate.nvml_replay import load
_self, _here = sys.modules[__name__], os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["pynvml"]
_replay = load(os.environ["STAND_IN_REPLAY"])  # over the real pynvml's constants and errors
sys.modules["pynvml"] = _self

def _log(what):
    with open(os.environ["STAND_IN_LOG"], "a") as fh:
        fh.write(f"{what} {threading.current_thread().name} {'hoststate.collectors.gpu' in sys.modules}\\n")

def nvmlInit():
    _log("init")
    time.sleep(0.2)
    return _replay.nvmlInit()

nvmlInitWithFlags = nvmlInit

def nvmlShutdown():
    _log("shutdown")
    return _replay.nvmlShutdown()

def __getattr__(name):
    return getattr(_replay, name)
"""


def test_on_a_live_host_the_child_starts_nvml_before_importing_the_collector(tmp_path: Path) -> None:
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "pynvml.py").write_text(STAND_IN)
    marker, log, out = tmp_path / "nvidiactl", tmp_path / "log", tmp_path / "live.toml"
    marker.touch()
    env = {k: v for k, v in os.environ.items() if k != NVML_REPLAY_ENV}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path / "mod"), PYTHONPATH]), STAND_IN_REPLAY=str(REPLAY),
               STAND_IN_LOG=str(log))
    done = subprocess.run([sys.executable, "-c", LIVE, str(log), str(marker), "snap", "-q", "--only", "gpu", "-o",
                           str(out)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()  # the early call comes first; whether the thread ran before the collector
    assert [line.rsplit(" ", 1)[0] for line in lines] == ["init nvml-init", "init MainThread",  # was imported
                                                         "shutdown MainThread"]  # is up to the scheduler
    assert lines[1:] == ["init MainThread True", "shutdown MainThread True"]
    live = toml_loads(out.read_text())
    replayed, _modules = _snap(tmp_path, "here", "--only", "gpu")
    for snap in (live, replayed):  # a live module's bindings are the installed nvidia-ml-py, a replay's recorded
        assert snap["gpu"].pop("bindings_version")
        snap["collectors"]["gpu"].pop("took_ms")
    assert live["gpu"] == replayed["gpu"] and live["gpu"]["devices"]
    assert live["collectors"]["gpu"] == replayed["collectors"]["gpu"]


def test_redactions_patterns_are_built_once_by_the_warm_thread_while_collectors_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A snap of the GPUs alone would otherwise build them after NVML answered; a collector that finishes first
    waits for them rather than building them a second time beside the warm thread."""
    from hoststate import gitleaks

    real, built = gitleaks.keyword_index, []

    def slow(*args: object) -> object:
        built.append(threading.current_thread().name)
        time.sleep(1.0)  # longer than the system collector on a fixture tree takes
        return real(*args)

    monkeypatch.setattr(gitleaks, "keyword_index", slow)
    gitleaks._keyword_index.cache_clear()
    try:
        capture.snap(capture.SnapOptions(root=str(REPO / "fixtures" / "hosts" / "seed-baseline"), only=("system",)))
    finally:
        gitleaks._keyword_index.cache_clear()
    assert built == ["warm"]


def test_a_guard_settles_the_gpu_child_before_it_starts_the_benchmark(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from hoststate.capture import SnapOptions, snap
    from hoststate.run.flow import guarded_run
    from hoststate.snapshot import to_toml

    marker = tmp_path / "settled"
    monkeypatch.setattr(ahead, "settle", lambda timeout: marker.write_text(str(timeout)))
    opts = SnapOptions(root=str(REPO / "fixtures" / "hosts" / "seed-baseline"), only=("system",))
    base = tmp_path / "b.toml"
    base.write_text(to_toml(snap(opts)))
    probe = [sys.executable, "-c", f"import os, sys; sys.exit(0 if os.path.exists({str(marker)!r}) else 3)"]
    outcome = guarded_run(str(base), probe, opts)
    assert outcome.guard.verdict == "comparable" and outcome.returncode == 0
    assert marker.read_text() == str(opts.timeout)


BASELINE_CASES = [
    (["guard", "--baseline", "b.toml", "--", "true"], "b.toml"),
    (["guard", "--baseline=b.toml"], "b.toml"),
    (["--debug", "guard", "--baseline", "a.toml", "--baseline", "c.toml"], "c.toml"),  # the last, as click keeps it
    (["guard", "--root", "/srv/tree", "--only", "system", "--baseline", "b.toml"], "b.toml"),  # read alike anywhere
    (["guard", "--", "vllm", "--baseline", "x"], None),  # CMD's own
    (["guard", "--baseline", "-"], None),
    (["guard", "--baseline="], None),
    (["guard", "--help", "--baseline", "b.toml"], None),
    (["snap", "--baseline", "b.toml"], None),
    (["diff", "a.toml", "b.toml"], None),
    ([], None),
]


@pytest.mark.parametrize(("argv", "path"), BASELINE_CASES)
def test_the_baseline_job_is_forked_only_for_a_guard_naming_a_baseline_file(argv: list[str], path: str | None) -> None:
    """And only with a core free for it beside the parent, as the host job."""
    assert ahead.baseline_path(argv) == path
    assert ahead.baseline_wanted(argv, {}, cpus=ahead.HOST_CPUS) is (path is not None)
    assert ahead.baseline_wanted(argv, {}, cpus=ahead.HOST_CPUS - 1) is False


#: Every TOML date and time type, with an offset and microseconds: what crosses the pipe must come back equal.
TIMES_TOML = """
[hoststate]
schema = 1
taken_at = 2026-12-07T20:41:07.123456+05:30
[x]
utc = 1979-05-27T07:32:00Z
local = 1979-05-27T07:32:00.5
day = 1979-05-27
clock = 07:32:00.999999
list = [1979-05-27, [00:00:01]]
"""


def test_dates_and_times_lifted_out_for_the_pipe_come_back_equal() -> None:
    import marshal

    from hoststate.snapshot import lift_times, restore_times

    tree = toml_loads(TIMES_TOML)
    lifted = toml_loads(TIMES_TOML)
    times = lift_times(lifted)
    assert len(times) == 7
    carried = marshal.loads(marshal.dumps([lifted, times]))  # what the child writes and the parent reads
    restored = restore_times(*carried)
    assert restored == tree
    assert repr(restored) == repr(tree)  # the same types and offsets, not only equal instants


def _snapshot_file(path: Path, label: str = "") -> Path:
    tree = str(REPO / "fixtures" / "hosts" / "seed-baseline")
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", tree, "--only", "system,dsa",
                    "--label", label, "-o", str(path)], env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=120,
                   check=True)
    return path


def _guard(tmp_path: Path, how: str, baseline: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """guard run as the installed command runs it (``ahead``: the baseline child forked) or entered after the
    imports (``here``); with the snapshot texts the parent process parsed."""
    modules = tmp_path / f"{how}.json"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "RECORD_PARSE": "1"}
    tree = str(REPO / "fixtures" / "hosts" / "seed-baseline")
    done = subprocess.run([sys.executable, "-c", ENTRY, str(modules), how, "guard", "--baseline", str(baseline),
                           "--root", tree, "--only", "system,dsa", "--", "true"],
                          capture_output=True, text=True, env=env, timeout=120, check=False, cwd=tmp_path)
    parsed = Path(f"{modules}.parsed")
    return done, json.loads(parsed.read_text()) if parsed.exists() else []


def test_a_baseline_read_ahead_gives_what_the_parents_own_read_gives(tmp_path: Path) -> None:
    """A guard's baseline read and parsed by the child forked as the command starts: the same verdict, report and
    sha256 as the parent's own read, and the parent parsed no snapshot text. Its taken_at, a TOML datetime that
    marshal cannot write, crossed the pipe."""
    baseline = _snapshot_file(tmp_path / "b.toml")
    assert "taken_at = " in baseline.read_text()
    early, early_parsed = _guard(tmp_path, "ahead", baseline)
    here, here_parsed = _guard(tmp_path, "here", baseline)
    assert early.returncode == here.returncode == 0, early.stderr + here.stderr
    assert early.stderr == here.stderr and "comparable" in here.stderr and "sha256:" in here.stderr
    assert here_parsed == [str(baseline)] and early_parsed == []


@pytest.mark.parametrize("text", ["[hoststate\n", "", "\ufeff[hoststate]\n", "[x]\na = 1\n"],
                         ids=["not TOML", "empty", "BOM", "not a snapshot"])
def test_a_bad_baseline_read_ahead_gives_the_parents_own_error(tmp_path: Path, text: str) -> None:
    baseline = tmp_path / "b.toml"
    baseline.write_text(text)
    early, _ = _guard(tmp_path, "ahead", baseline)
    here, _ = _guard(tmp_path, "here", baseline)
    assert early.returncode == here.returncode == 2
    assert early.stderr == here.stderr and "b.toml" in here.stderr
    missing = tmp_path / "gone.toml"
    early, _ = _guard(tmp_path, "ahead", missing)
    assert early.returncode == 2 and "baseline not found" in early.stderr


def test_a_baseline_child_that_read_another_path_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's argv parse is not click's: an answer for another file is dropped (the parent reads its own)."""
    from hoststate.run.guard import read_baseline
    from hoststate.snapshot import read_parsed

    other, mine = _snapshot_file(tmp_path / "other.toml", "other"), _snapshot_file(tmp_path / "mine.toml", "mine")
    monkeypatch.setattr(ahead, "HOST_CPUS", 1)  # forked on a machine of any size (the project's VM has 2 CPUs)
    ahead.start({ahead.BASELINE: lambda: read_parsed(str(other))}, ["guard", "--baseline", str(mine)])
    try:
        assert ahead.pending(ahead.BASELINE)
        snap, sha = read_baseline(str(mine))
    finally:
        ahead.discard()
    assert snap["hoststate"]["label"] == "mine" and not ahead.pending()
