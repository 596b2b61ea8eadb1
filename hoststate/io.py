"""The one read layer: every file a collector reads goes through a root prefix, and every failure
becomes a recorded reason instead of an exception.

A captured tree (``--root DIR``) is read exactly like a live host, and nothing here raises on a
host that lacks a file, denies it, or wedges on it.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from typing import Any, NamedTuple

from hoststate.errors import InputError

#: Largest attribute we read whole; sysfs attributes are at most one page, /proc files a few KiB.
MAX_BYTES = 1 << 20


#: Where Linux gives one number two names, the one the kernel source uses (sysfs returns EOPNOTSUPP).
_PREFERRED = {errno.EOPNOTSUPP: "EOPNOTSUPP", errno.EWOULDBLOCK: "EAGAIN", errno.EDEADLOCK: "EDEADLK"}


def reason_of(err: OSError) -> str:
    """An OSError as its errno name (``ENXIO``), the form recorded in ``unreadable``."""
    if err.errno is not None:
        return _PREFERRED.get(err.errno) or errno.errorcode.get(err.errno, f"errno {err.errno}")
    return type(err).__name__


def decode(data: bytes) -> str:
    """Bytes as text; bytes that are not UTF-8 are kept visibly as ``\\xNN`` escapes, never dropped."""
    return data.decode("utf-8", errors="backslashreplace")


#: openat2(2) resolve flags (include/uapi/linux/openat2.h).
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
#: openat2's syscall number: one number on every architecture that has the unified table (x86_64, arm64,
#: riscv, ppc64, s390x); elsewhere the pure-Python resolver is used.
_SYS_OPENAT2 = 437
#: Symlinks followed in one resolution before ELOOP, as the kernel's MAXSYMLINKS.
MAX_LINKS = 40
#: What ``unreadable`` says of a path whose symlinks lead outside the root and whose target the tree lacks.
ESCAPES = "symlink leads outside the root"
#: None until probed; then whether openat2 works here (seccomp filters and old kernels answer ENOSYS/EPERM).
_openat2_usable: bool | None = None


class Escaped(OSError):
    """A path under a root whose resolution tried to leave it and then failed inside it (``ESCAPES``)."""


_syscall: Any = None


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    """The raw openat2 syscall through ctypes (which releases the GIL); raises OSError like os.open."""
    import ctypes

    global _syscall
    if _syscall is None:
        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.syscall
        func.restype = ctypes.c_long
        func.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(OpenHow), ctypes.c_size_t]
        _syscall = (func, OpenHow)
    func, open_how = _syscall
    how = open_how(flags, 0, resolve)
    fd = func(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _has_openat2(root_fd: int) -> bool:
    global _openat2_usable
    if _openat2_usable is None:
        import platform

        if platform.machine() not in ("x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"):
            _openat2_usable = False
        else:
            try:
                os.close(_openat2(root_fd, ".", os.O_PATH | os.O_CLOEXEC, RESOLVE_IN_ROOT))
                _openat2_usable = True
            except OSError:
                _openat2_usable = False
    return _openat2_usable


def open_in_root(root_fd: int, rel: str, flags: int) -> int:
    """Open ``rel`` below the directory ``root_fd`` without ever leaving it; a file descriptor or OSError.

    Resolution is openat2's RESOLVE_IN_ROOT: an absolute symlink is re-anchored at the root and ``..`` stops at
    it, so a crafted tree cannot pull in the host's files (``x -> /etc/shadow`` reads the tree's own
    ``etc/shadow``, if it has one). Magic links (``/proc/PID/fd/N``) are never followed. A resolution that tried
    to leave the root and then failed raises Escaped (reason ``ESCAPES``) instead of a bare ENOENT.
    ``O_NOFOLLOW`` in ``flags`` means the last component is not followed (with O_PATH: the link itself).
    """
    if _has_openat2(root_fd):
        for _ in range(8):  # EAGAIN: a rename or mount raced the resolution; the kernel asks to retry
            try:
                return _openat2(root_fd, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
            except OSError as err:
                if err.errno == errno.EAGAIN:
                    continue
                if err.errno != errno.EXDEV:
                    raise
            try:  # it tried to leave the root: what the same path names inside the root
                return _openat2(root_fd, rel, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
            except OSError as err:
                if err.errno == errno.EAGAIN:
                    continue
                raise Escaped(err.errno, ESCAPES, rel) from err
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)
    return _resolve_in_root(root_fd, rel, flags)


def _resolve_in_root(root_fd: int, rel: str, flags: int) -> int:
    """open_in_root without openat2: walk component by component, each opened O_NOFOLLOW relative to its
    directory's descriptor, symlinks read and spliced in by hand (absolute ones restart at the root)."""
    from collections import deque

    follow_last = not flags & os.O_NOFOLLOW
    parts = deque(rel.split("/"))
    dirs = [os.dup(root_fd)]  # descriptors from the root down to the current directory
    escaped = False
    links = 0
    try:
        while parts:
            name = parts.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if len(dirs) > 1:
                    os.close(dirs.pop())
                else:
                    escaped = True
                continue
            last = not parts
            st = os.stat(name, dir_fd=dirs[-1], follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel)
                target = os.readlink(name, dir_fd=dirs[-1])
                if target.startswith("/"):
                    escaped = True
                    while len(dirs) > 1:
                        os.close(dirs.pop())
                parts.extendleft(reversed(target.split("/")))
                continue
            if last:
                return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs[-1])
            dirs.append(os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs[-1]))
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dirs[-1])
    except OSError as err:
        if escaped:
            raise Escaped(err.errno, ESCAPES, rel) from err
        raise
    finally:
        for fd in dirs:
            os.close(fd)


