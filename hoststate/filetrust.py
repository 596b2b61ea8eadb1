"""Who could have written a file: the one check behind every stamp hoststate writes or believes.

A record binds a result to its sidecar by digests, which anyone who can write both files can compute again. So a
result, a sidecar and the directories holding them count only when no user but the trusted ones (this user, root,
the owner of what the user named) could have written them: owned by a trusted user, writable by no other (a
sticky directory such as ``/tmp`` lets others add names, never rename or remove ours), one link (another name
could be anyone's). The owner of a path the user named is trusted only where no one else could have put it
there. Pure checks on a stat result; the callers open, walk and read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator, Mapping


def trusted_uids(*named: str) -> frozenset[int]:
    """This process's user, root, and the owner of each path the user named (a sweep folder a colleague owns) that
    no one else could have put where it is (:func:`placed_by_owner`): a file another user added to a shared folder,
    which a shell glob then names, or a folder they swapped in for the one named, vouches for no one."""
    uids = {os.geteuid(), 0}
    for path in named:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_uid not in uids and placed_by_owner(path, st):
            uids.add(st.st_uid)
    return frozenset(uids)


def placed_by_owner(path: str, st: os.stat_result) -> bool:
    """Whether only ``path``'s owner (``st``), root or this user could have put it where it is: every symbolic link
    on the way to it, as named, is theirs and in a folder no other user may write (:func:`_links_placed`), and
    every folder above its real location is theirs and writable by no other user. A sticky folder (``/tmp``) counts
    for a folder named (others cannot rename or remove it), not for a file named: anyone may add a file of any name
    to it."""
    allowed = {st.st_uid, os.geteuid(), 0}
    if not _links_placed(path, allowed):
        return False
    here = os.path.dirname(os.path.realpath(path))
    first = True
    while True:
        try:
            folder = os.lstat(here)
        except OSError:
            return False
        if untrusted(folder, allowed) or (first and not stat.S_ISDIR(st.st_mode) and _others_write(folder)):
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here, first = parent, False


def root_only(path: str) -> str | None:
    """Why a user other than root could have written ``path`` or put another file in its place, or None: what root
    acts on without anyone naming it on a command line (the Slurm configuration and the baseline, policy, tree and
    kernel log it names) must be root's and writable by root alone, as must every link on the way and every folder
    above it (a sticky folder such as ``/tmp`` counts above a folder, never as a file's own: anyone may add a name
    there). A path that does not exist is judged by its folder, where another user could otherwise create it."""
    try:
        st = os.stat(path)
    except OSError:
        parent = os.path.dirname(os.path.abspath(path))
        if parent == os.path.abspath(path):
            return None
        why = root_only(parent)
        return None if why is None else f"is missing, and its folder {parent} {why}"
    if st.st_uid != 0:
        return f"is owned by {_who(st.st_uid)}, not by root"
    if _others_write(st):
        return "can be written by other users"
    if stat.S_ISREG(st.st_mode) and st.st_nlink != 1:
        return f"has {st.st_nlink} hard links (another name may be another user's)"
    if not placed_by_owner(path, st):
        return "sits behind a link or in a folder another user could change"
    return None


def swappable(path: str, trusted: Collection[int]) -> str | None:
    """Why a user outside ``trusted`` could put another folder in the place of the folder ``path``, or None: a
    symbolic link on the way to it that is not a trusted user's or sits in a folder others may write, or a folder
    above its real location that another user owns or may write (a sticky one, as ``/tmp``, is safe: others may
    add names there, never rename ours). Checking the folder alone misses a parent in which another user renames
    it away and renames one of its owner's other folders (an older experiment) into its place."""
    allowed = set(trusted)
    if not _links_placed(path if os.path.isabs(path) else os.path.join(os.getcwd(), path), allowed):
        return "is reached through a symbolic link another user placed or could replace"
    here = os.path.dirname(os.path.realpath(path))
    while True:
        try:
            why = untrusted(os.lstat(here), allowed)
        except OSError as err:
            return f"sits in {here}, which cannot be checked ({err.strerror})"
        if why:
            return f"sits in {here}, which {why}"
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def folder_problem(folder: str, trusted: Collection[int], st: os.stat_result | None = None) -> str | None:
    """Why a user outside ``trusted`` could change what ``folder`` holds (:func:`untrusted` of ``st``, its stat
    followed, fstat'ed by a caller that opened it) or put another folder in its place (:func:`swappable`), or
    None: a folder whose files may be believed (a result to stamp, a sweep's cells)."""
    return untrusted(os.stat(folder) if st is None else st, trusted) or swappable(folder, trusted)


def _links_placed(path: str, allowed: Collection[int]) -> bool:
    """Whether every symbolic link the kernel follows to reach ``path`` is owned by ``allowed`` and sits in a folder
    no other user may write, sticky or not: anyone may add a link to ``/tmp`` that points into a folder of their
    own."""
    for _link, st, folder in links_on_the_way(path if os.path.isabs(path) else os.path.join(os.getcwd(), path)):
        try:
            if st.st_uid not in allowed or _others_write(os.lstat(folder)):
                return False
        except OSError:
            return False
    return True


def links_on_the_way(path: str) -> Iterator[tuple[str, os.stat_result, str]]:
    """Each symbolic link the kernel follows to resolve the absolute ``path``, links within a link's target
    included, as (the link, its lstat, the folder holding it); ``..`` is taken from where the walk is, as the
    kernel takes it. The walk ends at a component that does not exist, or after 40 links (the kernel's ELOOP)."""
    parts = path.split("/")
    current, hops = "/", 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        here = os.path.join(current, part)
        try:
            st = os.lstat(here)
        except OSError:
            return
        if not stat.S_ISLNK(st.st_mode):
            current = here
            continue
        yield here, st, current
        hops += 1
        try:
            target = os.readlink(here)
        except OSError:
            return
        if hops > 40:
            return
        parts = target.split("/") + parts
        if target.startswith("/"):
            current = "/"


def _others_write(st: os.stat_result) -> bool:
    """Whether a user other than the owner (and its own group) may write ``st``, sticky or not."""
    return bool(st.st_mode & 0o002) or (bool(st.st_mode & 0o020) and st.st_gid not in (_primary_gid(st.st_uid), 0))


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


def run_by_invoker(uids: tuple[int | None, int | None]) -> bool:
    """Whether a process of (real, effective) ``uids`` runs as the user hoststate runs for (invoking_uid) or root:
    the only processes that may be taken for the benchmark's server or its workers without being named, since no
    other user can start one of theirs (a command line, a port or a process name say nothing of who runs it)."""
    allowed = (invoking_uid()[0], 0)
    return all(uid in allowed for uid in uids)


def status_uids(text: str) -> tuple[int | None, int | None]:
    """(real uid, effective uid) from the text of ``/proc/PID/status``; (None, None) when it has no Uid line."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            ids = line.split()[1:3]
            if len(ids) == 2 and all(i.isdigit() for i in ids):
                return int(ids[0]), int(ids[1])
    return None, None


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
    if _others_write(st) and not sticky:
        return "can be written by other users"
    if stat.S_ISREG(st.st_mode) and st.st_nlink != 1:
        return f"has {st.st_nlink} hard links (another name may be another user's)"
    return None
