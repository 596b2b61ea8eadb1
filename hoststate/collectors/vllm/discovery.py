"""Running vLLM servers, found and read from /proc: command line and environment, never executed.

Parents only: forked workers repeat their parent's command line. argv and environ are read as bytes
through the read layer and decoded with visible ``\\xNN`` escapes (hoststate.procfiles). Nothing here
raises; what cannot be read is recorded in the caller's ``unreadable`` map with its reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hoststate import procfiles
from hoststate.collectors.vllm.argv import locate
from hoststate.io import Reader, reason_of


@dataclass
class Proc:
    """A running server process as /proc showed it (argv and environment decoded, never executed)."""

    pid: int
    argv: list[str]
    env: dict[str, str] | None = None
    env_error: str | None = None
    #: What was not UTF-8 in argv or environ (kept as ``\\xNN`` escapes).
    decode_notes: list[str] = field(default_factory=list)


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
        argv, lossy = procfiles.decode_block(data)
        if locate(argv).program is not None:
            matches[int(pid)] = (argv, lossy, _ppid(pid))
    found = []
    for pid, (argv, lossy, ppid) in sorted(matches.items()):
        if ppid in matches and matches[ppid][0] == argv:
            continue
        found.append(_describe_proc(pid, argv, lossy, unreadable))
    return found