class Reader:
    """Reads under ``root`` and records what it could not read into ``unreadable``.

    Paths are given relative to the root (``"sys/bus/dsa/devices"``); the same relative path is
    the key in ``unreadable``, so a report names the file, not the prefix. Under a root other than
    ``/`` every path, symlinks included, is resolved inside the root (open_in_root): nothing outside
    a captured tree is ever read, listed or stat'ed through it.
    """

    def __init__(self, root: str = "/", unreadable: dict[str, str] | None = None):
        self.root = root or "/"
        self.unreadable: dict[str, str] = {} if unreadable is None else unreadable

    @property
    def live(self) -> bool:
        return self.root == "/"

    def path(self, rel: str) -> str:
        """The host path of ``rel``, for messages and tests; reads never open it by name under a root."""
        return os.path.join(self.root, rel.lstrip("/"))

    def note(self, rel: str, reason: str) -> None:
        self.unreadable[rel.lstrip("/")] = reason

    def _record(self, rel: str, err: OSError, record: bool) -> None:
        """Record why ``rel`` could not be read. ``record=False`` lets a caller treat a file that is not there
        (ENOENT, ENOTDIR) as an answer; every other failure (EACCES, EIO, a loop ...) is recorded all the same,
        so no probe can take "could not look" for "not there"."""
        if record or (err.errno not in (errno.ENOENT, errno.ENOTDIR) or isinstance(err, Escaped)):
            self.note(rel, ESCAPES if isinstance(err, Escaped) else reason_of(err))

    def open(self, rel: str, flags: int) -> int:
        """A descriptor for ``rel``: by name on the live host, resolved inside the root under a prefix."""
        if self.live:
            return os.open(self.path(rel), flags | os.O_CLOEXEC)
        root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return open_in_root(root_fd, rel.lstrip("/") or ".", flags | os.O_CLOEXEC)
        finally:
            os.close(root_fd)

    def read_bytes(self, rel: str, *, record: bool = True, max_bytes: int = MAX_BYTES) -> bytes | None:
        """File content, or None with the reason recorded (unless ``record`` is false)."""
        try:
            # O_NONBLOCK: a FIFO (a wedged-device stand-in) must not block the open itself.
            fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as err:
            self._record(rel, err, record)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.note(rel, "not a regular file")  # there, but no value: recorded even when probing
                return None
            os.set_blocking(fd, True)
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    self.note(rel, f"larger than {max_bytes} bytes")
                    return None
            return b"".join(chunks)
        except OSError as err:
            self._record(rel, err, record)
            return None
        finally:
            os.close(fd)

    def read(self, rel: str, *, record: bool = True, strip: bool = True) -> str | None:
        """File text (trailing newline stripped), or None with the reason recorded.

        An empty file reads as ``""``, distinct from a failed read (sysfs prints empty lists as
        0 bytes).
        """
        data = self.read_bytes(rel, record=record)
        if data is None:
            return None
        text = decode(data)
        return text.strip() if strip else text

    def read_int(self, rel: str, *, record: bool = True, base: int = 10) -> int | None:
        text = self.read(rel, record=record)
        if text is None:
            return None
        try:
            return int(text, base)
        except ValueError:
            self.note(rel, f"not an integer: {text[:40]!r}")
            return None

    def _open_dir(self, rel: str, record: bool) -> int | None:
        """A descriptor for the directory ``rel``, or None with the reason recorded."""
        try:
            return self.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            self._record(rel, err, record)
            return None

    def scan(self, rel: str, *, record: bool = True) -> list[tuple[str, int]] | None:
        """Sorted (name, mode) of a directory's entries, links not followed; None with the reason recorded."""
        fd = self._open_dir(rel, record)
        if fd is None:
            return None
        try:
            out = []
            for name in sorted(os.listdir(fd)):
                try:
                    out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode))
                except FileNotFoundError:
                    continue  # gone since the listing
            return out
        except OSError as err:
            self._record(rel, err, record)
            return None
        finally:
            os.close(fd)

    def listdir(self, rel: str, *, record: bool = True) -> list[str] | None:
        """Sorted directory entries, or None with the reason recorded."""
        fd = self._open_dir(rel, record)
        if fd is None:
            return None
        try:
            return sorted(os.listdir(fd))
        except OSError as err:
            self._record(rel, err, record)
            return None
        finally:
            os.close(fd)

    def _fstat(self, rel: str, flags: int, record: bool) -> os.stat_result | None:
        try:
            fd = self.open(rel, os.O_PATH | flags)
        except OSError as err:
            self._record(rel, err, record)
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def lstat(self, rel: str, *, record: bool = True) -> os.stat_result | None:
        """stat of ``rel`` itself (a symlink is not followed), or None."""
        return self._fstat(rel, os.O_NOFOLLOW, record)

    def readlink(self, rel: str, *, record: bool = True) -> str | None:
        """A symlink's target text (never followed), or None with the reason recorded."""
        try:
            fd = self.open(rel, os.O_PATH | os.O_NOFOLLOW)
        except OSError as err:
            self._record(rel, err, record)
            return None
        try:
            return os.readlink("", dir_fd=fd)
        except OSError as err:
            self._record(rel, err, record)
            return None
        finally:
            os.close(fd)

    def lexists(self, rel: str) -> bool:
        return self.lstat(rel, record=False) is not None

    def exists(self, rel: str) -> bool:
        return self.stat(rel, record=False) is not None

    def isdir(self, rel: str) -> bool:
        st = self.stat(rel, record=False)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def stat(self, rel: str, *, record: bool = True) -> os.stat_result | None:
        """stat of what ``rel`` resolves to (inside the root), or None with the reason recorded."""
        return self._fstat(rel, 0, record)


