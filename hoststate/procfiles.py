"""Reading files on behalf of another process, as that process could, never with root's rights.

hoststate runs as root on shared hosts, and a discovered server belongs to someone else: its argv
and environment name files (``--config FILE``, ``PYTHONPATH``, its interpreter's site-packages)
that its owner chose. A file named by a process is read here only when

- it resolves inside the process's own root (``/proc/PID/root``), relative paths from its working
  directory (``/proc/PID/cwd``); symlinks are followed component by component and can never leave
  that root (``..`` at the root stays there, as openat2's RESOLVE_IN_ROOT does);
- a reader process holding the process's identity (its uid, gid and groups from /proc/PID/status;
  hoststate.userread) could open it: the kernel checks every directory searched and the file
  opened, so mode bits, POSIX ACLs and LSMs all apply. A process that changed identity (real and
  effective ids differ) holds several; a file is read only when every one of them, root's left out,
  could read it (``identities``);
- it is a regular file on an ordinary file system (never a FIFO, device, socket, or a procfs/sysfs
  entry), no larger than a cap.

One reader runs per identity, started on first use and reused for every file; each request has a
deadline, and a reader that stops answering is killed and its identity refused for a while.
Anything else is an answer with a reason (``unreadable``), never an exception. Nothing here ever
executes a file of the process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from hoststate.io import Reader, decode, reason_of

if TYPE_CHECKING:
    import socket

#: Largest file read for another process (a ``--config`` YAML, a METADATA file, a pyvenv.cfg).
MAX_FILE_BYTES = 1 << 20
#: Largest argv or environment block read from /proc (Linux caps one at a few MiB).
MAX_BLOCK_BYTES = 8 << 20
#: Longest path (with the working directory it starts from) sent to a reader, as the kernel's PATH_MAX.
MAX_PATH = 4096
#: Largest reply a reader may send (a file is capped at MAX_FILE_BYTES, a listing at userread.MAX_ENTRIES).
MAX_REPLY = 16 << 20
#: Seconds a reader may take to start (an interpreter with -I -S on a loaded host), and to answer one request.
START_TIMEOUT = 10.0
CALL_TIMEOUT = 5.0
#: Seconds an identity whose reader failed is answered with that failure at once, instead of waiting again.
BROKEN_SECS = 30.0
#: Reader processes kept at once (one per identity).
MAX_READERS = 16
#: File systems whose "regular files" are kernel interfaces, not files a user wrote.
PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2", "configfs",
    "efivarfs", "bpf", "fusectl", "pstore", "hugetlbfs", "mqueue", "binfmt_misc", "autofs", "rpc_pipefs",
    "nsfs", "selinuxfs", "rootfs",
})


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
# Identities


class Creds(NamedTuple):
    """One identity a process holds: the uid and gid its reads are checked against, and its groups."""

    uid: int
    gid: int
    groups: tuple[int, ...]


def identities(text: str) -> list[Creds] | None:
    """The identities whose rights another process's files are read with, from /proc/PID/status.

    A process holds four uid/gid pairs (real, effective, saved, file-system). One that changed
    identity (a setuid program, ``su`` at its password prompt: real uid the user, effective 0) may
    use any of them, so a file is read only when every pair could read it; root's pairs are left out
    when any other is present, because what root may read is no limit. A process that is root in all
    four is read as root.
    """
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = value.split()
    try:
        uids, gids = [int(u) for u in fields["Uid"][:4]], [int(g) for g in fields["Gid"][:4]]
        groups = tuple(sorted({int(g) for g in fields.get("Groups", [])}))
    except (KeyError, ValueError):
        return None
    if len(uids) != 4 or len(gids) != 4:
        return None
    pairs = sorted(set(zip(uids, gids, strict=True)))
    chosen = [p for p in pairs if p[0] != 0] or pairs[:1]  # root in all four: one reader, root's rights
    return [Creds(uid, gid, groups) for uid, gid in chosen]


# --------------------------------------------------------------------------------------------
# Readers: one process per identity, holding that identity


class _Reader:
    """A hoststate.userread process holding one identity; requests are answered one at a time."""

    def __init__(self, ident: Creds):
        self.ident = ident
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.broken: str | None = None
        self.broken_until = 0.0

    def _start(self) -> None:
        import socket  # here: a snap that reads no other user's file starts no reader and needs no socket

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        groups = ",".join(str(g) for g in self.ident.groups)
        argv = [sys.executable, "-I", "-S", "-c", _reader_source(), str(self.ident.uid), str(self.ident.gid), groups,
                str(child.fileno())]
        try:
            self.proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={}, cwd="/")
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        head, _ = self._receive(time.monotonic() + START_TIMEOUT)
        if not head.get("ok"):
            raise _Refused(str(head.get("reason", "the reader did not start")))

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            self.proc = None

    def _receive(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        sizes = self._exact(8, deadline)
        head_size, payload_size = struct.unpack("!II", sizes)
        if head_size > MAX_REPLY or payload_size > MAX_REPLY:
            raise ValueError("reply too large")
        head = json.loads(self._exact(head_size, deadline))
        return (head if isinstance(head, dict) else {}), self._exact(payload_size, deadline)

    def _exact(self, size: int, deadline: float) -> bytes:
        assert self.sock is not None
        buf = bytearray()
        while len(buf) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(min(size - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _exchange(self, request: dict[str, Any], root: int) -> tuple[dict[str, Any], bytes]:
        assert self.sock is not None
        body = json.dumps(request).encode("utf-8", "surrogatepass")
        frame = struct.pack("!I", len(body)) + body
        self.sock.settimeout(CALL_TIMEOUT)
        import socket  # loaded by _start already

        sent = socket.send_fds(self.sock, [frame], [root])
        if sent < len(frame):
            self.sock.sendall(frame[sent:])
        return self._receive(time.monotonic() + CALL_TIMEOUT)

    def call(self, request: dict[str, Any], root: int) -> tuple[dict[str, Any], bytes]:
        """The reader's answer; a reader that cannot start or stops answering is an answer too, never a raise."""
        who = f"reader for uid {self.ident.uid}"
        if not self.lock.acquire(timeout=2 * CALL_TIMEOUT):
            return {"ok": False, "reason": f"{who}: busy"}, b""
        try:
            if self.broken is not None and time.monotonic() < self.broken_until:
                return {"ok": False, "reason": self.broken}, b""
            for attempt in (1, 2):
                try:
                    if self.proc is None or self.proc.poll() is not None:
                        self.stop()
                        self._start()
                    return self._exchange(request, root)
                except (EOFError, BrokenPipeError, ConnectionResetError) as err:
                    self.stop()  # it left when idle, or died: one fresh start
                    if attempt == 2:
                        return self._fail(f"{who}: {type(err).__name__}")
                except _Refused as err:
                    return self._fail(str(err))
                except (OSError, ValueError, TimeoutError, subprocess.SubprocessError) as err:
                    reason = "timeout" if isinstance(err, TimeoutError) else (
                        reason_of(err) if isinstance(err, OSError) else type(err).__name__)
                    return self._fail(f"{who}: {reason}")
            return self._fail(f"{who}: no answer")
        finally:
            self.lock.release()

    def _fail(self, reason: str) -> tuple[dict[str, Any], bytes]:
        self.stop()
        self.broken, self.broken_until = reason, time.monotonic() + BROKEN_SECS
        return {"ok": False, "reason": reason}, b""


