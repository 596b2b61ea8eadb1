"""Running vLLM servers, found and read from /proc: command line and environment, never executed.

Parents only: forked workers repeat their parent's command line. argv and environ are read as bytes
through the read layer and decoded with visible ``\\xNN`` escapes (hoststate.procfiles). Nothing here
raises; what cannot be read is recorded in the caller's ``unreadable`` map with its reason.

Any user can start a process whose command line reads ``vllm serve``; only a server owns a listening
socket. So the server behind a URL is the process that owns the socket listening on its port
(``server_at``: /proc/net/tcp{,6} inode -> /proc/PID/fd ``socket:[inode]``), a URL naming another
host describes no local process, and discovery prefers the processes that own a listening socket
(``select``): an idle lookalike never decides what is described.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hoststate import procfiles
from hoststate.io import Reader, reason_of

#: TCP state LISTEN as /proc/net/tcp prints it (include/net/tcp_states.h: TCP_LISTEN = 10).
TCP_LISTEN = "0A"
#: Largest /proc/net/tcp{,6} table read (about 150 bytes a socket).
MAX_NET_BYTES = 64 << 20
#: File descriptors looked at per process when finding its sockets.
MAX_FDS = 1 << 16


@dataclass
class Proc:
    """A running server process as /proc showed it (argv and environment decoded, never executed)."""

    pid: int
    argv: list[str]
    env: dict[str, str] | None = None
    env_error: str | None = None
    #: What was not UTF-8 in argv or environ (kept as ``\\xNN`` escapes).
    decode_notes: list[str] = field(default_factory=list)
    #: Why discovery described this process when several command lines looked like servers (``select``).
    selected_because: str | None = None


# --------------------------------------------------------------------------------------------
# Processes


def _gone(pid: int, reason: str) -> str:
    """ENOENT on /proc/PID/... of a process that exited reads as ESRCH (no such process)."""
    return "ESRCH" if reason == "ENOENT" and procfiles.gone(pid) else reason


def _read_block(pid: int, what: str, unreadable: dict[str, str]) -> tuple[Any, bool]:
    local: dict[str, str] = {}
    value, lossy = (procfiles.cmdline if what == "cmdline" else procfiles.environ)(pid, local)
    for key, reason in local.items():
        unreadable[key] = _gone(pid, reason)
    return value, lossy


def inspect(pid: int, unreadable: dict[str, str]) -> Proc | None:
    """One process's argv and environment; None (reason recorded) when its command line cannot be read."""
    argv, lossy = _read_block(pid, "cmdline", unreadable)
    if not argv:
        unreadable.setdefault(f"proc/{pid}/cmdline", "empty (a kernel thread or an exited process)")
        return None
    return _describe_proc(pid, argv, lossy, unreadable)


def _describe_proc(pid: int, argv: list[str], argv_lossy: bool, unreadable: dict[str, str]) -> Proc:
    found = Proc(pid=pid, argv=list(argv))
    if argv_lossy:
        found.decode_notes.append("argv holds bytes that are not UTF-8 (kept as \\xNN escapes)")
    env, env_lossy = _read_block(pid, "environ", unreadable)
    if env is None:
        found.env_error = unreadable.get(f"proc/{pid}/environ", "unreadable")
    else:
        found.env = env
    if env_lossy:
        found.decode_notes.append("the environment holds bytes that are not UTF-8 (kept as \\xNN escapes)")
    return found


