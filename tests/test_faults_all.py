"""Every collector under faults, through the whole snapshot (issue 8, "Hardening").

For each fault the real ``hoststate snap`` runs (a subprocess with ``-o FILE`` and a small
``--timeout``; the subprocess's own ``timeout=`` only detects a hang, nothing asserts wall-clock
time), or, where a fault needs the live code path of a collector (accel-config, /proc), the library
runs ``collect`` -> ``to_toml`` -> ``loads`` in-process. Then the file is loaded and the collector's
status and recorded reason are checked.

Faults are put into a copy of a fixture tree where a file can carry them (a FIFO for a wedged
device, symlink loops, non-UTF-8 bytes, a sparse 5 MiB file, a file removed between listing and
reading). Errors root cannot provoke on a tmpfs (EACCES, EIO, ENXIO, EOPNOTSUPP, a read that blocks
forever) are injected at os.open/os.read by tests/faults.py inside the snapshotting process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from hoststate import capture, procfiles, snapshot
from hoststate.collectors import COLLECTORS, Context, dsa
from hoststate.coverage import classify, failures, lands
from hoststate.io import MAX_BYTES
from hoststate.nvml import import_pynvml
from hoststate.nvml_replay import load_data
from tests.conformance import BENCHES, TreeBench, module, registered
from tests.conftest import HOSTS, PYTHONPATH, REPO

#: The subprocess's own timeout: a hang detector, never a timing assertion.
HANG = 120
DSA0 = "sys/bus/dsa/devices/dsa0"


def copy_host(name: str, tmp_path) -> str:
    root = tmp_path / name
    shutil.copytree(HOSTS / name, root, symlinks=True)
    return str(root)


@pytest.fixture(scope="module")
def read_only_host(tmp_path_factory):
    """One copy of a host tree per module, for tests that only read it (their faults are injected in the snapping
    process, not made in the tree): a copy costs about 0.4 s on a shared 2-core machine."""
    copies: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in copies:
            copies[name] = copy_host(name, tmp_path_factory.mktemp("read-only-hosts"))
        return copies[name]

    return get


def snap_cli(tmp_path, *args: str, prelude: str = "", env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``hoststate snap -o FILE ARGS`` (after ``prelude``, Python run in the same process), check
    that it exited 0 and wrote the file, and return the loaded snapshot."""
    out = tmp_path / "snap.toml"
    if out.exists():
        out.unlink()
    code = "import sys\n" + textwrap.dedent(prelude) + "\nfrom hoststate.cli import main\nmain(sys.argv[1:])\n"
    full_env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    if env is None or "HOSTSTATE_NVML_REPLAY" not in env:
        full_env.pop("HOSTSTATE_NVML_REPLAY", None)
    proc = subprocess.run([sys.executable, "-c", code, "snap", "-o", str(out), "--timeout", "2", *args],
                          capture_output=True, text=True, cwd=REPO, env=full_env, timeout=HANG, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stderr
    return snapshot.load(str(out))


def status(snap: dict[str, Any], name: str) -> dict[str, Any]:
    return snap["collectors"][name]


# -- faults in the tree ---------------------------------------------------------------------------------------


def _fifo(root: str, rel: str) -> None:
    path = os.path.join(root, rel)
    os.unlink(path)
    os.mkfifo(path)  # nobody ever writes: a blocking read would wait forever, like a wedged device


def _loop(root: str, rel: str) -> None:
    """``rel`` and a sibling point at each other (ELOOP), in place of a file or a directory."""
    path = os.path.realpath(os.path.join(root, rel))
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
    os.symlink(os.path.basename(path) + ".loop", path)
    os.symlink(os.path.basename(path), path + ".loop")


def _write(root: str, rel: str, data: bytes) -> None:
    with open(os.path.join(root, rel), "wb") as fh:
        fh.write(data)


def _sparse(root: str, rel: str) -> None:
    path = os.path.join(root, rel)
    os.unlink(path)
    with open(path, "wb") as fh:
        fh.truncate(MAX_BYTES * 5)


TREE_FAULTS = {
    # name: (make fault, collector, unreadable key, reason)
    "fifo-wq-state": (lambda r: _fifo(r, f"{DSA0}/wq0.0/state"), "dsa", f"{DSA0}/wq0.0/state", "not a regular file"),
    "loop-wq-attr": (lambda r: _loop(r, f"{DSA0}/wq0.1/mode"), "dsa", f"{DSA0}/wq0.1/mode", "ELOOP"),
    "loop-group-dir": (lambda r: _loop(r, f"{DSA0}/group0.1"), "dsa", f"{DSA0}/group0.1", "ELOOP"),
    "loop-device-dir": (lambda r: _loop(r, f"{DSA0}/wq0.2/.."), "dsa", DSA0, "ELOOP"),
    "huge-cpuinfo": (lambda r: _sparse(r, "proc/cpuinfo"), "system", "proc/cpuinfo", f"larger than {MAX_BYTES} bytes"),
}


_CLEAN: dict[str, dict[str, str]] = {}


def _clean_statuses(tree: str, tmp_path) -> dict[str, str]:
    """Each registered collector's status on an unfaulted copy of ``tree`` (snapped once per tree)."""
    if tree not in _CLEAN:
        snap = snap_cli(tmp_path, "--root", copy_host(tree, tmp_path / "clean"))
        _CLEAN[tree] = {info.name: status(snap, info.name)["status"] for info in COLLECTORS}
    return _CLEAN[tree]


def assert_others_untouched(snap: dict[str, Any], faulted: str, clean: dict[str, str]) -> None:
    """Every other registered collector has its status on the clean tree; one that reads the faulted collector's
    section (``after``, ``reads``) may only become partial."""
    for info in COLLECTORS:
        if info.name == faulted:
            continue
        got, want = status(snap, info.name)["status"], clean[info.name]
        reads = faulted in (*info.after, *info.reads)
        assert got == want or (reads and (want, got) == ("ok", "partial")), (info.name, got, want)


@pytest.mark.parametrize("fault", sorted(TREE_FAULTS))
def test_tree_fault_is_recorded_and_the_snapshot_written(fault, tmp_path):
    make, collector, key, reason = TREE_FAULTS[fault]
    root = copy_host("seed-experiment", tmp_path)
    clean = _clean_statuses("seed-experiment", tmp_path)
    make(root)
    snap = snap_cli(tmp_path, "--root", root)
    st = status(snap, collector)
    assert st["status"] == "partial", st
    assert failures(st["unreadable"])[key] == reason
    assert_others_untouched(snap, collector, clean)
    if collector == "dsa" and key != DSA0:
        assert snap["dsa"]["devices"]["dsa2"]["wqs"]["wq2.0"]["state"]  # the rest of the tree is read
    if fault == "loop-group-dir":
        assert "group0.1" not in snap["dsa"]["devices"]["dsa0"]["groups"]
        assert "group0.0" in snap["dsa"]["devices"]["dsa0"]["groups"]


def _wedge_own_file(name: str, root: str) -> str:
    """Make a FIFO of the first regular file of its own that collector ``name`` reads from the tree ``root`` and
    records as such (not a /dev node it only stats, not a file of a collector it cross-checks); its path."""
    _clean, shapes = BENCHES[name].clean(name)
    own = getattr(module(name), "SOURCES", ())
    for rel in shapes:
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path) or lands(own, rel)[1] is None:
            continue
        keep = path + ".keep"
        shutil.copy2(path, keep)
        _fifo(root, rel)
        entry = TreeBench(root).snap(name)["collectors"][name]
        if failures(entry.get("unreadable", {})).get(rel) == "not a regular file":
            os.unlink(keep)
            return rel
        os.unlink(path)
        os.rename(keep, path)
    raise AssertionError(f"{name}: no file of its own that it reads from {root}")