#: Caps for files a user names. The largest snapshot a host produces is tens of KiB (an 8-GPU host with
#: every collector: about 60 KiB) and the shipped policy 26 KiB; the caps leave two orders of magnitude
#: above that while keeping a mistaken ``/dev/zero``-sized or multi-GB file from being parsed at all.
SNAPSHOT_MAX_BYTES = 8 << 20
POLICY_MAX_BYTES = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """A file type in words (``a FIFO``), for messages that refuse it."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_input(path: str, *, max_bytes: int, what: str = "file", error: type[InputError] = InputError) -> bytes:
    """The bytes of a file a user named (a snapshot, a policy, a log): a regular file of at most ``max_bytes``.

    Anything else is refused with one line (``error``, an InputError) before a byte is read: the open is
    non-blocking and never takes a controlling terminal, so a FIFO without writer cannot wedge the open, and
    ``/dev/zero``, a directory or a socket are refused by their type instead of being read until memory runs out.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        kind = _kind_of_unopenable(path)
        if kind:  # a socket (ENXIO) or a FIFO (ENXIO for write-only opens): say what it is
            raise error(f"{what} is {kind}, not a regular file", path) from err
        if err.errno == errno.ENOENT:
            raise error(f"{what} not found", path) from err
        raise error(f"cannot read {what}: {err.strerror}", path) from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} is {file_kind(st.st_mode)}, not a regular file", path)
        if st.st_size > max_bytes:
            raise error(f"{what} is larger than {max_bytes} bytes ({st.st_size})", path)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:  # the size may grow after fstat: never read more than the cap
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise error(f"{what} is larger than {max_bytes} bytes", path)
        return b"".join(chunks)
    except OSError as err:
        raise error(f"cannot read {what}: {err.strerror or reason_of(err)}", path) from err
    finally:
        os.close(fd)


