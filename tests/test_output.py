"""Outputs never replace what is not theirs (hoststate.output.write_output, used by snap -o, export -o and
guard --save-current): devices and FIFOs are written into, symlinks never replaced, a command's inputs never
written, the umask kept, our own replaced file's mode kept while another owner's file becomes ours, and a signal
mid-write leaves no temporary file. Hostile objects placed by another user: tests/test_output_shared.py."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hoststate import output
from hoststate.errors import WriteError
from hoststate.snapshot import loads
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, require

SNAP = FIXTURES / "snapshots" / "seed-baseline.toml"
ROOT = HOSTS / "seed-baseline"
#: The subprocess's own timeout only detects a hang; nothing asserts wall-clock time.
HANG = 120


def cli(*args: str, prelude: str = "", umask: int | None = None) -> subprocess.CompletedProcess:
    code = "import sys\n" + textwrap.dedent(prelude) + "\nfrom hoststate.cli import main\nmain(sys.argv[1:])\n"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("HOSTSTATE_NVML_REPLAY", None)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env, timeout=HANG,
                          check=False, preexec_fn=None if umask is None else (lambda: os.umask(umask)))


def snap_args(out: Path | str, *extra: str) -> list[str]:
    return ["snap", "--root", str(ROOT), "--only", "system", "-o", str(out), *extra]


def fingerprint(path: Path) -> tuple:
    st = os.lstat(path)
    data = os.readlink(path) if stat.S_ISLNK(st.st_mode) else (path.read_bytes() if stat.S_ISREG(st.st_mode) else b"")
    return st.st_ino, st.st_mode, st.st_rdev, st.st_uid, data


def one_line(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hoststate: ") and "Traceback" not in err, err
    return lines[0]


def no_temp_files(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if p.name.startswith(output.TEMP_PREFIX)]


# -- devices and FIFOs are written into ------------------------------------------------------------------------


@pytest.mark.parametrize("force", [True, False])
def test_snap_into_a_null_device_keeps_the_device(tmp_path, force) -> None:
    """A private node of /dev/null's device (1:3): what `snap -o /dev/null --force` must leave in place."""
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    before = fingerprint(null)
    proc = cli(*snap_args(null, *(["--force"] if force else [])))
    assert proc.returncode == 0, proc.stderr
    assert fingerprint(null) == before and stat.S_ISCHR(os.lstat(null).st_mode)
    no_temp_files(tmp_path)


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def reader() -> None:
        with open(path, "rb") as fh:
            into.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t