@pytest.mark.parametrize("name", [n for n in registered() if isinstance(BENCHES.get(n), TreeBench)])
def test_a_wedged_file_of_every_tree_collector_is_recorded_and_the_snapshot_written(name, tmp_path):
    """Each registered collector that reads a tree: one of its own files becomes a FIFO nobody writes (a wedged
    device); the snapshot is written, the collector records the file, the others are untouched."""
    tree = os.path.basename(BENCHES[name].root)
    root = copy_host(tree, tmp_path)
    clean = _clean_statuses(tree, tmp_path)
    rel = _wedge_own_file(name, root)
    snap = snap_cli(tmp_path, "--root", root)
    st = status(snap, name)
    assert st["status"] == "partial", (rel, st)
    assert failures(st["unreadable"])[rel] == "not a regular file", (rel, st)
    assert_others_untouched(snap, name, clean)


def test_non_utf8_bytes_are_kept_visibly_in_dsa_and_system(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    _write(root, f"{DSA0}/wq0.2/name", b"wq\xff\xfe-bench\n")
    _write(root, "etc/os-release", b'PRETTY_NAME="Ubuntu \xc3\x28 22.04"\nID=ubuntu\nVERSION_ID="22.04"\n')
    snap = snap_cli(tmp_path, "--root", root)
    assert snap["dsa"]["devices"]["dsa0"]["wqs"]["wq0.2"]["name"] == "wq\\xff\\xfe-bench"
    assert snap["system"]["os"]["pretty_name"] == "Ubuntu \\xc3( 22.04"
    assert status(snap, "dsa")["status"] == "ok" and "unreadable" not in status(snap, "dsa")


def test_file_removed_between_listing_and_reading(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    # The directory is listed, then one of its files really disappears before it is read.
    prelude = """
        import os
        import hoststate.collectors.dsa as dsa
        real_scan = dsa._scan
        def scan(reader, rel):
            entries = real_scan(reader, rel)
            if rel.endswith("dsa0/wq0.0"):
                os.unlink(reader.path(rel + "/size"))
            return entries
        dsa._scan = scan
    """
    snap = snap_cli(tmp_path, "--root", root, "--only", "dsa", prelude=prelude)
    st = status(snap, "dsa")
    assert st["status"] == "partial" and failures(st["unreadable"]) == {f"{DSA0}/wq0.0/size": "ENOENT"}
    assert "size" not in snap["dsa"]["devices"]["dsa0"]["wqs"]["wq0.0"]
    assert snap["dsa"]["devices"]["dsa0"]["wqs"]["wq0.1"]["size"] == 32


# -- errno the kernel gives, injected at os.open / os.read -------------------------------------------------------

INJECT_TARGETS = {
    # suffix: (collector, unreadable key)
    f"{DSA0}/wq0.0/size": ("dsa", f"{DSA0}/wq0.0/size"),
    "proc/meminfo": ("system", "proc/meminfo"),
    "etc/accel-config/accel-config.conf": ("accel_config", "etc/accel-config/accel-config.conf"),
}


@pytest.mark.parametrize("err", ["EACCES", "EIO", "ENXIO", "EOPNOTSUPP"])
@pytest.mark.parametrize("suffix", sorted(INJECT_TARGETS))
def test_errno_is_recorded_by_name_through_the_cli(suffix, err, tmp_path, read_only_host):
    root = read_only_host("seed-experiment-saved")
    on_read = err != "EACCES"  # permission fails at open; the others as a sysfs show() does, at read
    prelude = f"""
        import errno
        from tests.faults import inject
        fault = inject({{{suffix!r}: errno.{err}}}, on_read={on_read})  # kept referenced: active until exit
        fault.__enter__()
    """
    snap = snap_cli(tmp_path, "--root", root, prelude=prelude)
    collector, key = INJECT_TARGETS[suffix]
    st = status(snap, collector)
    assert failures(st["unreadable"]) == {key: err}
    assert st["status"] == "partial"
    if collector == "accel_config":  # nothing is guessed about a saved configuration that could not be read
        assert "saved" not in snap["accel_config"]
        assert st["unreadable"]["saved.**"].startswith(f"{classify(err)}: {err} [")


def test_read_that_blocks_forever_gives_timeout_and_the_rest_is_written(tmp_path, read_only_host):
    """A wedged attribute (open succeeds, read never returns): dsa times out; accel_config, which waits
    for dsa, is told so instead of re-reading the wedged tree and hanging too."""
    root = read_only_host("seed-experiment-saved")
    prelude = f"""
        import os, threading
        real_read, real_open, wedged = os.read, os.open, set()
        def fake_open(path, flags, mode=0o777, *, dir_fd=None):
            fd = real_open(path, flags, mode, dir_fd=dir_fd)
            wedged.discard(fd)
            if os.fsdecode(path).endswith({DSA0 + "/wq0.0/size"!r}):
                wedged.add(fd)
            return fd
        def fake_read(fd, n):
            if fd in wedged:
                threading.Event().wait()
            return real_read(fd, n)
        import hoststate.io as io
        real_in_root = io.open_in_root
        def fake_in_root(root_fd, rel, flags):  # how reads under --root open their files
            fd = real_in_root(root_fd, rel, flags)
            wedged.discard(fd)
            if rel.endswith({DSA0 + "/wq0.0/size"!r}):
                wedged.add(fd)
            return fd
        os.open, os.read, io.open_in_root = fake_open, fake_read, fake_in_root
    """
    snap = snap_cli(tmp_path, "--root", root, "--timeout", "1", prelude=prelude)
    assert status(snap, "dsa") == {"status": "timeout", "reason": "did not finish within 1s",
                                   "took_ms": status(snap, "dsa")["took_ms"]}
    assert "dsa" not in snap
    assert status(snap, "system")["status"] in ("ok", "partial")
    acc = status(snap, "accel_config")
    assert acc["status"] == "ok", acc
    assert snap["accel_config"]["saved"]["reason"] == "live configuration unknown: dsa section is timeout: " \
                                                     "did not finish within 1s"


# -- NVML ------------------------------------------------------------------------------------------------------


def _h200() -> dict[str, Any]:
    with open(HOSTS.parent / "nvml" / "h200.json", encoding="utf-8") as fh:
        return json.load(fh)


def _error_classes() -> list[str]:
    pynvml = import_pynvml()
    return sorted(n[len("NVMLError_"):] for n in dir(pynvml) if n.startswith("NVMLError_"))


#: Single-valued device calls of the H200 replay that no other call falls back to.
_PLAIN_CALLS = ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetSerial",
                "nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetInforomImageVersion", "nvmlDeviceGetPersistenceMode")


def test_every_nvml_error_class_is_known():
    names = _error_classes()
    assert {"NoPermission", "GpuIsLost", "Timeout", "Unknown", "NotSupported", "DriverNotLoaded"} <= set(names)
    assert len(names) >= 25


@pytest.mark.parametrize("error", _error_classes())
def test_each_nvml_error_class_on_a_call_is_recorded_through_toml(error):
    data = _h200()
    uuid = data["devices"][0]["calls"]["nvmlDeviceGetUUID"]
    data["devices"][0]["calls"]["nvmlDeviceGetVbiosVersion"] = {"error": error}
    snap = snapshot.loads(snapshot.to_toml(capture.collect(Context(nvml=load_data(data)), names=("gpu",))))
    st = status(snap, "gpu")
    if error == "GpuIsLost":  # the device is dropped, the snapshot says which and why
        assert st["status"] == "partial" and "GpuIsLost" in st["reason"]
        assert failures(st["unreadable"])[f"{uuid}/vbios_version"] == "GpuIsLost"
        assert uuid not in snap["gpu"].get("devices", {})
        return
    assert failures(st["unreadable"])[f"{uuid}/vbios_version"] == error
    assert "vbios_version" not in snap["gpu"]["devices"][uuid]
    assert snap["gpu"]["devices"][uuid]["name"] == "NVIDIA H200"
    assert st["status"] == ("ok" if error == "NotSupported" else "partial")


@pytest.mark.parametrize("error", _error_classes())
def test_each_nvml_error_class_at_init_is_a_status_with_reason(error):
    data = _h200()
    data["init"] = {"error": error}
    snap = snapshot.loads(snapshot.to_toml(capture.collect(Context(nvml=load_data(data)), names=("gpu",))))
    st = status(snap, "gpu")
    expected = {"DriverNotLoaded": "absent", "LibraryNotFound": "absent", "NoPermission": "denied"}.get(error, "error")
    assert (st["status"], st["reason"]) == (expected, f"nvmlInit: {error}")
    assert "gpu" not in snap


def test_nvml_errors_through_the_cli(tmp_path):
    """Several error classes on several calls of one replay, read by the real CLI."""
    data = _h200()
    uuid = data["devices"][0]["calls"]["nvmlDeviceGetUUID"]
    errors = ("NoPermission", "Unknown", "Timeout", "InsufficientPower", "CorruptedInforom", "NotSupported")
    for call, error in zip(_PLAIN_CALLS, errors, strict=True):
        data["devices"][0]["calls"][call] = {"error": error}
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(data))
    snap = snap_cli(tmp_path, "--only", "gpu", env={"HOSTSTATE_NVML_REPLAY": str(replay)})
    st = status(snap, "gpu")
    assert st["status"] == "partial"
    assert set(errors) <= set(failures(st["unreadable"]).values())
    assert failures(st["unreadable"])[f"{uuid}/power_limit_mw"] == "NoPermission"
    assert snap["gpu"]["devices"][uuid]["name"] == "NVIDIA H200"


