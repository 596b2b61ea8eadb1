"""Outputs in a directory other users can write (a real sticky, world-writable directory like /tmp), with the hostile
object placed there by a real other user (``nobody``, from a forked child that dropped to its uid): a FIFO never
blocks a command or receives root's output, a symlink to a device is never written through, and ``--force`` over
their file leaves a new file that is ours, never written into theirs. Every refusal is one line and exit 2."""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, HOSTS, require
from tests.test_output import cli, no_temp_files, one_line

SNAP = FIXTURES / "snapshots" / "seed-baseline.toml"
ROOT = HOSTS / "seed-baseline"

#: Every command that writes a file, as (name, argv for an output path).
COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "snap": lambda out: ["snap", "-q", "--root", str(ROOT), "--only", "system", "-o", out],
    "guard": lambda out: ["guard", "--baseline", str(SNAP), "--root", str(ROOT), "--only", "system",
                          "--accept", "**", "--save-current", out],
    "export": lambda out: ["export", "prometheus", str(SNAP), "-o", out],
    "rebaseline": lambda out: ["rebaseline", str(SNAP), str(SNAP), "-o", out],
    "timeline": lambda out: ["timeline", str(FIXTURES / "watch" / "h200-idle.json"), "-o", out],
}


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def sticky(shared_dir) -> Path:
    """A sticky world-writable directory (mode 1777, like /tmp), owned by root."""
    require(os.geteuid() == 0, "placing a file as another user needs root (CI runs as root)")
    path = shared_dir / "sticky"
    path.mkdir()
    path.chmod(0o1777)
    assert stat.S_IMODE(path.stat().st_mode) == 0o1777 and path.stat().st_mode & stat.S_ISVTX
    return path


def as_nobody(action: Callable[[], None]) -> None:
    """Run ``action`` in a forked child that has dropped to nobody's uid and gid for real (setresuid)."""
    uid, gid = _nobody()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child running as nobody failed"


def _args(command: str, out: Path, force: bool) -> list[str]:
    return COMMANDS[command](str(out)) + (["--force"] if force else [])


# -- a FIFO placed by another user ---------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_another_users_fifo_without_reader_is_refused_without_hanging(sticky, command, force) -> None:
    out = sticky / "out.toml"
    as_nobody(lambda: os.mkfifo(out, 0o666))
    line = one_line(cli(*_args(command, out, force)))  # the subprocess's timeout would catch a hang
    assert "a FIFO owned by uid" in line, line
    st = os.lstat(out)
    assert stat.S_ISFIFO(st.st_mode) and st.st_uid == _nobody()[0]
    no_temp_files(sticky)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_another_users_fifo_with_a_reader_receives_nothing(sticky, command) -> None:
    """nobody holds the FIFO open for reading (a blocking writer would hand the output over); nothing arrives."""
    out = sticky / "out.toml"
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    got_r, got_w = os.pipe()
    uid, gid = _nobody()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, as nobody: make the FIFO, read it until told to stop
        code = 1
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.mkfifo(out, 0o666)
            fd = os.open(out, os.O_RDONLY | os.O_NONBLOCK)
            os.write(ready_w, b"r")
            os.read(done_r, 1)
            received = b""
            try:
                while chunk := os.read(fd, 65536):
                    received += chunk
            except BlockingIOError:
                pass
            os.write(got_w, str(len(received)).encode())
            code = 0
        finally:
            os._exit(code)
    for fd in (ready_w, done_r, got_w):
        os.close(fd)
    try:
        assert os.read(ready_r, 1) == b"r"
        line = one_line(cli(*_args(command, out, True)))
        assert "a FIFO owned by uid" in line, line
    finally:
        os.write(done_w, b"d")
        received = os.read(got_r, 64)
        os.waitpid(pid, 0)
        for fd in (ready_r, done_w, got_r):
            os.close(fd)
    assert received == b"0"


def test_another_users_fifo_behind_our_own_link_is_refused(sticky) -> None:
    fifo = sticky / "their.fifo"
    as_nobody(lambda: os.mkfifo(fifo, 0o666))
    link = sticky / "out.toml"
    os.symlink(fifo, link)  # root's own link: followed, but what it leads to is nobody's FIFO
    line = one_line(cli(*_args("snap", link, True)))
    assert "leads to a FIFO owned by uid" in line, line


def test_our_own_fifo_without_reader_is_refused_at_once(sticky) -> None:
    out = sticky / "out.toml"
    os.mkfifo(out, 0o600)
    line = one_line(cli(*_args("snap", out, False)))
    assert "FIFO that nobody is reading" in line, line


# -- a symlink placed by another user --------------------------------------------------------------------------------