def _kind_of_unopenable(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else file_kind(mode)


class Completed(NamedTuple):
    """A finished subprocess, or why it did not finish (``error``: ``ENOENT``, ``timeout``, ...)."""

    returncode: int | None
    stdout: str
    stderr: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def describe(self) -> str:
        """One line for ``reason``: what went wrong, with the tail of stderr."""
        if self.error:
            return self.error
        tail = self.stderr.strip().splitlines()[-1:] or [""]
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit {self.returncode}: {tail[0][:200]}".rstrip(": ")


def which(name: str) -> str | None:
    """The file ``name`` on PATH that this process may execute, found as ``shutil.which`` finds it on POSIX (the
    same folders in order, each once, an empty one meaning the working directory; no PATH: the system's default;
    a name with a folder in it is that file). Not shutil's own: its import (bz2, lzma, zlib, fnmatch) cost 2.9 ms
    of every snap, for this one lookup (tests/test_io_faults.py holds it to shutil.which)."""
    if os.path.dirname(name):  # a name with a folder is that file, not looked up on PATH
        return name if _runnable(name) else None
    path = os.environ.get("PATH")
    if path is None:
        try:
            path = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            path = os.defpath
    if not path:
        return None
    seen: set[str] = set()
    for folder in path.split(os.pathsep):
        if folder in seen:
            continue
        seen.add(folder)
        candidate = os.path.join(folder, name)
        if _runnable(candidate):
            return candidate
    return None


def _runnable(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)


def run(argv: list[str], *, timeout: float = 5.0, env: dict[str, str] | None = None) -> Completed:
    """Run a command under a timeout; never raises. A missing binary is ``ENOENT``."""
    import subprocess  # lazy: most commands never start one

    try:
        proc = subprocess.run(
            argv, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout or b""
        return Completed(None, decode(out), decode(err.stderr or b""), error=f"timeout after {timeout:g}s")
    except OSError as err:
        return Completed(None, "", "", error=reason_of(err))
    return Completed(proc.returncode, decode(proc.stdout), decode(proc.stderr))


def check_timeout(seconds: Any) -> float:
    """``seconds`` when it is a finite number above 0; InputError otherwise (nan or inf would never time out).
    Here, not in hoststate.capture: ``check FILE`` validates its --timeout without loading the collectors."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InputError(f"--timeout {seconds!r}: must be a finite number of seconds greater than 0")
    return float(seconds)