@pytest.mark.parametrize("where", ["call", "init", "count"])
def test_hung_nvml_gives_timeout_and_the_snapshot_is_written(where, tmp_path, read_only_host):
    data = _h200()
    if where == "call":
        data["devices"][0]["calls"]["nvmlDeviceGetEccMode"] = {"hang": 600}
    elif where == "init":
        data["init"] = {"hang": 600}
    else:
        data["system"]["nvmlDeviceGetCount"] = {"hang": 600}
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(data))
    snap = snap_cli(tmp_path, "--root", read_only_host("seed-baseline"), "--timeout", "1",
                    env={"HOSTSTATE_NVML_REPLAY": str(replay)})
    assert status(snap, "gpu")["status"] == "timeout"
    assert status(snap, "gpu")["reason"] == "did not finish within 1s"
    assert status(snap, "system")["status"] in ("ok", "partial") and snap["system"]["kernel"]


# -- accel-config ----------------------------------------------------------------------------------------------

FAKE = """#!/bin/sh
case "$1" in
  --version) echo 4.1.8 ;;
  list) {body} ;;
esac
"""

ACCEL_FAULTS = {
    "missing": (None, "accel-config not installed"),
    "exit-1": ("echo 'libaccfg: accfg_new: failed' >&2; exit 1",
               "accel-config list -i: exit 1: libaccfg: accfg_new: failed"),
    "sigsegv": ("kill -SEGV $$", "accel-config list -i: killed by signal 11"),
    "hang": (f"exec {shutil.which('sleep') or '/bin/sleep'} 600", "accel-config list -i: timeout after 0.5s"),
    "bad-json": ("echo '[{\"dev\": \"dsa0\", \"groups\": [{'", "unparsable output:"),
}