class _Refused(Exception):
    """The reader could not take its identity."""


_READERS: dict[Creds, _Reader] = {}
_READERS_LOCK = threading.Lock()
_SOURCE: list[str] = []


def _reader_source() -> str:
    if not _SOURCE:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "userread.py"), encoding="utf-8") as fh:
            _SOURCE.append(fh.read())
    return _SOURCE[0]


def _reader(ident: Creds) -> _Reader:
    """The one reader of this identity (started on first use); the least recently used beyond MAX_READERS ends."""
    with _READERS_LOCK:
        reader = _READERS.pop(ident, None) or _Reader(ident)
        _READERS[ident] = reader
        for old in list(_READERS.values())[:-MAX_READERS]:
            if old.lock.acquire(blocking=False):
                try:
                    old.stop()
                finally:
                    old.lock.release()
                del _READERS[old.ident]
        return reader


def close_readers() -> None:
    """End every reader process (they also end by themselves when idle or when this process exits)."""
    with _READERS_LOCK:
        readers = list(_READERS.values())
        _READERS.clear()
    for reader in readers:
        with reader.lock:
            reader.stop()


atexit.register(close_readers)


def user_creds(uid: int, gid: int) -> Creds:
    """The identity of a user who runs no process here yet (a Slurm job's): uid, gid and the groups
    /etc/group gives the user's name (none when the uid has no passwd entry)."""
    import pwd

    try:
        groups = tuple(sorted(set(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)) - {gid}))
    except (KeyError, OSError):
        groups = ()
    return Creds(uid, gid, groups)


