"""Who could have written a file: the one check behind every stamp hoststate writes or believes.

A record binds a result to its sidecar by digests, which anyone who can write both files can compute again. So a
result, a sidecar and the directories holding them count only when no user but the trusted ones (this user, root,
the owner of what the user named) could have written them: owned by a trusted user, writable by no other (a
sticky directory such as ``/tmp`` lets others add names, never rename or remove ours), one link (another name
could be anyone's). Pure checks on a stat result; the callers open, walk and read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Mapping


def trusted_uids(*named: str) -> frozenset[int]:
    """This process's user, root, and the owners of the paths the user named (a sweep folder a colleague owns)."""
    uids = {os.geteuid(), 0}
    for path in named:
        try:
            uids.add(os.stat(path).st_uid)
        except OSError:
            continue
    return frozenset(uids)


def invoking_uid(env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(the uid hoststate runs for, where it came from): run as root for someone else (a Slurm prolog for a job:
    ``SLURM_JOB_UID``; ``sudo``: ``SUDO_UID``), that user; else the user running hoststate. Discovery prefers this
    user's servers, and only this user's GPU processes may pass for the benchmark's by their name
    (hoststate.collectors.gpu_occupancy)."""
    env = os.environ if env is None else env
    if os.geteuid() == 0:
        for name in ("SLURM_JOB_UID", "SUDO_UID"):
            value = env.get(name, "")
            if value.isdigit():
                return int(value), f"${name}"
    return os.getuid(), "the user running hoststate"


def _primary_gid(uid: int) -> int | None:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_gid
    except (KeyError, ImportError):
        return None


def _who(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def untrusted(st: os.stat_result, trusted: Collection[int]) -> str | None:
    """Why another user could have written the file or directory ``st`` (lstat'ed or fstat'ed), or None.

    Group write counts as another user's unless the group is the owner's own (a user-private group, umask 002);
    a directory others may write is trusted only when sticky (they may add names, never replace ours)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link (not followed: anyone can make one)"
    if st.st_uid not in trusted:
        return f"is owned by another user, {_who(st.st_uid)}"
    sticky = stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    group_other = bool(st.st_mode & 0o020) and st.st_gid not in (_primary_gid(st.st_uid), 0)
    if (st.st_mode & 0o002 or group_other) and not sticky:
        return "can be written by other users"
    if stat.S_ISREG(st.st_mode) and st.st_nlink != 1:
        return f"has {st.st_nlink} hard links (another name may be another user's)"
    return None