@pytest.mark.parametrize("fault", sorted(ACCEL_FAULTS))
def test_accel_config_binary_faults_are_recorded_through_the_snapshot(fault, tmp_path, monkeypatch):
    """The live code path (the dsa section of a fixture stands in for this host's devices), run by the
    snapshot machinery and written to TOML."""
    body, reason = ACCEL_FAULTS[fault]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if body is not None:
        (bindir / "accel-config").write_text(FAKE.format(body=body))
        (bindir / "accel-config").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))  # nothing else: a missing binary is really missing
    ctx = Context(command_timeout=0.5, timeout=30)
    ctx.sections["dsa"] = dsa.collect(Context(root=str(HOSTS / "seed-experiment")))
    snap = snapshot.loads(snapshot.to_toml(capture.collect(ctx, names=("accel_config",))))
    st = status(snap, "accel_config")
    listing = snap["accel_config"]["list"]
    assert listing["reason"].startswith(reason), listing
    if fault == "missing":
        assert snap["accel_config"]["available"] is False
        assert st["status"] in ("ok", "partial")  # nothing failed: the tool is simply not there
    else:
        assert snap["accel_config"]["available"] is True
        assert snap["accel_config"]["path"] == str(bindir / "accel-config")
        assert st["status"] == "partial" and st["reason"] == listing["reason"]
    if body is not None:
        assert snap["accel_config"]["version"] == "4.1.8"
    assert "saved" in snap["accel_config"]  # the saved configuration is still examined