def _ppid(pid: str) -> int:
    """The parent pid from /proc/PID/stat (after the command name, which may hold spaces and parens)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read(4096).rsplit(b")", 1)[1].split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return 0


def discover(unreadable: dict[str, str]) -> list[Proc]:
    """Running vLLM servers (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, the
    CLI module), parents only: forked workers repeat their parent's command line. One pass over
    /proc; a command line that does not mention vllm is never decoded."""
    try:
        pids = sorted((name for name in os.listdir("/proc") if name.isdigit()), key=int)
    except OSError as err:
        unreadable["proc"] = reason_of(err)
        return []
    me = os.getpid()
    matches: dict[int, tuple[list[str], bool, int]] = {}
    for pid in pids:
        if int(pid) == me:
            continue
        data = Reader("/", {}).read_bytes(f"proc/{pid}/cmdline", record=False, max_bytes=procfiles.MAX_BLOCK_BYTES)
        if not data or b"vllm" not in data:
            continue  # exited, not ours to read, or not vLLM
        from hoststate.collectors.vllm.argv import locate  # the parsers load only when a command mentions vllm

        argv, lossy = procfiles.decode_block(data)
        if locate(argv).program is not None:
            matches[int(pid)] = (argv, lossy, _ppid(pid))
    found = []
    for pid, (argv, lossy, ppid) in sorted(matches.items()):
        if ppid in matches and matches[ppid][0] == argv:
            continue
        found.append(_describe_proc(pid, argv, lossy, unreadable))
    return found


# --------------------------------------------------------------------------------------------
# Listening sockets


@dataclass(frozen=True)
class Listener:
    """A TCP socket in LISTEN state: its inode (what /proc/PID/fd links name), address and port."""

    inode: int
    address: str
    port: int


def _address(hexaddr: str) -> str:
    """/proc/net/tcp's address: 32-bit words printed in host byte order."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def parse_net_tcp(text: str) -> list[Listener]:
    """The LISTEN entries of a /proc/net/tcp or tcp6 table (``sl local rem st ... uid timeout inode``)."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        try:
            out.append(Listener(int(fields[9]), _address(addr), int(port, 16)))
        except ValueError:
            continue
    return out


def listeners(net: str) -> list[Listener]:
    """Listening TCP sockets of one network namespace (``proc/PID/net`` or ``proc/self/net``)."""
    reader = Reader("/", {})
    found = []
    for name in ("tcp", "tcp6"):
        data = reader.read_bytes(f"{net}/{name}", record=False, max_bytes=MAX_NET_BYTES)
        found += parse_net_tcp((data or b"").decode("ascii", "replace"))
    return found


def socket_inodes(pid: int) -> tuple[set[int] | None, str | None]:
    """Inodes of the sockets process ``pid`` holds open, or (None, reason)."""
    base = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(base)[:MAX_FDS]
    except OSError as err:
        return None, _gone(pid, reason_of(err))
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]") and link[8:-1].isdigit():
            inodes.add(int(link[8:-1]))
    return inodes, None


def listening_ports(pid: int) -> tuple[list[int] | None, str | None]:
    """TCP ports process ``pid`` owns a listening socket on (in its own network namespace), or (None, reason)."""
    inodes, err = socket_inodes(pid)
    if inodes is None:
        return None, err
    return sorted({s.port for s in listeners(f"proc/{pid}/net") if s.inode in inodes}), None


# --------------------------------------------------------------------------------------------
# Which process is the server


def _owner(pid: int) -> str:
    try:
        return f"uid {os.stat(f'/proc/{pid}').st_uid}"
    except OSError:
        return "exited"


def select(found: list[Proc]) -> tuple[list[Proc], list[str]]:
    """(the processes to describe, notes saying why): when several command lines look like servers, those
    that own a listening TCP socket; when none does, all of them. Each chosen one records why."""
    if len(found) < 2:
        return found, []
    ports = {p.pid: listening_ports(p.pid) for p in found}
    owners = [p for p in found if ports[p.pid][0]]

    def label(p: Proc) -> str:
        got, err = ports[p.pid]
        sockets = f"port {', '.join(map(str, got))}" if got else "no listening socket" if got is not None else \
            f"sockets unknown: {err}"
        return f"pid {p.pid} ({_owner(p.pid)}, {sockets})"

    if not owners:
        for p in found:
            p.selected_because = "no discovered vLLM server command line owns a listening TCP socket"
        return found, [f"{len(found)} vLLM server command lines and none owns a listening TCP socket, so all are "
                       f"described: {'; '.join(label(p) for p in found)}"]
    ignored = [p for p in found if p not in owners]
    for p in owners:
        listed = ", ".join(map(str, ports[p.pid][0] or []))
        p.selected_because = (f"the only discovered vLLM server that owns a listening TCP socket (port {listed})"
                              if len(owners) == 1 else f"owns a listening TCP socket (port {listed})")
    described = "; ".join(label(p) for p in owners)
    notes = [f"{len(found)} vLLM server command lines; described {described}"
             + (f"; ignored, as they own no listening socket: {'; '.join(label(p) for p in ignored)}" if ignored
                else "")]
    return owners, notes


def is_local(host: str | None) -> bool:
    """Whether a URL's host is this host's loopback (or the unspecified address, which Linux connects locally)."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost" or host.lower().rstrip(".").endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or addr.is_unspecified or bool(mapped and (mapped.is_loopback or mapped.is_unspecified))


def _serves(listening: str, host: str) -> bool:
    """Whether a socket listening on ``listening`` answers a connection to the local ``host``."""
    addr = ipaddress.ip_address(listening)
    if addr.is_unspecified:
        return True
    mapped = getattr(addr, "ipv4_mapped", None) or addr
    try:
        target = ipaddress.ip_address(host)
    except ValueError:  # localhost: any loopback address
        return mapped.is_loopback
    target = getattr(target, "ipv4_mapped", None) or target
    return mapped == target or (target.is_unspecified and mapped.is_loopback)


def server_at(url: str, unreadable: dict[str, str]) -> tuple[Proc | None, str | None]:
    """(the vLLM server process behind ``url``, None) or (None, why none): the one that owns the socket
    listening on the URL's port, in this host's network namespace. A host other than loopback is never
    a local process."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, "--vllm-url could not be parsed: no local process is described"
    if not is_local(host):
        return None, "--vllm-url names a host other than this one's loopback: no local process is described"
    inodes = {s.inode for s in listeners("proc/self/net") if s.port == port and _serves(s.address, host or "")}
    if not inodes:
        return None, f"nothing listens on local port {port}: no local process is described"
    for proc in discover(unreadable):
        held, _ = socket_inodes(proc.pid)
        if held and held & inodes:
            return proc, None
    return None, (f"no vLLM server command line owns the socket listening on local port {port}: "
                  "no local process is described")
