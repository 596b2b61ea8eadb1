"""The one writer: every file hoststate writes (snap -o, export -o, guard --save-current) goes through write_output.

hoststate runs as root, so an output path must never replace what is not its own:

- a missing name or a regular file (with ``force``) gets a new file, written beside it under a dot-name and renamed
  into place in one step, so a reader sees the old content or the new, never half of it;
- a character device or a FIFO (``/dev/null``, a terminal, a pipe) is written into, never replaced;
- a symlink is never replaced: it is written through only when it leads to a character device or a FIFO
  (``/dev/stdout``), otherwise refused, ``force`` or not;
- a directory, a block device or a socket is refused;
- a file in ``protect`` (the command's inputs: a baseline, a policy, the snapshot being exported) is never written,
  whatever name reaches it (the same file is recognised by device and inode: hard links, symlinks, ``./x``);
- a new file gets ``0666 & ~umask`` (the kernel applies the umask, as for any program), a replaced file keeps its
  permission bits (and its owner and group when running as root);
- SIGINT, SIGTERM and SIGHUP arriving while the temporary file exists abandon the write: the temporary file is
  removed, nothing is renamed, and the signal then takes its usual effect.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
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


def check_output(path: str, *, force: bool = False, protect: Iterable[str] = (), what: str = "an input") -> str:
    """How ``path`` would be written (NEW, REPLACE or INTO), or WriteError saying why it must not be.

    Commands call it before doing their work, so a refusal comes before a snapshot is taken; write_output
    checks again at write time.
    """
    protect = tuple(protect)
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return NEW
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    try:
        st = os.stat(path) if stat.S_ISLNK(lst.st_mode) else lst
    except OSError:
        st = None  # a dangling link or a loop
    if st is not None:
        same = _same_file(st, protect)
        if same is not None:
            raise WriteError(f"{path}: is {what} of this command ({same}); it is never written")
    if stat.S_ISLNK(lst.st_mode):
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            return INTO
        target = "a missing file" if st is None else file_kind(st.st_mode)
        if st is not None and stat.S_ISREG(st.st_mode):
            target = "a regular file"
        raise WriteError(f"{path}: is a symbolic link (to {target}); refusing to replace or follow it, "
                         "name the file itself")
    if stat.S_ISCHR(lst.st_mode) or stat.S_ISFIFO(lst.st_mode):
        return INTO
    if not stat.S_ISREG(lst.st_mode):
        raise WriteError(f"{path}: is {file_kind(lst.st_mode)}; refusing to write it")
    if not force:
        raise WriteError(f"{path}: exists; use --force to replace it")
    return REPLACE


def write_output(path: str, text: str | bytes, *, force: bool = False, protect: Iterable[str] = (),
                 what: str = "an input") -> None:
    """Write ``text`` to ``path`` under the rules above; WriteError (one line) when it must not or could not."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    protect = tuple(protect)
    how = check_output(path, force=force, protect=protect, what=what)
    if how == INTO:
        _write_into(path, data, protect, what)
    else:
        _write_beside(path, data, force=force, protect=protect, what=what)


def _write_into(path: str, data: bytes, protect: tuple[str, ...], what: str) -> None:
    """Write into a character device or FIFO; no O_CREAT and no O_TRUNC, so whatever the name has become since
    the check is never created or truncated, and anything but a device or FIFO is refused before a byte is written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)) or _same_file(st, protect):
            raise WriteError(f"{path}: changed while being written; nothing written")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    finally:
        os.close(fd)


def _write_beside(path: str, data: bytes, *, force: bool, protect: tuple[str, ...], what: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    except OSError as err:
        raise WriteError(f"{path}: cannot write: {err.strerror}") from err
    with _abandon_on_signals() as abandoned:
        fd, tmp = _create_temp(directory, path)
        try:
            try:
                if old is not None and stat.S_ISREG(old.st_mode):
                    if os.geteuid() == 0:
                        os.fchown(fd, old.st_uid, old.st_gid)
                    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if abandoned:
                return
            # Checked again just before the name changes: the target may have changed since check_output.
            check_output(path, force=force, protect=protect, what=what)
            if force:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)  # fails if the name exists: two concurrent writers cannot both win
                except FileExistsError as err:
                    raise WriteError(f"{path}: exists; use --force to replace it") from err
            _fsync_dir(directory)
        except OSError as err:
            raise WriteError(f"{path}: cannot write: {err.strerror}") from err
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    if abandoned:  # the signal's own effect (exit, KeyboardInterrupt) did not end the program
        raise WriteError(f"{path}: interrupted by signal {abandoned.signum}; nothing written")


def _create_temp(directory: str, path: str) -> tuple[int, str]:
    """A new file beside the target, mode 0666 for the kernel to reduce by the umask (mkstemp would force 0600)."""
    for _ in range(100):
        tmp = os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(6)}{TEMP_SUFFIX}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as err:
            raise WriteError(f"{path}: cannot write in {directory}: {err.strerror}") from err
    raise WriteError(f"{path}: cannot write in {directory}: {os.strerror(errno.EEXIST)}")


def _fsync_dir(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