# -- /proc entries of processes that exit mid-read ------------------------------------------------------------


@pytest.fixture
def fake_vllm(tmp_path):
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "fake" / "vllm", tmp_path / "fake" / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(
        "import sys, time\nprint('ready', flush=True)\ntime.sleep(float(sys.argv[-1]) if sys.argv[-1][0].isdigit() "
        "else 300)\n"
    )
    children: list[subprocess.Popen] = []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(tmp_path / "fake"), "VLLM_USE_V1": "1"}

    def start(*args: str, wait: bool = True) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args], env=env,
                                 stdout=subprocess.PIPE if wait else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 text=True)
        children.append(child)
        if wait:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        return child

    start.env = env  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)


def _kill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)  # reaped: /proc/<pid> is gone


def test_discovered_process_exits_before_its_environ_is_read(fake_vllm, monkeypatch):
    child = fake_vllm("--model", "m", "--port", "18123")
    real = procfiles.environ

    def environ(pid, unreadable):
        if pid == child.pid:
            _kill(child)
        return real(pid, unreadable)

    monkeypatch.setattr(procfiles, "environ", environ)
    snap = snapshot.loads(snapshot.to_toml(capture.collect(Context(), names=("vllm",))))
    st = status(snap, "vllm")
    assert failures(st["unreadable"])[f"proc/{child.pid}/environ"] == "ESRCH"
    assert st["status"] == "partial"
    servers = snap["vllm"].get("servers", {"one": snap["vllm"]})
    server = next(s for s in servers.values() if s.get("pid") == child.pid)
    assert server["env_error"] == "ESRCH" and "env" not in server
    assert server["args"]["model"] == "m"  # the command line was read before the exit