def read_as(ident: Creds, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
    """(content, None) of the regular file ``path`` (absolute, on this host) as ``ident`` could read it, or
    (None, the kernel's answer to that identity). The reader holds the identity (hoststate.userread), so what
    comes back is what the user could learn by trying: nothing about a file only root may see."""
    if not path.startswith("/"):
        return None, "not an absolute path"
    try:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        return None, reason_of(err)
    try:
        pseudo = sorted(ProcView._pseudo_devices(Reader("/", {}).read("proc/self/mountinfo")))
        request = {"op": "read", "path": path, "start": [], "pseudo": pseudo, "max": max_bytes}
        head, payload = _reader(ident).call(request, root)
    finally:
        os.close(root)
    return (payload, None) if head.get("ok") else (None, str(head.get("reason")))


# --------------------------------------------------------------------------------------------
# A process's view of the file system


class ProcView:
    """The file system as process ``pid`` sees it, read with its rights. Use as a context manager.

    ``error`` is set (and every read answers it) when the process's root, identity or working
    directory cannot be established.
    """

    def __init__(self, pid: int, proc: str = "/proc"):
        self.pid = pid
        self.error: str | None = None
        self.identities: list[Creds] = []
        self._root: int | None = None
        self._cwd: list[str] | None = None
        self._cwd_error: str | None = None
        self._pseudo_devs: list[int] = []
        base = f"{proc}/{pid}"
        reader = Reader("/", {})
        status = reader.read(f"{base}/status")
        found = identities(status) if status is not None else None
        if not found:
            self.error = f"credentials of process {pid}: {next(iter(reader.unreadable.values()), 'unparsable')}"
            return
        self.identities = found
        try:
            self._root = os.open(f"{base}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            self.error = f"root of process {pid}: {reason_of(err)}"
            return
        self._pseudo_devs = sorted(self._pseudo_devices(reader.read(f"{base}/mountinfo")))
        self._cwd, self._cwd_error = self._locate_cwd(base)

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
        head, _ = self._ask("stat", "/" + "/".join(parts), [])
        if not head.get("ok"):
            return None, f"working directory: {head.get('reason')}"
        if (head.get("dev"), head.get("ino")) != (want.st_dev, want.st_ino):
            return None, "working directory could not be located inside the process's root"
        return parts, None

    @staticmethod
    def _pseudo_devices(mountinfo: str | None) -> set[int]:
        """Device numbers of the process's pseudo file systems (empty when mountinfo is unreadable)."""
        devs: set[int] = set()
        for line in (mountinfo or "").splitlines():
            left, sep, right = line.partition(" - ")
            fields = left.split()
            if not sep or len(fields) < 3 or not right.split():
                continue
            if right.split()[0] in PSEUDO_FS:
                major, _, minor = fields[2].partition(":")
                if major.isdigit() and minor.isdigit():
                    devs.add(os.makedev(int(major), int(minor)))
        return devs

    # ---- requests

    def _ask(self, op: str, path: str, start: list[str] | None = None, max_bytes: int = MAX_FILE_BYTES,
             ) -> tuple[dict[str, Any], bytes]:
        """Every identity's reader answers; the first one's content is kept when all of them reached the
        same file. Relative paths start at the working directory."""
        if self._root is None:
            return {"ok": False, "reason": self.error or "closed"}, b""
        if start is None and not path.startswith("/"):
            if self._cwd is None:
                return {"ok": False, "reason": self._cwd_error or "working directory unknown"}, b""
            start = self._cwd
        if len(path) + sum(len(p) + 1 for p in start or []) > MAX_PATH:
            return {"ok": False, "reason": "ENAMETOOLONG"}, b""
        request = {"op": op, "path": path, "start": start, "pseudo": self._pseudo_devs, "max": max_bytes}
        head, payload = _reader(self.identities[0]).call(request, self._root)
        for ident in self.identities[1:]:
            if not head.get("ok"):
                break
            other, _ = _reader(ident).call({**request, "content": False}, self._root)
            if not other.get("ok"):
                return other, b""
            if (other.get("dev"), other.get("ino")) != (head.get("dev"), head.get("ino")):
                return {"ok": False, "reason": "changed while being read"}, b""
        return head, payload

    def locate(self, path: str) -> tuple[str | None, str | None]:
        """The absolute path inside the process's root that ``path`` names (symlinks resolved)."""
        head, _ = self._ask("stat", path)
        if not head.get("ok"):
            return None, str(head.get("reason"))
        return "/" + "/".join(head.get("names", [])), None

    def read(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
        """(content, None) of a regular file the process could read, or (None, reason)."""
        head, payload = self._ask("read", path, max_bytes=max_bytes)
        return (payload, None) if head.get("ok") else (None, str(head.get("reason")))

    def read_text(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[str | None, str | None]:
        data, err = self.read(path, max_bytes)
        return (decode(data), None) if data is not None else (None, err)

    def listdir(self, path: str) -> tuple[list[str] | None, str | None]:
        """Sorted entries of a directory the process could list, or (None, reason)."""
        head, payload = self._ask("list", path)
        if not head.get("ok"):
            return None, str(head.get("reason"))
        try:
            entries = json.loads(payload.decode("utf-8", "surrogatepass"))
        except ValueError:
            return None, "unparsable listing"
        return [str(e) for e in entries], None

    def kind(self, path: str) -> str | None:
        """"dir", "file", "other", or None when the path does not resolve for the process."""
        head, _ = self._ask("stat", path)
        return str(head.get("kind")) if head.get("ok") else None

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

