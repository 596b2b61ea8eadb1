"""Fault injection for the read layer: make chosen paths fail as a kernel would (ENXIO, EACCES, ...).

Tests run as root in CI, where chmod cannot produce EACCES and a tmpfs cannot produce ENXIO or
EOPNOTSUPP, so those errors are injected at os.open/os.read for paths ending in a given suffix, and at
hoststate.io.open_in_root (how every read under a ``--root`` opens its file) for relative paths
ending in it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from unittest import mock

from hoststate import io

#: Pseudo-errno meaning "the file vanished between listing and reading".
VANISH = errno.ENOENT


@contextlib.contextmanager
def inject(faults: dict[str, int], *, on_read: bool = False) -> Iterator[None]:
    """Paths ending with a key fail with that errno, at open (default) or at the first read."""
    real_open, real_read = os.open, os.read
    failing: dict[int, int] = {}

    def match(path: object) -> int | None:
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        for suffix, err in faults.items():
            if text.endswith(suffix):
                return err
        return None

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        err = match(path)
        if err is not None and not on_read:
            raise OSError(err, os.strerror(err), os.fsdecode(path))
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        failing.pop(fd, None)  # a reused descriptor number must not inherit an earlier fault
        if err is not None:
            failing[fd] = err
        return fd

    real_in_root = io.open_in_root

    def fake_in_root(root_fd, rel, flags):
        # An O_PATH open (stat, readlink) needs no permission on the file and never reads it: not a fault site.
        err = None if flags & os.O_PATH else match(rel)
        if err is not None and not on_read:
            raise OSError(err, os.strerror(err), rel)
        fd = real_in_root(root_fd, rel, flags)
        failing.pop(fd, None)
        if err is not None:
            failing[fd] = err
        return fd

    def fake_read(fd, n):
        if fd in failing:
            err = failing.pop(fd)
            raise OSError(err, os.strerror(err))
        return real_read(fd, n)

    with mock.patch.object(os, "open", fake_open), mock.patch.object(os, "read", fake_read), \
            mock.patch.object(io, "open_in_root", fake_in_root):
        yield


@contextlib.contextmanager
def reader_faults(fault: tuple[str, int] | None = None, seen: set[str] | None = None,
                  stall: float = 1.0) -> Iterator[None]:
    """Every open through hoststate.io.Reader, by root-relative path: each path is added to ``seen``, and the
    path ``fault[0]`` fails with errno ``fault[1]`` (a negative errno stalls ``stall`` seconds instead, past a
    collector's deadline). The conformance tests use it to fault every file a collector reads, one at a time."""
    real = io.Reader.open

    def fake(self: io.Reader, rel: str, flags: int) -> int:
        rel = rel.lstrip("/")
        if seen is not None:
            seen.add(rel)
        if fault is not None and rel == fault[0]:
            if fault[1] < 0:
                import time

                time.sleep(stall)
            else:
                raise OSError(fault[1], "injected", rel)
        return real(self, rel, flags)

    with mock.patch.object(io.Reader, "open", fake):
        yield
