"""Compare many snapshots: group them by digest, pick a reference group, list each outlier's invalidating drift.

hoststate has no fan-out of its own: the fleet's scheduler (Slurm, Kubernetes, Ray) runs ``hoststate snap`` on
every node and this module reads what comes back. Memory stays bounded for thousands of files: the first pass keeps
one small record per file (path, hostname, label, digest), never the snapshots; the second pass re-reads one
representative file per digest group and diffs it against the reference. Equal digests mean equal invalidating
content, so every member of a group has the same invalidating findings and one diff per group suffices.

The digest is always recomputed from the file's content (``hoststate.digest``); the stored ``hoststate.digest`` is
only compared with it, and a mismatch is reported as a warning (a hand edit, or a file written by another version).
Files that cannot be read or are not valid snapshots are listed under ``skipped`` and never stop the run.
Pure library: no click; hoststate.render.fleet shows the report.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import InputError


@dataclass(frozen=True)
class Member:
    """What the first pass keeps of one snapshot file."""

    path: str
    digest: str
    hostname: str | None
    label: str | None


@dataclass
class FleetReport:
    """The outcome of :func:`run_fleet`; ``to_dict`` is design.md's fleet JSON shape (plus ``warnings``)."""

    reference_digest: str
    reference_from: str  # "majority" or the --reference file
    groups: list[tuple[str, list[str]]]  # (digest, member paths), reference group first, then by size
    outliers: list[dict[str, Any]]  # {"snapshot", "hostname", "label", "findings": [finding dicts]}
    skipped: list[dict[str, str]]  # {"file", "error"}
    warnings: list[dict[str, Any]] = field(default_factory=list)  # {"file": path | None, "message"}
    total: int = 0  # snapshots read

    @property
    def exit_code(self) -> int:
        """0 when every snapshot matches the reference (one group) and none was skipped; 1 when some do not, or
        when a file could not be read or is empty (a gate must not pass a node whose snap failed)."""
        return 1 if self.outliers or self.skipped else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": {"digest": self.reference_digest, "from": self.reference_from},
            "groups": [{"digest": d, "members": list(m)} for d, m in self.groups],
            "outliers": self.outliers,
            "skipped": self.skipped,
            "warnings": self.warnings,
        }


# -- input ---------------------------------------------------------------------------------------------------------


def iter_files(paths: Iterable[str], skipped: list[dict[str, str]]) -> Iterator[str]:
    """Snapshot files in argument order; a directory gives its ``*.toml`` files (recursively, sorted).

    Hidden files and directories (a leading dot, e.g. a writer's temp file) are not read from directories; a file
    named explicitly is always read. A path that does not exist goes to ``skipped``. Each file is yielded once.
    """
    seen: set[str] = set()

    def once(path: str) -> bool:
        key = os.path.normpath(os.path.abspath(path))
        if key in seen:
            return False
        seen.add(key)
        return True

    def unlistable(err: OSError) -> None:
        skipped.append({"file": err.filename, "error": f"cannot list directory: {err.strerror}"})

    for arg in paths:
        if os.path.isdir(arg):
            for top, dirs, files in os.walk(arg, onerror=unlistable):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(".toml") and not name.startswith("."):
                        path = os.path.join(top, name)
                        if once(path):
                            yield path
        elif os.path.lexists(arg):
            if once(arg):
                yield arg
        else:
            skipped.append({"file": arg, "error": "no such file or directory"})


def read_member(path: str) -> tuple[Member, str | None]:
    """Load one file, recompute its digest; return its record and a warning when the stored digest disagrees.

    Raises InputError (with a one-line message) when the file cannot be read or is not a valid snapshot.
    """
    from hoststate.digest import digest
    from hoststate.snapshot import load

    snap = load(path)
    meta = snap["hoststate"]
    computed = digest(snap)
    warning = None
    if meta.get("digest") != computed:
        warning = f"stored digest {meta.get('digest')} differs from content ({computed}); grouped by content"
    hostname = meta.get("hostname")
    label = meta.get("label")
    return Member(path, computed, hostname if isinstance(hostname, str) else None,
                  label if isinstance(label, str) else None), warning


def _error_line(err: BaseException, path: str) -> str:
    text = str(err)
    prefix = f"{path}: "
    if text.startswith(prefix):
        text = text[len(prefix):]
    return text.splitlines()[0] if text else type(err).__name__


#: Below this many files the first pass stays in this process: starting workers costs more than it saves.
_POOL_MIN_FILES = 32
_CHUNK = 16
_Read = tuple[str, "Member | None", "str | None", "str | None"]  # path, record, digest warning, error