def _terminal() -> tuple[int, str]:
    """A fresh pseudo-terminal: (master fd, the slave's /dev/pts path, a character device owned by root)."""
    master, slave = os.openpty()
    name = os.ttyname(slave)
    os.close(slave)
    os.set_blocking(master, False)
    return master, name


def _pending(master: int) -> bytes:
    try:
        return os.read(master, 65536)
    except OSError as err:  # EAGAIN: nothing written; EIO: no slave open and nothing written
        assert err.errno in (errno.EAGAIN, errno.EIO), err
        return b""


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_another_users_symlink_to_a_character_device_is_not_written_through(sticky, command, force) -> None:
    master, tty = _terminal()
    try:
        out = sticky / "out.toml"
        as_nobody(lambda: os.symlink(tty, out))
        line = one_line(cli(*_args(command, out, force)))
        assert "symbolic link owned by uid" in line, line
        assert _pending(master) == b""
        assert os.readlink(out) == tty and os.lstat(out).st_uid == _nobody()[0]
    finally:
        os.close(master)
    no_temp_files(sticky)


def test_another_users_link_in_the_middle_of_a_chain_is_refused(sticky) -> None:
    master, tty = _terminal()
    try:
        theirs = sticky / "theirs"
        as_nobody(lambda: os.symlink(tty, theirs))
        out = sticky / "out.toml"
        os.symlink(theirs, out)
        assert "symbolic link owned by uid" in one_line(cli(*_args("snap", out, True)))
        assert _pending(master) == b""
    finally:
        os.close(master)


def test_our_own_symlink_to_a_terminal_is_written_through(sticky) -> None:
    """The rule is about who placed the link: root's own link to a terminal is still written into."""
    master, tty = _terminal()
    try:
        out = sticky / "out.toml"
        os.symlink(tty, out)
        proc = cli(*_args("export", out, False))
        assert proc.returncode == 0, proc.stderr
        assert b"hoststate_info" in _pending(master)
    finally:
        os.close(master)


# -- --force over another user's file --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_force_over_another_users_file_leaves_a_file_of_ours(sticky, command) -> None:
    out = sticky / "out.toml"

    def place() -> None:
        out.write_bytes(b"theirs\n")
        os.chmod(out, 0o666)

    as_nobody(place)
    theirs = os.open(out, os.O_RDONLY)  # their inode, as they would keep it open
    try:
        proc = cli(*_args(command, out, True), umask=0o077)
        assert proc.returncode == 0, proc.stderr
        st = os.stat(out)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)
        assert st.st_ino != os.fstat(theirs).st_ino
        assert os.pread(theirs, 100, 0) == b"theirs\n"  # their inode never written into
    finally:
        os.close(theirs)
    no_temp_files(sticky)


def test_without_force_another_users_file_is_refused(sticky) -> None:
    out = sticky / "out.toml"
    as_nobody(lambda: out.write_bytes(b"theirs\n"))
    assert "exists; use --force" in one_line(cli(*_args("snap", out, False)))
    assert out.read_bytes() == b"theirs\n" and os.stat(out).st_uid == _nobody()[0]


# -- a directory on the way reached through another user's link -------------------------------------------------------


@pytest.mark.parametrize("below", ["out.toml", "new/out.toml"])
def test_another_users_link_to_a_directory_is_not_written_through(sticky, below) -> None:
    """nobody links ``sticky/results`` to a root-only directory: nothing is created or replaced there, --force or
    not, and no directory is made through the link."""
    target = sticky.parent / "root-only"
    target.mkdir(mode=0o700)
    (target / "out.toml").write_bytes(b"root's own\n")
    as_nobody(lambda: os.symlink(target, sticky / "results"))
    for command in sorted(COMMANDS):
        line = one_line(cli(*_args(command, sticky / "results" / below, True)))
        assert "symbolic link owned by uid" in line, line
    assert sorted(p.name for p in target.iterdir()) == ["out.toml"]
    assert (target / "out.toml").read_bytes() == b"root's own\n"


def test_our_link_to_another_users_link_to_a_directory_is_refused(sticky) -> None:
    target = sticky.parent / "root-only"
    target.mkdir(mode=0o700)
    as_nobody(lambda: os.symlink(target, sticky / "theirs"))
    os.symlink(sticky / "theirs", sticky / "ours")
    line = one_line(cli(*_args("snap", sticky / "ours" / "out.toml", True)))
    assert "symbolic link owned by uid" in line, line
    assert list(target.iterdir()) == []


def test_our_own_link_to_a_directory_is_followed(sticky) -> None:
    target = sticky.parent / "results"
    target.mkdir()
    os.symlink(target, sticky / "ours")
    proc = cli(*_args("snap", sticky / "ours" / "new" / "out.toml", False))
    assert proc.returncode == 0, proc.stderr
    assert (target / "new" / "out.toml").is_file()
