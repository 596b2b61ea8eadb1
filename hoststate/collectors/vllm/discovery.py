"""Running vLLM servers, found and read from /proc: command line and environment, never executed.

Parents only: forked workers repeat their parent's command line. argv and environ are read as bytes
through the read layer and decoded with visible ``\\xNN`` escapes (hoststate.procfiles). Nothing here
raises; what cannot be read is recorded in the caller's ``unreadable`` map with its reason.

Any user can start a process whose command line reads ``vllm serve``, and listen on the port a server leaves
free in the other address family (vLLM listens on IPv4 ``0.0.0.0:P``; ``[::1]:P`` is anyone's). So the server
behind a URL is the owner of the exact socket a connection to it reaches (``server_at``: connect as urllib does,
the connection's family and server address, the listening socket the kernel would pick for it in
/proc/net/tcp{,6}, the processes holding its inode), a URL naming another host describes no local process, and
discovery prefers the invoking user's servers, then those that own a listening socket (``select``): another
user's process or an idle lookalike never decides what is described.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from hoststate import procfiles
from hoststate.filetrust import invoking_uid, status_uids
from hoststate.io import Reader, reason_of

if TYPE_CHECKING:  # ipaddress and urllib.parse are imported where a server is looked for, not by every snap
    import ipaddress

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
    #: Why this process was described: the socket it owns, whose it is, what else was found (``select``,
    #: ``server_at``).
    selected_because: str | None = None
    #: Real and effective uid (/proc/PID/status), None when unreadable.
    uid: int | None = None
    euid: int | None = None
    #: Not the invoking user's (``select``): recorded as another user's, never compared.
    foreign: bool = False
    #: Start time (``start_time``) when the process was identified as the owner of a URL's socket.
    start: int | None = None

    @property
    def program(self) -> str:
        """What runs: ``vllm serve`` or ``api_server`` (argv.locate), else argv[0]'s name."""
        from hoststate.collectors.vllm.argv import locate

        return locate(self.argv).program or (self.argv[0].rsplit("/", 1)[-1] if self.argv else "?")

    def who(self) -> str:
        """``pid N (user NAME, uid U, vllm serve)``: how a note names the process."""
        return f"pid {self.pid} ({user_label(self.uid)}, {self.program})"


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


def proc_uids(pid: int) -> tuple[int | None, int | None]:
    """(real uid, effective uid) of a process from /proc/PID/status; (None, None) when unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            text = fh.read(1 << 16).decode("ascii", "replace")
    except OSError:
        return None, None
    return status_uids(text)


def user_name(uid: int | None) -> str | None:
    """The passwd name of ``uid``, or None."""
    if uid is None:
        return None
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return None


def user_label(uid: int | None) -> str:
    """``user nobody (uid 65534)``, or ``uid 1234`` without a passwd entry, or ``user unknown``."""
    if uid is None:
        return "user unknown"
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _describe_proc(pid: int, argv: list[str], argv_lossy: bool, unreadable: dict[str, str]) -> Proc:
    found = Proc(pid=pid, argv=list(argv))
    found.uid, found.euid = proc_uids(pid)
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


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (/proc/PID/stat field 22): with the pid, it names one
    process, as a pid alone does not once the process exited and the pid was given to another."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read(4096).rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


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
    from hoststate.ahead import ours

    me = ours()  # this command's own processes, whose command line may name vllm (guard -- vllm serve M)
    matches: dict[int, tuple[list[str], bool, int]] = {}
    for pid in pids:
        if int(pid) in me:
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
    """A TCP socket in LISTEN state: its inode (what /proc/PID/fd links name), address and port; the table it
    came from (``tcp`` or ``tcp6``) and the uid that created it."""

    inode: int
    address: str
    port: int
    table: str = field(default="tcp", compare=False)
    uid: int = field(default=-1, compare=False)


def _address(hexaddr: str) -> str:
    """/proc/net/tcp's address: 32-bit words printed in host byte order."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    import ipaddress

    return str(ipaddress.ip_address(raw))