def test_named_process_exits_before_its_command_line_is_read(fake_vllm, monkeypatch):
    child = fake_vllm("--model", "m")
    real = procfiles.cmdline

    def cmdline(pid, unreadable):
        if pid == child.pid:
            _kill(child)
        return real(pid, unreadable)

    monkeypatch.setattr(procfiles, "cmdline", cmdline)
    snap = snapshot.loads(snapshot.to_toml(capture.collect(Context(vllm_pid=child.pid), names=("vllm",))))
    st = status(snap, "vllm")
    assert st["status"] == "error" and st["reason"] == f"process {child.pid} could not be read"
    assert failures(st["unreadable"]) == {f"proc/{child.pid}/cmdline": "ESRCH"}


def test_servers_coming_and_going_while_snapping(fake_vllm, tmp_path):
    """Short-lived vLLM-like processes start and exit all through discovery: every snap is written and
    the vllm collector never fails (a vanished process is skipped or recorded)."""
    stop = threading.Event()
    ours: set[str] = set()

    def churn() -> None:
        while not stop.is_set():
            batch = [fake_vllm("--model", "m", "--port", str(18200 + i), f"0.0{i}", wait=False) for i in range(4)]
            ours.update(str(child.pid) for child in batch)
            for child in batch:
                child.wait(timeout=60)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        seen = set()
        for _ in range(6):
            snap = snap_cli(tmp_path, "--only", "vllm", "--timeout", "20")
            st = status(snap, "vllm")
            assert st["status"] in ("ok", "partial", "absent"), st
            # other vLLM-like processes on a shared host may be discovered too: judge only ours
            mine = {k: v for k, v in failures(st.get("unreadable", {})).items()
                    if (re.match(r"proc/(\d+)", k) or [None, None])[1] in ours}
            assert all(v in ("ESRCH", "EACCES", "ENOENT") for v in mine.values()), st
            seen.add(st["status"])
    finally:
        stop.set()
        thread.join(timeout=60)
    assert seen