def _read_one(path: str) -> _Read:
    """One file as (path, record, warning, None), or (path, None, None, one-line error); never raises."""
    try:
        member, warning = read_member(path)
    except InputError as err:
        return path, None, None, _error_line(err, path)
    except Exception as err:  # a file must never stop the run; the error is its line in "skipped"
        return path, None, None, f"{type(err).__name__}: {_error_line(err, path)}"
    return path, member, warning, None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _read_all(files: Iterator[str], jobs: int | None) -> Iterator[_Read]:
    """Records in file order. Parsing TOML and recomputing the digest dominate the cost (tens of ms for an 8-GPU
    snapshot), so large fleets are read by a process pool; only the small records come back, never snapshots."""
    jobs = _cpus() if jobs is None or jobs < 1 else jobs
    first: list[str] = []
    for path in files:
        first.append(path)
        if len(first) >= _POOL_MIN_FILES:
            break
    if jobs == 1 or len(first) < _POOL_MIN_FILES:
        for path in itertools.chain(first, files):
            yield _read_one(path)
        return
    import concurrent.futures
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    todo = [*first, *files]  # paths only: the records come back in this order
    done = 0
    # forkserver/spawn workers import hoststate afresh: no state of the caller (threads, locks) is inherited.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    try:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method)) as pool:
            for record in pool.map(_read_one, todo, chunksize=_CHUNK):
                done += 1
                yield record
    except (BrokenProcessPool, OSError):
        # workers could not start (a __main__ that cannot be re-imported, no /dev/shm, ...): read the rest here
        for path in todo[done:]:
            yield _read_one(path)


# -- grouping and diff ---------------------------------------------------------------------------------------------


def run_fleet(paths: Iterable[str], *, reference: str | None = None, jobs: int | None = None) -> FleetReport:
    """Group the snapshots under ``paths`` by digest and diff each outlier group against the reference.

    Without ``reference`` the largest group is the reference; a tie goes to the group whose first file sorts first
    (a warning says so). With ``reference`` (a snapshot file) that file's digest is the reference, whether or not
    the file is among ``paths``. ``jobs`` processes read the files (None: one per usable CPU; 1: in this process).
    Raises InputError when no readable snapshot was found, or when the reference file is bad.
    """
    skipped: list[dict[str, str]] = []
    warnings: list[dict[str, Any]] = []
    members: dict[str, list[Member]] = {}
    total = 0
    for path, member, warning, error in _read_all(iter_files(paths, skipped), jobs):
        if member is None:
            skipped.append({"file": path, "error": error or "unreadable"})
            continue
        if warning:
            warnings.append({"file": path, "message": warning})
        members.setdefault(member.digest, []).append(member)
        total += 1

    ref_path: str | None = None
    if reference is not None:
        ref_member, warning = read_member(reference)
        if warning:
            warnings.append({"file": reference, "message": warning})
        ref_digest, ref_from, ref_path = ref_member.digest, reference, reference
    elif not members:
        detail = f" ({len(skipped)} skipped: {skipped[0]['file']}: {skipped[0]['error']})" if skipped else ""
        raise InputError(f"no readable snapshot found{detail}")
    else:
        ref_digest = _majority(members, warnings)
        ref_from = "majority"
    if not members:
        raise InputError("no readable snapshot found" + (f" ({len(skipped)} skipped)" if skipped else ""))

    order = sorted(members, key=lambda d: (d != ref_digest, -len(members[d]), sorted(m.path for m in members[d])[0]))
    groups = [(d, sorted(m.path for m in members[d])) for d in order]
    outliers = _outliers(members, order, ref_digest, ref_path, warnings)
    return FleetReport(ref_digest, ref_from, groups, outliers, skipped, warnings, total)


def _majority(members: dict[str, list[Member]], warnings: list[dict[str, Any]]) -> str:
    size = max(len(m) for m in members.values())
    tied = sorted((min(m.path for m in group), d) for d, group in members.items() if len(group) == size)
    if len(tied) > 1:
        warnings.append({"file": None, "message": (
            f"no strict majority: {len(tied)} groups have {size} snapshot(s) each; the reference is the group whose "
            f"first file sorts first ({tied[0][0]}); pass --reference FILE to choose")})
    return tied[0][1]


def _outliers(members: dict[str, list[Member]], order: list[str], ref_digest: str, ref_path: str | None,
              warnings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One diff per outlier group (its first file against the reference file), shared by its members."""
    from hoststate.diff import compare
    from hoststate.snapshot import load

    outlier_digests = [d for d in order if d != ref_digest]
    if not outlier_digests:
        return []
    if ref_path is None:
        ref_path = min(m.path for m in members[ref_digest])
    reference = load(ref_path)
    out: list[dict[str, Any]] = []
    for d in outlier_digests:
        group = sorted(members[d], key=lambda m: m.path)
        try:
            current = load(group[0].path)
        except InputError as err:  # changed or removed since the first pass
            warnings.append({"file": group[0].path, "message": f"could not re-read for the diff: {err}"})
            findings: list[dict[str, Any]] = []
        else:
            result = compare(reference, current)
            findings = [f.to_dict() for f in result.findings if f.severity == "invalidating"]
            if not findings:
                warnings.append({"file": group[0].path, "message": (
                    "digest differs from the reference but the diff has no invalidating finding (a value within "
                    "its rule's tolerance, or GPUs at other PCI bus ids, which the diff pairs by index)")})
        for m in group:
            out.append({"snapshot": m.path, "hostname": m.hostname, "label": m.label, "findings": findings})
    out.sort(key=lambda o: o["snapshot"])
    return out
