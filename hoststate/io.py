"""The one read layer: every file a collector reads goes through a root prefix, and every failure
becomes a recorded reason instead of an exception.

A captured tree (``--root DIR``) is read exactly like a live host, and nothing here raises on a
host that lacks a file, denies it, or wedges on it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

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


class Reader:
    """Reads under ``root`` and records what it could not read into ``unreadable``.

    Paths are given relative to the root (``"sys/bus/dsa/devices"``); the same relative path is
    the key in ``unreadable``, so a report names the file, not the prefix.
    """

    def __init__(self, root: str = "/", unreadable: dict[str, str] | None = None):
        self.root = root or "/"
        self.unreadable: dict[str, str] = {} if unreadable is None else unreadable

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def note(self, rel: str, reason: str) -> None:
        self.unreadable[rel.lstrip("/")] = reason

    def read_bytes(self, rel: str, *, record: bool = True, max_bytes: int = MAX_BYTES) -> bytes | None:
        """File content, or None with the reason recorded (unless ``record`` is false)."""
        path = self.path(rel)
        try:
            # O_NONBLOCK: a FIFO (a wedged-device stand-in) must not block the open itself.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            if record:
                self.note(rel, reason_of(err))
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if record:
                    self.note(rel, "not a regular file")
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
                    if record:
                        self.note(rel, f"larger than {max_bytes} bytes")
                    return None
            return b"".join(chunks)
        except OSError as err:
            if record:
                self.note(rel, reason_of(err))
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
            if record:
                self.note(rel, f"not an integer: {text[:40]!r}")
            return None

    def listdir(self, rel: str, *, record: bool = True) -> list[str] | None:
        """Sorted directory entries, or None with the reason recorded."""
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError as err:
            if record:
                self.note(rel, reason_of(err))
            return None

    def readlink(self, rel: str, *, record: bool = True) -> str | None:
        try:
            return os.readlink(self.path(rel))
        except OSError as err:
            if record:
                self.note(rel, reason_of(err))
            return None

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(self.path(rel))

    def stat(self, rel: str, *, record: bool = True) -> os.stat_result | None:
        try:
            return os.stat(self.path(rel))
        except OSError as err:
            if record:
                self.note(rel, reason_of(err))
            return None


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


@dataclass(frozen=True)
class Completed:
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
