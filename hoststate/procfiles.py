"""Reading files on behalf of another process, as that process could, never with root's rights.

hoststate runs as root on shared hosts, and a discovered server belongs to someone else: its argv
and environment name files (``--config FILE``, ``PYTHONPATH``, its interpreter's site-packages)
that its owner chose. A file named by a process is read here only when

- it resolves inside the process's own root (``/proc/PID/root``), relative paths from its working
  directory (``/proc/PID/cwd``); symlinks are followed component by component and can never leave
  that root (``..`` at the root stays there, as openat2's RESOLVE_IN_ROOT does);
- every directory on the way is searchable and the file readable by the process's file-system
  uid/gid and groups (``/proc/PID/status``), judged from the mode bits; a file with a POSIX ACL is
  refused because its bits do not tell the whole answer;
- it is a regular file on an ordinary file system (never a FIFO, device, socket, or a procfs/sysfs
  entry), no larger than a cap.

Anything else is an answer with a reason (``unreadable``), never an exception. Nothing here ever
executes a file.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from dataclasses import dataclass

from hoststate.io import Reader, decode, reason_of

#: Largest file read for another process (a ``--config`` YAML, a METADATA file, a pyvenv.cfg).
MAX_FILE_BYTES = 1 << 20
#: Largest argv or environment block read from /proc (Linux caps one at a few MiB).
MAX_BLOCK_BYTES = 8 << 20
#: Symlinks followed while resolving one path, as the kernel's limit.
MAX_LINKS = 40
#: File systems whose "regular files" are kernel interfaces, not files a user wrote.
PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2", "configfs",
    "efivarfs", "bpf", "fusectl", "pstore", "hugetlbfs", "mqueue", "binfmt_misc", "autofs", "rpc_pipefs",
    "nsfs", "selinuxfs", "rootfs",
})
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_ACL_XATTR = "system.posix_acl_access"
_READ, _SEARCH = 4, 1


# --------------------------------------------------------------------------------------------
# argv and environment


def decode_block(data: bytes) -> tuple[list[str], bool]:
    """A NUL-separated /proc block as strings, and whether any byte was not UTF-8 (kept as ``\\xNN``)."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    texts = [decode(p) for p in parts]
    lossy = any(t.encode("utf-8", "surrogatepass") != p for t, p in zip(texts, parts, strict=True))
    return texts, lossy


def cmdline(pid: int, unreadable: dict[str, str]) -> tuple[list[str] | None, bool]:
    """(argv, lossy) of a process, through the read layer; None with the reason recorded."""
    data = Reader("/", unreadable).read_bytes(f"proc/{pid}/cmdline", max_bytes=MAX_BLOCK_BYTES)
    if data is None:
        return None, False
    return decode_block(data)


def environ(pid: int, unreadable: dict[str, str]) -> tuple[dict[str, str] | None, bool]:
    """(environment, lossy) of a process; None with the reason recorded (EACCES for another user's)."""
    data = Reader("/", unreadable).read_bytes(f"proc/{pid}/environ", max_bytes=MAX_BLOCK_BYTES)
    if data is None:
        return None, False
    items, lossy = decode_block(data)
    env: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if eq and name:
            env[name] = value
    return env, lossy


def gone(pid: int, proc: str = "/proc") -> bool:
    """True when the process has exited (no /proc entry, or a zombie that is not yet reaped)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            state = fh.read(4096).rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


# --------------------------------------------------------------------------------------------
# Credentials


@dataclass(frozen=True)
class Creds:
    """The file-system identity the kernel checks a process's opens against."""

    uid: int
    gid: int
    groups: frozenset[int]

    def may(self, st: os.stat_result, want: int) -> bool:
        """Whether the mode bits grant ``want`` (4 read, 1 search) to this identity (root: always)."""
        if self.uid == 0:
            return True
        if st.st_uid == self.uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == self.gid or st.st_gid in self.groups:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        return bits & want == want