def parse_net_tcp(text: str, table: str = "tcp") -> list[Listener]:
    """The LISTEN entries of a /proc/net/tcp or tcp6 table (``sl local rem st ... uid timeout inode``)."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        try:
            out.append(Listener(int(fields[9]), _address(addr), int(port, 16), table, int(fields[7])))
        except ValueError:
            continue
    return out


def listeners(net: str) -> list[Listener]:
    """Listening TCP sockets of one network namespace (``proc/PID/net`` or ``proc/self/net``)."""
    reader = Reader("/", {})
    found = []
    for name in ("tcp", "tcp6"):
        data = reader.read_bytes(f"{net}/{name}", record=False, max_bytes=MAX_NET_BYTES)
        found += parse_net_tcp((data or b"").decode("ascii", "replace"), name)
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


def holders(inodes: set[int]) -> list[int]:
    """Every process that holds one of these socket inodes open (forked workers share their parent's)."""
    try:
        pids = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
    except OSError:
        return []
    return [pid for pid in pids if (socket_inodes(pid)[0] or set()) & inodes]


# --------------------------------------------------------------------------------------------
# The socket a connection reached


def _rank(s: Listener, v6: bool, server: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> tuple | None:
    """How the kernel's listener lookup ranks ``s`` for a connection to (server, port), or None when it cannot
    take it (net/ipv4/inet_hashtables.c ``inet_lhash2_lookup``, net/ipv6/inet6_hashtables.c): a socket bound to the
    exact address before a wildcard one; for IPv4, an IPv4 socket before a dual-stack IPv6 one."""
    import ipaddress

    if s.port != port:
        return None
    bound = ipaddress.ip_address(s.address)
    if v6:
        if s.table != "tcp6":
            return None
        return (2, 1) if bound == server else (1, 1) if bound.is_unspecified else None
    if s.table == "tcp":
        return (2, 1) if bound == server else (1, 1) if bound.is_unspecified else None
    mapped = getattr(bound, "ipv4_mapped", None)
    return (2, 0) if mapped == server else (1, 0) if bound.is_unspecified else None


def accepting(found: list[Listener], family: int, server: tuple[str, int]) -> tuple[list[Listener], str | None]:
    """(the listening sockets that accepted a connection of ``family`` to ``server``, None) or ([], why): one
    socket, or an SO_REUSEPORT group (the kernel requires one uid for those); sockets of several uids at the same
    rank cannot be told apart, so none is chosen (fail closed)."""
    import ipaddress
    import socket

    addr = ipaddress.ip_address(server[0].split("%", 1)[0])
    v6 = family == socket.AF_INET6
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr, v6 = addr.ipv4_mapped, False  # an IPv6 socket connected to ::ffff:a.b.c.d made an IPv4 connection
    ranked = [(r, s) for s in found if (r := _rank(s, v6, addr, server[1])) is not None]
    if not ranked:
        return [], f"no listening socket on {_hostport(server)} in this network namespace"
    best = max(r for r, _ in ranked)
    top = [s for r, s in ranked if r == best]
    if len({s.uid for s in top}) > 1:
        return [], f"sockets of several users listen on {_hostport(server)}: which one accepted cannot be told"
    return top, None


def _hostport(end: tuple[str, int]) -> str:
    return f"[{end[0]}]:{end[1]}" if ":" in end[0] else f"{end[0]}:{end[1]}"


class Endpoint(NamedTuple):
    """Where a connection to a local URL went: its family, the server's address and port as the connection has
    them (getpeername), the listening socket(s) that accepted it and the processes holding them."""

    family: str
    server: tuple[str, int]
    listening: tuple[Listener, ...]
    holders: tuple[int, ...]

    def describe(self) -> str:
        bound = ", ".join(sorted({_hostport((s.address, s.port)) for s in self.listening}))
        return f"a connection over {self.family} to {_hostport(self.server)} reached the socket listening on {bound}"


def url_host_port(url: str) -> tuple[str | None, int | None, str | None]:
    """(host, port, None) of a URL, or (None, None, why)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), None
    except ValueError:
        return None, None, "--vllm-url could not be parsed"


def connect(host: str, port: int, timeout: float) -> tuple[Any, str | None]:
    """(a socket connected the way urllib connects: ``socket.create_connection``, getaddrinfo's order, the first
    address that answers, None) or (None, why)."""
    import socket

    try:
        return socket.create_connection((host, port), timeout=max(timeout, 0.001)), None
    except OSError as err:
        return None, f"could not connect to {_hostport((host, port))}: {reason_of(err)}"


def endpoint_of(sock: Any) -> tuple[Endpoint | None, str | None]:
    """(the listening socket a connected ``sock`` reached and its holders, None) or (None, why): the connection's
    own family and server address (getpeername), matched in this namespace's /proc/net/tcp{,6}."""
    import socket

    try:
        peer = sock.getpeername()[:2]
    except OSError as err:
        return None, f"the connection has no peer: {reason_of(err)}"
    family = "IPv6" if sock.family == socket.AF_INET6 else "IPv4"
    top, why = accepting(listeners("proc/self/net"), sock.family, (str(peer[0]), int(peer[1])))
    if not top:
        return None, why
    held = holders({s.inode for s in top})
    if not held:
        return None, f"no process holds the socket listening on {_hostport(peer)}"
    return Endpoint(family, (str(peer[0]), int(peer[1])), tuple(top), tuple(held)), None


def owner_of(end: Endpoint, unreadable: dict[str, str]) -> tuple[Proc | None, str | None]:
    """(the vLLM server among the processes holding the listening socket, None) or (None, why): its parent when
    forked workers share the socket; several unrelated vLLM command lines holding it is no answer."""
    from hoststate.collectors.vllm.argv import locate

    procs = {}
    for pid in end.holders:
        proc = inspect(pid, {})
        if proc is not None and locate(proc.argv).program is not None:
            procs[pid] = proc
    tops = [p for p in procs.values() if _ppid(str(p.pid)) not in procs]
    if len(tops) != 1:
        named = "; ".join(inspect_label(pid) for pid in end.holders[:4])
        return None, (f"{end.describe()}, held by {named}: "
                      + ("no vLLM server command line" if not tops else "several vLLM server command lines"))
    found = inspect(tops[0].pid, unreadable) or tops[0]
    found.start = start_time(found.pid)
    found.selected_because = f"{end.describe()}, which it holds ({user_label(found.euid)})"
    return found, None


def inspect_label(pid: int) -> str:
    proc = inspect(pid, {})
    return proc.who() if proc is not None else f"pid {pid}"


# --------------------------------------------------------------------------------------------
# Which process is the server


def select(found: list[Proc], me: tuple[int, str] | None = None) -> tuple[list[Proc], list[str]]:
    """(the processes to describe, notes saying why). The invoking user's servers (``invoking_uid``) come first:
    another user's are described only when no server of the invoking user runs, and are then marked ``foreign``
    (the collector records them without their arguments). Among those, the ones that own a listening TCP socket;
    when none does, all of them. Each chosen one records why, naming its pid, user and program."""
    if not found:
        return found, []
    uid, source = me or invoking_uid()
    for p in found:
        p.foreign = not (p.uid == uid and p.euid == uid)
    mine = [p for p in found if not p.foreign]
    pool = mine or found
    ports = {p.pid: listening_ports(p.pid) for p in found}
    owners = [p for p in pool if ports[p.pid][0]]
    chosen = owners or pool

    def label(p: Proc) -> str:
        got, err = ports[p.pid]
        sockets = f"port {', '.join(map(str, got))}" if got else "no listening socket" if got is not None else \
            f"sockets unknown: {err}"
        return f"pid {p.pid} ({user_label(p.euid)}, {p.program}, {sockets})"

    who = f"{user_label(uid)}, from {source}"
    for p in chosen:
        whose = f"run by the invoking user ({who})" if not p.foreign else \
            f"run by another user ({user_label(p.euid)}): no vLLM server of the invoking user ({who}) runs"
        listed = ", ".join(map(str, ports[p.pid][0] or []))
        sock = f"owns a listening TCP socket (port {listed})" if owners else "owns no listening TCP socket"
        p.selected_because = f"pid {p.pid}, {p.program}, {whose}; {sock}" + (
            "" if len(found) == 1 else f" (of {len(found)} vLLM server command lines)")
    if len(found) == 1 and not chosen[0].foreign:
        return chosen, []
    ignored = [p for p in found if p not in chosen]
    notes = [f"{len(found)} vLLM server command line(s); described {'; '.join(label(p) for p in chosen)}"
             + (f"; ignored: {'; '.join(label(p) for p in ignored)}" if ignored else "")]
    if not owners and len(chosen) > 1:
        notes[0] += "; none owns a listening TCP socket, so all are described"
    if not mine:
        notes.append(f"no vLLM server of the invoking user ({who}) runs: another user's is recorded, never compared")
    return chosen, notes


def is_local(host: str | None) -> bool:
    """Whether a URL's host is this host's loopback (or the unspecified address, which Linux connects locally)."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost" or host.lower().rstrip(".").endswith(".localhost"):
        return True
    import ipaddress

    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or addr.is_unspecified or bool(mapped and (mapped.is_loopback or mapped.is_unspecified))


#: Seconds server_at may take to connect to the URL's socket.
CONNECT_TIMEOUT = 3.0


def server_at(url: str, unreadable: dict[str, str]) -> tuple[Proc | None, str | None]:
    """(the vLLM server process behind ``url``, None) or (None, why none): the owner of the exact socket a
    connection to the URL reaches (resolved and connected as urllib does, then matched by the connection's family,
    address and port), in this host's network namespace. A host other than loopback is never a local process."""
    host, port, err = url_host_port(url)
    if err or host is None or port is None:
        return None, f"{err or '--vllm-url has no host'}: no local process is described"
    if not is_local(host):
        return None, "--vllm-url names a host other than this one's loopback: no local process is described"
    sock, err = connect(host, port, CONNECT_TIMEOUT)
    if sock is None:
        return None, f"{err}: no local process is described"
    try:
        end, err = endpoint_of(sock)
    finally:
        sock.close()
    if end is None:
        return None, f"{err}: no local process is described"
    proc, err = owner_of(end, unreadable)
    return proc, None if proc is not None else f"{err}: no local process is described"
