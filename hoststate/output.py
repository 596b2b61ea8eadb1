"""The one writer: every file hoststate writes (snap -o, export -o, guard --save-current) goes through write_output.

hoststate runs as root, often with its output in a directory other users can write (``/tmp``), so an output path
must never replace what is not its own and never write into what someone else placed there:

- a missing name or a regular file (with ``force``) gets a new file, created by us beside it under a dot-name and
  renamed into place in one step (in the directory opened once, so a swapped parent cannot redirect it): a reader
  sees the old content or the new, never half of it, and another user's file is replaced, never written into;
- the new file is ours (our owner, ``0666 & ~umask``); only when the replaced file was our own are its permission
  bits (and, as root, its group) kept, so replacing another user's file never hands them root's output;
- a character device or a FIFO (``/dev/null``, a terminal, a pipe) is written into, never replaced; a FIFO only
  when it belongs to us or to root or is one of our own open files (``/dev/stdout``); it is opened without blocking
  (a FIFO without a reader is refused at once, nothing hangs), without following a link it was not reached
  through, and checked after opening to be the file that was checked;
- a symlink is never replaced: it is followed only when every link on the way belongs to us or to root and it
  leads to such a device or FIFO (``/dev/stdout``), otherwise refused, ``force`` or not; a directory on the way
  reached through another user's symlink is refused too (check_parent);
- a directory, a block device or a socket is refused;
- a file in ``protect`` (the command's inputs: a baseline, a policy, the snapshot being exported) is never written,
  whatever name reaches it (the same file is recognised by device and inode: hard links, symlinks, ``./x``);
- SIGINT, SIGTERM and SIGHUP arriving while the temporary file exists abandon the write: the temporary file is
  removed, nothing is renamed, and the signal then takes its usual effect.

Every refusal is a WriteError of one line (exit 2 from the command line).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import threading
from collections.abc import Iterable, Iterator

from hoststate.errors import WriteError
from hoststate.io import file_kind

#: Signals that abandon a write in progress (delivered again once the temporary file is gone).
ABANDON_ON = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
#: The temporary file's name: hidden (fleet, NFD and node_exporter's *.prom glob skip it) and recognisable.
TEMP_PREFIX = ".hoststate-"
TEMP_SUFFIX = ".tmp"

# What an existing target is, for check_output's answer.
NEW, REPLACE, INTO = "new", "replace", "into"


def _same_file(st: os.stat_result, protect: Iterable[str]) -> str | None:
    """The protected path that is the same file as ``st`` (device and inode), or None."""
    for name in protect:
        try:
            other = os.stat(name)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return name
    return None


def _ours(st: os.stat_result) -> bool:
    """Whether a file belongs to us or to root: only then may we follow it (a symlink) or write into it (a FIFO).
    Anyone can make a FIFO or a symlink in a world-writable directory; a device node only root can make, so a
    device is trusted by the name that leads to it, not by its owner (a user's own terminal)."""
    return st.st_uid in (os.geteuid(), 0)


def _owner(st: os.stat_result) -> str:
    return f"owned by uid {st.st_uid}, not by this user or root"


def _own_fd(path: str) -> bool:
    """Whether ``path`` names one of this process's open files (``/proc/self/fd/1``, ``/dev/fd/1``): already ours
    to write, whoever made the pipe or owns the terminal (``sudo hoststate ... -o /dev/stdout | less``)."""
    try:
        return os.path.realpath(os.path.dirname(path)) == f"/proc/{os.getpid()}/fd"
    except OSError:
        return False


def _follow(path: str) -> tuple[os.stat_result | None, bool]:
    """Along ``path``'s chain of final-component links: (the first link that belongs to another user or None,
    whether the chain reaches one of our own open files)."""
    current = path
    for _ in range(40):  # the kernel's own limit on links followed
        if _own_fd(current):
            return None, True
        try:
            lst = os.lstat(current)
        except OSError:
            return None, False
        if not stat.S_ISLNK(lst.st_mode):
            return None, False
        if not _ours(lst):
            return lst, False
        try:
            current = os.path.join(os.path.dirname(current), os.readlink(current))
        except OSError:
            return None, False
    return None, False


def check_parent(path: str) -> None:
    """WriteError when a directory on the way to ``path`` is reached through a symlink of another user (``/tmp/x``
    made a link to ``/etc``): checked before any directory is created or written in. Components that do not exist
    yet are left to the caller to create."""
    from hoststate.filetrust import links_on_the_way

    for here, lst, _folder in links_on_the_way(os.path.dirname(os.path.abspath(path))):
        if not _ours(lst):
            raise WriteError(f"{path}: {here} is a symbolic link {_owner(lst)}; refusing to write through it")


def _inspect(path: str, *, force: bool, protect: tuple[str, ...], what: str) -> tuple[str, os.stat_result | None]:
    """(how, the file written into for INTO) or WriteError saying why ``path`` must not be written."""
    check_parent(path)
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return NEW, None
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    link = stat.S_ISLNK(lst.st_mode)
    try:
        st = os.stat(path) if link else lst
    except OSError:
        st = None  # a dangling link or a loop
    if st is not None:
        same = _same_file(st, protect)
        if same is not None:
            raise WriteError(f"{path}: is {what} of this command ({same}); it is never written")
    if link:
        foreign, own_fd = _follow(path)
        if foreign is not None:
            raise WriteError(f"{path}: is a symbolic link {_owner(foreign)}; refusing to follow or replace it")
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            if not (own_fd or stat.S_ISCHR(st.st_mode) or _ours(st)):
                raise WriteError(f"{path}: leads to {file_kind(st.st_mode)} {_owner(st)}; refusing to write into it")
            return INTO, st
        target = "a missing file" if st is None else file_kind(st.st_mode)
        if st is not None and stat.S_ISREG(st.st_mode):
            target = "a regular file"
        raise WriteError(f"{path}: is a symbolic link (to {target}); refusing to replace or follow it, "
                         "name the file itself")
    if stat.S_ISCHR(lst.st_mode) or stat.S_ISFIFO(lst.st_mode):
        if stat.S_ISFIFO(lst.st_mode) and not (_own_fd(path) or _ours(lst)):
            raise WriteError(f"{path}: is {file_kind(lst.st_mode)} {_owner(lst)}; refusing to write into it")
        return INTO, lst
    if not stat.S_ISREG(lst.st_mode):
        raise WriteError(f"{path}: is {file_kind(lst.st_mode)}; refusing to write it")
    if not force:
        raise WriteError(f"{path}: exists; use --force to replace it")
    return REPLACE, None


def check_output(path: str, *, force: bool = False, protect: Iterable[str] = (), what: str = "an input") -> str:
    """How ``path`` would be written (NEW, REPLACE or INTO), or WriteError saying why it must not be.

    Commands call it before doing their work, so a refusal comes before a snapshot is taken; write_output
    checks again at write time.
    """
    return _inspect(path, force=force, protect=tuple(protect), what=what)[0]


def write_output(path: str, text: str | bytes, *, force: bool = False, protect: Iterable[str] = (),
                 what: str = "an input") -> None:
    """Write ``text`` to ``path`` under the rules above; WriteError (one line) when it must not or could not."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    protect = tuple(protect)
    how, target = _inspect(path, force=force, protect=protect, what=what)
    if how == INTO and target is not None:
        _write_into(path, data, target, protect)
    else:
        _write_beside(path, data, force=force, protect=protect, what=what)


def _write_into(path: str, data: bytes, target: os.stat_result, protect: tuple[str, ...]) -> None:
    """Write into the character device or FIFO ``target``: opened without O_CREAT or O_TRUNC and without blocking
    (a FIFO nobody reads is ENXIO, not a hang); a name that is no longer a link is not followed; what was opened must
    be the very file checked (device and inode), else nothing is written."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            flags |= os.O_NOFOLLOW
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ENXIO and stat.S_ISFIFO(target.st_mode):
            raise WriteError(f"{path}: is a FIFO that nobody is reading; nothing written") from err
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (target.st_dev, target.st_ino) or _same_file(st, protect):
            raise WriteError(f"{path}: changed while being written; nothing written")
        os.set_blocking(fd, True)  # a reader that is slower than us is waited for, as on stdout
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    finally:
        os.close(fd)


def _keep_mode(fd: int, old: os.stat_result | None) -> None:
    """Our own replaced file's permission bits (and group, as root) on the new file; another user's are not
    taken: their owner and a mode they chose (0666) would hand them the output."""
    if old is None or not stat.S_ISREG(old.st_mode) or old.st_uid != os.geteuid():
        return
    if os.geteuid() == 0:
        os.fchown(fd, -1, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)


def _write_beside(path: str, data: bytes, *, force: bool, protect: tuple[str, ...], what: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise WriteError(f"{path}: cannot write in {directory}: {err.strerror}") from err
    try:
        _write_beside_at(dfd, name, path, data, force=force, protect=protect, what=what)
    finally:
        os.close(dfd)


def _write_beside_at(dfd: int, name: str, path: str, data: bytes, *, force: bool, protect: tuple[str, ...],
                     what: str) -> None:
    """The new file is created, renamed and removed relative to the directory opened once (``dfd``)."""
    try:
        old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    with _abandon_on_signals() as abandoned:
        fd, tmp = _create_temp(dfd, path)
        try:
            try:
                _keep_mode(fd, old)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if abandoned:
                return
            # Checked again just before the name changes: the target may have changed since check_output.
            _inspect(path, force=force, protect=protect, what=what)
            _recheck(dfd, name, path, force)
            if force:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                try:
                    # fails if the name exists: two concurrent writers cannot both win
                    os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError as err:
                    raise WriteError(f"{path}: exists; use --force to replace it") from err
            _fsync_dir(dfd)
        except OSError as err:
            raise WriteError(f"{path}: cannot write: {err.strerror}") from err
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
    if abandoned:  # the signal's own effect (exit, KeyboardInterrupt) did not end the program
        raise WriteError(f"{path}: interrupted by signal {abandoned.signum}; nothing written")


def _recheck(dfd: int, name: str, path: str, force: bool) -> None:
    """In the opened directory, the name is still missing or (with ``force``) a regular file: anything placed there
    since the check (a FIFO, a link) is refused rather than replaced."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise WriteError(f"{path}: changed while being written (now {file_kind(st.st_mode)}); nothing written")
    if not force:
        raise WriteError(f"{path}: exists; use --force to replace it")


def _create_temp(dfd: int, path: str) -> tuple[int, str]:
    """A new file beside the target, mode 0666 for the kernel to reduce by the umask (mkstemp would force 0600);
    O_EXCL and O_NOFOLLOW: never a name someone else placed. The name's random part is os.urandom's, which is what
    ``secrets.token_hex`` returns, without that module's import (random, hmac: 2 ms of each snap)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f"{TEMP_PREFIX}{os.urandom(6).hex()}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, flags, 0o666, dir_fd=dfd), tmp
        except FileExistsError:
            continue
        except OSError as err:
            raise WriteError(f"{path}: cannot write in {os.path.dirname(os.path.abspath(path))}: "
                             f"{err.strerror}") from err
    raise WriteError(f"{path}: cannot write in {os.path.dirname(os.path.abspath(path))}: {os.strerror(errno.EEXIST)}")


def _fsync_dir(dfd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(dfd)


class _Abandoned:
    """Truthy once one of ABANDON_ON arrived; remembers which, to deliver it again."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def _abandon_on_signals() -> Iterator[_Abandoned]:
    """While the temporary file exists, SIGINT/SIGTERM/SIGHUP only mark the write abandoned; once the temporary
    file is gone the previous handlers are back and the signal is raised again, to take its usual effect."""
    abandoned = _Abandoned()
    saved: dict[int, object] = {}

    def note(signum: int, _frame: object) -> None:
        if abandoned.signum is None:
            abandoned.signum = signum

    if threading.current_thread() is threading.main_thread():
        for signum in ABANDON_ON:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue  # ignored stays ignored; None: a handler not set from Python, left alone
            saved[signum] = previous
            signal.signal(signum, note)
    try:
        yield abandoned
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        if abandoned.signum is not None:
            signal.raise_signal(abandoned.signum)