def parse_status(text: str) -> Creds | None:
    """Creds from /proc/PID/status (the fourth Uid/Gid field is the file-system id)."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = value.split()
    try:
        uid, gid = int(fields["Uid"][3]), int(fields["Gid"][3])
        groups = frozenset(int(g) for g in fields.get("Groups", []))
    except (KeyError, IndexError, ValueError):
        return None
    return Creds(uid, gid, groups)


# --------------------------------------------------------------------------------------------
# A process's view of the file system


class ProcView:
    """The file system as process ``pid`` sees it, read with its rights. Use as a context manager.

    ``error`` is set (and every read answers it) when the process's root, credentials or working
    directory cannot be established.
    """

    def __init__(self, pid: int, proc: str = "/proc"):
        self.pid = pid
        self.error: str | None = None
        self.creds: Creds | None = None
        self._root: int | None = None
        self._cwd: list[str] | None = None
        self._cwd_error: str | None = None
        self._pseudo_devs: set[int] | None = None
        base = f"{proc}/{pid}"
        reader = Reader("/", {})
        status = reader.read(f"{base}/status")
        self.creds = parse_status(status) if status is not None else None
        if self.creds is None:
            self.error = f"credentials of process {pid}: {next(iter(reader.unreadable.values()), 'unparsable')}"
            return
        try:
            self._root = os.open(f"{base}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            self.error = f"root of process {pid}: {reason_of(err)}"
            return
        self._cwd, self._cwd_error = self._locate_cwd(base)
        self._pseudo_devs = self._pseudo_devices(reader.read(f"{base}/mountinfo"))

    def __enter__(self) -> ProcView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._root is not None:
            os.close(self._root)
            self._root = None

    # ---- set-up

    def _locate_cwd(self, base: str) -> tuple[list[str] | None, str | None]:
        """The working directory as components inside the root, checked to be the same directory."""
        try:
            root_text, cwd_text = os.readlink(f"{base}/root"), os.readlink(f"{base}/cwd")
            want = os.stat(f"{base}/cwd")
        except OSError as err:
            return None, f"working directory: {reason_of(err)}"
        prefix = root_text.rstrip("/")
        if prefix and not (cwd_text == prefix or cwd_text.startswith(prefix + "/")):
            return None, "working directory is outside the process's root view"
        parts = [p for p in cwd_text[len(prefix):].split("/") if p]
        fd, _, err = self._walk("/" + "/".join(parts), [])
        if fd is None:
            return None, f"working directory: {err}"
        try:
            got = os.fstat(fd)
        finally:
            os.close(fd)
        if (got.st_dev, got.st_ino) != (want.st_dev, want.st_ino):
            return None, "working directory could not be located inside the process's root"
        return parts, None

    @staticmethod
    def _pseudo_devices(mountinfo: str | None) -> set[int] | None:
        """Device numbers of the process's pseudo file systems (None when mountinfo is unreadable)."""
        if mountinfo is None:
            return None
        devs: set[int] = set()
        for line in mountinfo.splitlines():
            left, sep, right = line.partition(" - ")
            fields = left.split()
            if not sep or len(fields) < 3 or not right.split():
                continue
            if right.split()[0] in PSEUDO_FS:
                major, _, minor = fields[2].partition(":")
                if major.isdigit() and minor.isdigit():
                    devs.add(os.makedev(int(major), int(minor)))
        return devs

    # ---- resolution

    def _walk(self, path: str, start: list[str] | None = None) -> tuple[int | None, list[str], str | None]:
        """(O_PATH fd, components inside the root, None) of ``path``, or (None, [], reason).

        Components are opened one at a time relative to their directory with O_NOFOLLOW; a symlink's
        target is spliced in (an absolute one restarts at the process's root), ``..`` pops a level
        and never above the root. Every directory passed through must be searchable by the process.
        """
        if self._root is None or self.creds is None:
            return None, [], self.error or "closed"
        if not path:
            return None, [], "empty path"
        if "\0" in path:
            return None, [], "path holds a NUL byte"
        if start is None and not path.startswith("/"):
            if self._cwd is None:
                return None, [], self._cwd_error or "working directory unknown"
            start = self._cwd
        todo: deque[str] = deque((start or []) if not path.startswith("/") else [])
        todo.extend(path.split("/"))
        stack: list[int] = [os.dup(self._root)]
        names: list[str] = []
        links = 0
        try:
            while todo:
                part = todo.popleft()
                if part in ("", "."):
                    continue
                if part == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                        names.pop()
                    continue
                here = os.fstat(stack[-1])
                if not stat.S_ISDIR(here.st_mode):
                    return None, [], f"{'/' + '/'.join(names)}: ENOTDIR"
                if not self.creds.may(here, _SEARCH):
                    return None, [], f"{'/' + '/'.join(names)}: not searchable by the process's user"
                try:
                    fd = os.open(part, _PATH_FLAGS, dir_fd=stack[-1])
                except OSError as err:
                    return None, [], f"{'/' + '/'.join([*names, part])}: {reason_of(err)}"
                if stat.S_ISLNK(os.fstat(fd).st_mode):
                    os.close(fd)
                    links += 1
                    if links > MAX_LINKS:
                        return None, [], "too many symbolic links (ELOOP)"
                    try:
                        target = os.readlink(part, dir_fd=stack[-1])
                    except OSError as err:
                        return None, [], f"{'/' + '/'.join([*names, part])}: {reason_of(err)}"
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                        names.clear()
                    todo.extendleft(reversed(target.split("/")))
                    continue
                stack.append(fd)
                names.append(part)
            result = stack.pop()
            return result, names, None
        finally:
            for fd in stack:
                os.close(fd)

    def locate(self, path: str) -> tuple[str | None, str | None]:
        """The absolute path inside the process's root that ``path`` names (symlinks resolved)."""
        fd, names, err = self._walk(path)
        if fd is None:
            return None, err
        os.close(fd)
        return "/" + "/".join(names), None

    def _judge(self, fd: int, want_dir: bool) -> tuple[os.stat_result | None, str | None]:
        """The file's stat when the process may read it as the kind asked for, else the reason."""
        st = os.fstat(fd)
        if want_dir and not stat.S_ISDIR(st.st_mode):
            return None, "not a directory"
        if not want_dir and not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if self._pseudo_devs is not None and st.st_dev in self._pseudo_devs:
            return None, "a kernel pseudo-file, not a regular file"
        assert self.creds is not None
        if not self.creds.may(st, _READ | (_SEARCH if want_dir else 0)):
            return None, f"not readable by the process's user (uid {self.creds.uid})"
        if self.creds.uid != 0 and _has_acl(fd):
            return None, "has a POSIX ACL (access not judged from mode bits)"
        return st, None

    # ---- reads

    def read(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
        """(content, None) of a regular file the process could read, or (None, reason)."""
        fd, _, err = self._walk(path)
        if fd is None:
            return None, err
        try:
            st, err = self._judge(fd, want_dir=False)
            if st is None:
                return None, err
            if st.st_size > max_bytes:
                return None, f"larger than {max_bytes} bytes"
            try:
                real = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError as err2:
                return None, reason_of(err2)
        finally:
            os.close(fd)
        try:
            again = os.fstat(real)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(again.st_mode):
                return None, "changed while being opened"
            chunks, total = [], 0
            while total <= max_bytes:
                chunk = os.read(real, min(65536, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > max_bytes:
                return None, f"larger than {max_bytes} bytes"
            return b"".join(chunks), None
        except OSError as err2:
            return None, reason_of(err2)
        finally:
            os.close(real)

    def read_text(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[str | None, str | None]:
        data, err = self.read(path, max_bytes)
        return (decode(data), None) if data is not None else (None, err)

    def listdir(self, path: str) -> tuple[list[str] | None, str | None]:
        """Sorted entries of a directory the process could list, or (None, reason)."""
        fd, _, err = self._walk(path)
        if fd is None:
            return None, err
        try:
            st, err = self._judge(fd, want_dir=True)
            if st is None:
                return None, err
            try:
                real = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as err2:
                return None, reason_of(err2)
        finally:
            os.close(fd)
        try:
            return sorted(os.listdir(real)), None
        except OSError as err2:
            return None, reason_of(err2)
        finally:
            os.close(real)

    def kind(self, path: str) -> str | None:
        """"dir", "file", "other", or None when the path does not resolve for the process."""
        fd, _, _err = self._walk(path)
        if fd is None:
            return None
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def executable(self) -> tuple[str | None, str | None]:
        """/proc/PID/exe as a path inside the process's root (its real file, symlinks resolved)."""
        base = f"/proc/{self.pid}"
        try:
            exe, root = os.readlink(f"{base}/exe"), os.readlink(f"{base}/root")
        except OSError as err:
            return None, reason_of(err)
        prefix = root.rstrip("/")
        if prefix and not exe.startswith(prefix + "/"):
            return None, "executable is outside the process's root view"
        return exe[len(prefix):], None


def _has_acl(fd: int) -> bool:
    try:
        os.getxattr(f"/proc/self/fd/{fd}", _ACL_XATTR)
    except OSError:
        return False
    return True