def test_snap_into_a_fifo_writes_the_snapshot_into_it(tmp_path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = _read_fifo(fifo, got)
    proc = cli(*snap_args(fifo))
    t.join(HANG)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert loads(got[0])["collectors"]["system"]["status"] in ("ok", "partial")


def test_export_through_a_stdout_like_link_writes_to_the_pipe(tmp_path) -> None:
    """A link to /proc/self/fd/1 (what /dev/stdout is): written through into the pipe, the link stays."""
    link = tmp_path / "stdout"
    os.symlink("/proc/self/fd/1", link)
    proc = cli("export", "prometheus", str(SNAP), "-o", str(link))
    assert proc.returncode == 0, proc.stderr
    assert b"hoststate_info{" in proc.stdout
    assert os.readlink(link) == "/proc/self/fd/1"
    no_temp_files(tmp_path)


# -- what is refused -------------------------------------------------------------------------------------------


def test_a_symlink_is_never_replaced(tmp_path) -> None:
    target = tmp_path / "target.toml"
    target.write_bytes(b"someone else's\n")
    link = tmp_path / "link.toml"
    os.symlink(target, link)
    dangling = tmp_path / "dangling.toml"
    os.symlink(tmp_path / "nothing", dangling)
    before = {p: fingerprint(p) for p in (target, link, dangling)}
    for args in (snap_args(link), snap_args(link, "--force"), snap_args(dangling, "--force"),
                 ["export", "nfd", str(SNAP), "-o", str(link)]):
        line = one_line(cli(*args))
        assert "symbolic link" in line, line
    assert {p: fingerprint(p) for p in before} == before
    assert not (tmp_path / "nothing").exists()
    no_temp_files(tmp_path)


def test_directories_sockets_and_block_devices_are_refused(tmp_path) -> None:
    (tmp_path / "dir").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    os.mknod(tmp_path / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    try:
        for name, kind in (("dir", "a directory"), ("sock", "a socket"), ("blk", "a block device")):
            path = tmp_path / name
            before = fingerprint(path)
            with pytest.raises(WriteError, match=f"is {kind}; refusing"):
                output.write_output(str(path), "x", force=True)
            assert fingerprint(path) == before
    finally:
        sock.close()


# -- a command's inputs are never written ----------------------------------------------------------------------


@pytest.fixture
def baseline(tmp_path) -> Path:
    path = tmp_path / "base.toml"
    path.write_bytes(SNAP.read_bytes())
    return path


def _aliases(path: Path) -> list[str]:
    """Other names of the same file: a hard link, a ./ spelling, a ../ spelling."""
    hard = path.parent / "hard.toml"
    if not hard.exists():
        os.link(path, hard)
    return [str(path), str(hard), str(path.parent / "." / path.name),
            str(path.parent / ".." / path.parent.name / path.name)]


def test_export_never_writes_its_baseline_or_its_snapshot(baseline) -> None:
    before = fingerprint(baseline)
    for name in _aliases(baseline):
        for args in (("export", "prometheus", str(SNAP), "--baseline", str(baseline), "-o", name),
                     ("export", "nfd", str(baseline), "-o", name)):
            line = one_line(cli(*args))
            assert "never written" in line, line
    assert fingerprint(baseline) == before


def test_guard_never_writes_its_baseline_or_policy(baseline, tmp_path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rule]]\npath = "system.kernel.version"\nseverity = "ignore"\n')
    before = fingerprint(baseline), fingerprint(policy)
    marker = tmp_path / "started"
    for name in [*_aliases(baseline), str(policy)]:
        proc = cli("guard", "--baseline", str(baseline), "--policy", str(policy), "--root", str(ROOT),
                   "--accept", "**", "--save-current", name, "--force", "--", "touch", str(marker))
        assert "never written" in one_line(proc)
    assert (fingerprint(baseline), fingerprint(policy)) == before and not marker.exists()


def test_snap_never_writes_its_vllm_log(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO non-default args: {'model': 'x'}\n")
    before = fingerprint(log)
    assert "never written" in one_line(cli(*snap_args(log, "--force", "--vllm-log", str(log))))
    assert fingerprint(log) == before


# -- modes and owners ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask,mode", [(0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_follows_the_umask(tmp_path, umask, mode) -> None:
    out = tmp_path / "new.toml"
    proc = cli(*snap_args(out), umask=umask)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == mode


def test_force_keeps_our_own_replaced_files_mode_and_group(tmp_path) -> None:
    require(os.geteuid() == 0, "only root can give a file another group (CI runs as root)")
    out = tmp_path / "kept.toml"
    out.write_text("old\n")
    os.chown(out, 0, 2345)
    os.chmod(out, 0o604)
    old_inode = os.stat(out).st_ino
    proc = cli(*snap_args(out, "--force"))
    assert proc.returncode == 0, proc.stderr
    st = os.stat(out)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o604, 0, 2345)
    assert st.st_ino != old_inode and loads(out.read_bytes())["hoststate"]["schema"]  # replaced in one rename


def test_force_over_another_owners_file_leaves_our_owner_and_umask(tmp_path) -> None:
    """Their owner and mode are never taken over: a 0666 file of uid 1234 becomes root's file with the umask's mode
    (tests/test_output_shared.py does this in a sticky directory with a file nobody really placed)."""
    require(os.geteuid() == 0, "only root can give a file to another owner (CI runs as root)")
    out = tmp_path / "theirs.toml"
    out.write_text("old\n")
    os.chown(out, 1234, 2345)
    os.chmod(out, 0o666)
    proc = cli(*snap_args(out, "--force"), umask=0o022)
    assert proc.returncode == 0, proc.stderr
    st = os.stat(out)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o644, 0, 0)


# -- signals mid-write -----------------------------------------------------------------------------------------


SIGNAL_MID_WRITE = """
    import os, signal
    real_fsync = os.fsync
    def fsync(fd):  # the temporary file exists and is written: the signal arrives now
        os.kill(os.getpid(), signal.{name})
        real_fsync(fd)
    os.fsync = fsync
"""


@pytest.mark.parametrize("name,rc", [("SIGTERM", -signal.SIGTERM), ("SIGHUP", -signal.SIGHUP), ("SIGINT", 130)])
@pytest.mark.parametrize("existing", [False, True])
def test_a_signal_mid_write_leaves_no_temporary_file(tmp_path, name, rc, existing) -> None:
    out = tmp_path / "out.toml"
    if existing:
        out.write_bytes(b"old content\n")
    proc = cli(*snap_args(out, "--force"), prelude=SIGNAL_MID_WRITE.format(name=name))
    assert proc.returncode == rc, proc.stderr
    no_temp_files(tmp_path)
    if existing:
        assert out.read_bytes() == b"old content\n"
    else:
        assert not out.exists()


def test_library_writer_refuses_an_existing_file_without_force(tmp_path) -> None:
    out = tmp_path / "x.toml"
    output.write_output(str(out), "one\n")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~_umask()
    with pytest.raises(WriteError, match="exists; use --force"):
        output.write_output(str(out), "two\n")
    output.write_output(str(out), "two\n", force=True)
    assert out.read_text() == "two\n"
    no_temp_files(tmp_path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
