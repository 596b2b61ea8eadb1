"""A file reader that holds one user's identity, so the kernel decides what it may read.

hoststate runs as root, but a file that another user's process names (``--config FILE``, its
Hugging Face cache, its site-packages) must be read with that user's rights: mode bits, POSIX ACLs
and LSMs all apply, and only the kernel knows them all. procfiles starts this file as
``python -I -S -c <this text> UID GID GROUPS FD``: the new process drops to the identity
(setgroups, setresgid, setresuid: real, effective and saved ids alike, so no capability is left),
then answers requests on the socket FD until that closes or stays idle.

It is started with exec, not fork: it begins with an empty memory and environment, so nothing of
root's process (a snapshot, an operator's token) reaches a process the user may signal. The user
cannot ptrace it either: the kernel marks a process that changed its ids non-dumpable.

Protocol: a request is a 4-byte length and a JSON object; the first bytes carry the directory fd the
path is resolved in (the target process's root, opened by the caller). A reply is two 4-byte lengths,
a JSON header and a payload. Paths are resolved one component at a time with O_NOFOLLOW, symlinks
spliced in and never above that root (as openat2's RESOLVE_IN_ROOT). Only the standard library:
this text runs in an interpreter started with ``-I -S``.
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import stat
import struct
import sys
from collections import deque

#: Symlinks followed while resolving one path, as the kernel's limit.
MAX_LINKS = 40
#: Entries returned for one directory.
MAX_ENTRIES = 100_000
#: Largest request accepted (a path is at most PATH_MAX; the JSON around it is small).
MAX_REQUEST = 1 << 16
#: Seconds without a request after which the reader exits (the caller starts a new one when needed).
IDLE_EXIT = 60.0
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _reason(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, type(err).__name__)


def _who() -> str:
    return f"the process's user (uid {os.geteuid()})"


# --------------------------------------------------------------------------------------------
# Resolution


def resolve(root: int, path: str, start: list[str] | None) -> tuple[int | None, list[str], str | None]:
    """(O_PATH fd, components inside ``root``, None) of ``path``, or (None, [], reason).

    Relative paths start at ``start`` (components of the working directory). Every lookup is an
    openat by this process, so the kernel checks search permission on each directory with this
    identity; ``..`` pops a level and never leaves ``root``; an absolute link restarts at ``root``.
    """
    if not path:
        return None, [], "empty path"
    if "\0" in path:
        return None, [], "path holds a NUL byte"
    todo: deque[str] = deque((start or []) if not path.startswith("/") else [])
    todo.extend(path.split("/"))
    stack: list[int] = [os.dup(root)]
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
            here = "/" + "/".join(names)
            if not stat.S_ISDIR(os.fstat(stack[-1]).st_mode):
                return None, [], f"{here}: ENOTDIR"
            try:
                fd = os.open(part, _PATH_FLAGS, dir_fd=stack[-1])
            except OSError as err:
                if err.errno == errno.EACCES:
                    return None, [], f"{here}: not searchable by {_who()}"
                return None, [], f"{'/' + '/'.join([*names, part])}: {_reason(err)}"
            if not stat.S_ISLNK(os.fstat(fd).st_mode):
                stack.append(fd)
                names.append(part)
                continue
            os.close(fd)
            links += 1
            if links > MAX_LINKS:
                return None, [], "too many symbolic links (ELOOP)"
            try:
                target = os.readlink(part, dir_fd=stack[-1])
            except OSError as err:
                return None, [], f"{'/' + '/'.join([*names, part])}: {_reason(err)}"
            if target.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop())
                names.clear()
            todo.extendleft(reversed(target.split("/")))
        return stack.pop(), names, None
    finally:
        for fd in stack:
            os.close(fd)


def _kind(mode: int) -> str:
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _open(fd: int, st: os.stat_result, want: str, pseudo: set[int], max_bytes: int) -> tuple[int | None, str | None]:
    """The O_PATH fd reopened for reading when it is the kind asked for; the kernel checks read permission."""
    if want == "dir" and not stat.S_ISDIR(st.st_mode):
        return None, "not a directory"
    if want == "file" and not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    if st.st_dev in pseudo:
        return None, "a kernel pseudo-file, not a regular file"
    if want == "file" and st.st_size > max_bytes:
        return None, f"larger than {max_bytes} bytes"
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if want == "dir" else os.O_NONBLOCK | os.O_NOCTTY)
    try:
        real = os.open(f"/proc/self/fd/{fd}", flags)
    except OSError as err:
        if err.errno == errno.EACCES:
            return None, f"not readable by {_who()}"
        return None, _reason(err)
    again = os.fstat(real)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) or _kind(again.st_mode) != _kind(st.st_mode):
        os.close(real)
        return None, "changed while being opened"
    return real, None


def _read_all(fd: int, max_bytes: int) -> tuple[bytes | None, str | None]:
    chunks, total = [], 0
    while total <= max_bytes:
        chunk = os.read(fd, min(65536, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        return None, f"larger than {max_bytes} bytes"
    return b"".join(chunks), None


def answer(root: int, request: dict) -> tuple[dict, bytes]:
    """One request: op ``stat`` (where a path leads), ``read`` (a regular file) or ``list`` (a directory);
    ``content`` false only checks that this identity may open it."""
    op = request.get("op")
    fd, names, err = resolve(root, str(request.get("path", "")), request.get("start"))
    if fd is None:
        return {"ok": False, "reason": err}, b""
    try:
        st = os.fstat(fd)
        head = {"ok": True, "names": names, "kind": _kind(st.st_mode), "dev": st.st_dev, "ino": st.st_ino}
        if op == "stat":
            return head, b""
        max_bytes = int(request.get("max", 1 << 20))
        real, err = _open(fd, st, "dir" if op == "list" else "file", set(request.get("pseudo", [])), max_bytes)
        if real is None:
            return {"ok": False, "reason": err}, b""
    finally:
        os.close(fd)
    try:
        if not request.get("content", True):
            return head, b""
        if op == "list":
            entries = sorted(os.listdir(real))
            if len(entries) > MAX_ENTRIES:
                return {"ok": False, "reason": f"more than {MAX_ENTRIES} entries"}, b""
            return head, json.dumps(entries).encode("utf-8", "surrogatepass")
        data, err = _read_all(real, max_bytes)
        return (head, data) if data is not None else ({"ok": False, "reason": err}, b"")
    finally:
        os.close(real)


# --------------------------------------------------------------------------------------------
# The reader process


def take_identity(uid: int, gid: int, groups: list[int]) -> None:
    """Become uid/gid/groups for good (real, effective, saved); raises OSError when that is not possible."""
    if os.getresuid() == (uid, uid, uid) and os.getresgid() == (gid, gid, gid) and set(os.getgroups()) == set(groups):
        return
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(errno.EPERM, "identity not taken")
    if uid != 0:
        try:
            os.setresuid(0, 0, 0)
        except PermissionError:
            return
        raise OSError(errno.EPERM, "root could be regained")


def send(sock: socket.socket, head: dict, payload: bytes = b"") -> None:
    body = json.dumps(head).encode()
    sock.sendall(struct.pack("!II", len(body), len(payload)) + body + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _next_request(sock: socket.socket) -> tuple[dict, int] | None:
    """The next request and the directory fd sent with it; None at end of input or when idle too long."""
    if not select.select([sock], [], [], IDLE_EXIT)[0]:
        return None
    data, fds, _flags, _addr = socket.recv_fds(sock, 4, 1)
    if len(data) < 4 or not fds:
        for fd in fds:
            os.close(fd)
        return None
    size = struct.unpack("!I", data)[0]
    body = _recv_exact(sock, size) if size <= MAX_REQUEST else None
    if body is None:
        os.close(fds[0])
        return None
    return json.loads(body), fds[0]


def serve(sock: socket.socket) -> None:
    while True:
        got = _next_request(sock)
        if got is None:
            return
        request, root = got
        try:
            head, payload = answer(root, request)
        except (OSError, ValueError, TypeError) as err:
            head, payload = {"ok": False, "reason": _reason(err) if isinstance(err, OSError) else str(err)}, b""
        finally:
            os.close(root)
        send(sock, head, payload)


def main(argv: list[str]) -> int:
    uid, gid, groups, fd = int(argv[0]), int(argv[1]), [int(g) for g in argv[2].split(",") if g], int(argv[3])
    sock = socket.socket(fileno=fd)
    try:
        take_identity(uid, gid, groups)
    except OSError as err:
        send(sock, {"ok": False, "reason": f"cannot take uid {uid}'s identity: {_reason(err)}"})
        return 1
    send(sock, {"ok": True, "uid": os.geteuid()})
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
