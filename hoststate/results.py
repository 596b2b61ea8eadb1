"""Check a sweep's results before comparing or resuming it: does every cell carry a verified record, and did every
cell run on the host state it was guarded against?

``vllm bench sweep serve`` reuses any ``run=N.json`` it finds ("Found existing results") and keeps no host facts
in it, which is how a sweep ends up mixing hosts. ``hoststate guard --watch --attach RESULT`` merges a record
(``hoststate-run/1``) into the result and writes the snapshot taken before the run beside it
(``RESULT.hoststate.json``). This module reads them back: every file is a cell that either carries a record bound
to its content and its sidecar (the digests below) or refuses the sweep; the reference is the baseline the cells
were guarded against (or the host about to resume the sweep), never the majority. The library half of
``hoststate results`` (no click here; hoststate.render.results shows it); hoststate.explain says what moved
between the host states.

The digests are hoststate.run.record's (the attach side's): the record carries ``result_keys`` and
``result_sha256`` (:func:`content_digest` of those keys of the result, at attach time: what ``vllm bench sweep
serve`` adds afterwards, ``run_number`` and its overrides, is not covered) and ``snapshot_sha256``
(:func:`text_digest` of the sidecar's snapshot text). They bind a record to what it stamps (a record copied onto another
result, a result edited after the run, a sidecar swapped); they are not a signature: whoever can write both files
can recompute them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import InputError
from hoststate.explain import group_label
from hoststate.run.record import (
    RECORD_FORMAT,
    canonical_json,
    content_digest,
    load_objects,
    text_digest,
)

#: Largest result or sidecar file read.
MAX_BYTES = 256 << 20
SIDECAR_SUFFIX = ".hoststate.json"
_SHA = re.compile(r"^sha256:[0-9a-f]{64}$")


def read_json(path: str) -> Any:
    """The last JSON value of a file (an ``--append-result`` file's latest run), read bounded."""
    from hoststate.io import read_input

    data = read_input(path, max_bytes=MAX_BYTES, what="result")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", path) from err
    return load_objects(text, path)[-1]


# -- cells --------------------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One result of the sweep: its file and, once verified, its record and the snapshot taken before its run."""

    path: str
    record: dict[str, Any] = field(default_factory=dict)
    snapshot: dict[str, Any] | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return str(_get(self.record, "host", "digest"))

    @property
    def baseline(self) -> tuple[str, str]:
        """(digest, name) of the baseline guard compared the host with before the run."""
        return str(_get(self.record, "guard", "baseline_digest")), str(_get(self.record, "guard", "baseline"))

    @property
    def verdict(self) -> str:
        return str(self.record.get("verdict", ""))

    @property
    def watched(self) -> bool:
        """The GPUs were sampled: a run stamped ``clean`` by a watch that saw no GPU ("0 samples of 0 GPU(s), gpu
        absent") is as unwatched as one that says so."""
        watch = self.record.get("watch")
        return (self.verdict != "unwatched" and isinstance(watch, dict) and watch.get("gpu_status") == "ok"
                and bool(watch.get("gpus")))


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return "" if data is None else data


class Refusal(Exception):
    """Why one cell carries no verified record (a sentence naming what is wrong, never the path: shown beside it)."""


def _first_line(err: Exception, path: str) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[len(path) + 2:] if text.startswith(path + ": ") else text


def _read_object(path: str, what: str = "") -> dict[str, Any]:
    """The last JSON object of ``path``; Refusal (prefixed by ``what``) when it cannot be read or is none."""
    try:
        obj = read_json(path)
    except InputError as err:
        raise Refusal(what + _first_line(err, path)) from err
    if not isinstance(obj, dict):
        raise Refusal(f"{what}not a JSON object ({type(obj).__name__})")
    return obj


def _check_record(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise Refusal("no hoststate record (run the cell under hoststate guard --watch --attach)")
    if record.get("format") != RECORD_FORMAT:
        raise Refusal(f"record format {str(record.get('format'))[:40]!r} is not {RECORD_FORMAT}")
    for key, value in (("host.digest", _get(record, "host", "digest")),
                       ("guard.baseline_digest", _get(record, "guard", "baseline_digest"))):
        if not isinstance(value, str) or not _SHA.match(value):
            raise Refusal(f"record has no {key}")
    from hoststate.run.judge import VERDICTS

    if record.get("verdict") not in VERDICTS:
        raise Refusal(f"record's verdict {str(record.get('verdict'))[:40]!r} is none of {', '.join(VERDICTS)}")
    for key, value, kind in (("reasons", record.get("reasons", []), list), ("watch", record.get("watch", {}), dict),
                             ("guard.accepted", _get(record, "guard", "accepted") or [], list)):
        if not isinstance(value, kind):
            raise Refusal(f"record's {key} is not a {'list' if kind is list else 'table'}")
    for key in ("result_sha256", "snapshot_sha256"):
        if not isinstance(record.get(key), str) or not _SHA.match(record[key]):
            raise Refusal(f"record not bound to its content (no {key}; attached by an older hoststate): run the "
                          "cell again")
    return record


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if canonical_json(a.get(k)) != canonical_json(b.get(k)))


def verify(path: str, result: dict[str, Any], sidecar_file: str) -> Cell:
    """The cell of ``result`` (read from ``path``) once its record is checked against the result's content and
    against its sidecar ``sidecar_file`` (record copy, snapshot text, host digest recomputed); Refusal otherwise."""
    from hoststate.digest import digest
    from hoststate.snapshot import loads

    record = _check_record(result.get("hoststate"))
    keys = record.get("result_keys")
    stamped = keys if isinstance(keys, list) and all(isinstance(k, str) for k in keys) else None
    if content_digest(result, stamped) != record["result_sha256"]:
        raise Refusal("result changed after its record was attached (its content's sha256 is not the record's)")
    if record.get("sidecar") != os.path.basename(sidecar_file):
        raise Refusal(f"record names sidecar {str(record.get('sidecar'))[:80]!r}, not "
                      f"{os.path.basename(sidecar_file)!r}")
    if not os.path.lexists(sidecar_file):
        raise Refusal(f"its sidecar {os.path.basename(sidecar_file)} is missing")
    side = _read_object(sidecar_file, "its sidecar: ")
    text = side.get("snapshot")
    if not isinstance(text, str):
        raise Refusal("its sidecar holds no snapshot")
    differ = _differing(record, {k: v for k, v in side.items() if k != "snapshot"})
    if differ:
        raise Refusal(f"record differs from its sidecar's copy ({', '.join(differ[:4])})")
    if text_digest(text) != record["snapshot_sha256"]:
        raise Refusal("sidecar snapshot changed after the run (its sha256 is not the record's)")
    try:
        snap = loads(text, "sidecar snapshot")
    except InputError as err:
        raise Refusal(str(err)) from err
    recomputed = digest(snap)
    if recomputed != record["host"]["digest"]:
        from hoststate import __version__

        taken = str(snap.get("hoststate", {}).get("version", ""))
        why = f"taken by hoststate {taken}, this is {__version__}" if taken != __version__ else "edited"
        raise Refusal(f"sidecar snapshot's host digest {recomputed[:19]} is not the record's "
                      f"{record['host']['digest'][:19]} ({why})")
    return Cell(path, record, snap, {k: v for k, v in result.items() if k != "hoststate"})


def _check_writers(path: str, trusted: Collection[int] | None, *, follow: bool = False) -> int | None:
    """The owner of ``path`` when no untrusted user could have written it (hoststate.filetrust); Refusal
    otherwise. Checked before a byte is read, so another user's huge file or FIFO is never opened."""
    from hoststate.filetrust import untrusted

    if trusted is None:
        return None
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as err:
        raise Refusal(f"cannot stat: {err.strerror or err}") from err
    why = untrusted(st, trusted)
    if why:
        raise Refusal(why)
    return st.st_uid


def read_cell(path: str, trusted: Collection[int] | None = None, *, named: bool = False) -> Cell:
    """One result file as a verified cell; Refusal says why it is not one. With ``trusted`` (uids), the result and
    its sidecar must each be one no other user could have written, and the same user's (``named``: the user
    named the result itself, so a link to it is followed)."""
    owner = _check_writers(path, trusted, follow=named)
    result = _read_object(path)
    fmt = result.get("format")
    if isinstance(fmt, str) and fmt.startswith("hoststate-"):
        raise Refusal(f"a hoststate file ({fmt[:40]}), not a result")
    side = sidecar_of(path)
    if trusted is not None and os.path.lexists(side):
        try:
            if _check_writers(side, trusted) != owner:
                raise Refusal("is not owned by the user who owns its result")
        except Refusal as why:
            raise Refusal(f"its sidecar {os.path.basename(side)} {why}") from None
    if not isinstance(result.get("hoststate"), dict) and _is_failure(result):
        raise Refusal(f"a run that failed, not a result: vllm bench sweep recorded {str(result['error_type'])[:60]}: "
                      f"{str(result['error'])[:120]}; it has no numbers: run it again, or --ignore it")
    if not isinstance(result.get("hoststate"), dict) and os.path.isfile(side):
        try:
            why = _read_object(side).get("attach_error")
        except Refusal:
            why = None
        if isinstance(why, str):
            raise Refusal(f"no hoststate record; its sidecar says: {why[:160]}")
    return verify(path, result, side)


def _is_failure(result: Mapping[str, Any]) -> bool:
    """vLLM 0.33's record of a run or a server that failed under ``--continue-on-error`` (sweep/serve.py
    ``run_comb``: ``run=N.failure.json``; ``run_combs``: ``SERVE-<name>-failure.json``): an error, no numbers."""
    return isinstance(result.get("error_type"), str) and "error" in result and "serve_overrides" in result


def sidecar_of(result: str) -> str:
    """``DIR/NAME.hoststate.json`` beside ``DIR/NAME.json``, as the watch names it."""
    return (result[: -len(".json")] if result.endswith(".json") else result) + SIDECAR_SUFFIX


def _ignored(path: str, top: str, globs: Sequence[str]) -> bool:
    rel = os.path.relpath(path, top) if top else path
    return any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(os.path.basename(path), g) for g in globs)


#: Deepest folder below a named one searched for cells (a sweep is 2 deep: experiment, combination).
MAX_FOLDER_DEPTH = 32


def _folder_problem(here: str, top: str, trusted: Collection[int] | None) -> str | None:
    """Why the cells of folder ``here`` (``top`` or a folder below it) cannot be believed: another user could have
    written it (they could add, move or remove cells), or it lies deeper than :data:`MAX_FOLDER_DEPTH`."""
    from hoststate.filetrust import swappable, untrusted

    if here != top and os.path.relpath(here, top).count(os.sep) >= MAX_FOLDER_DEPTH:
        return f"a folder deeper than {MAX_FOLDER_DEPTH} below the sweep's: not searched"
    if trusted is None:
        return None
    try:
        bad = untrusted(os.stat(here) if here == top else os.lstat(here), trusted)
    except OSError as err:
        bad = f"cannot stat: {err.strerror or err}"
    if not bad and here == top and (above := swappable(top, trusted)):
        # the folders above: one another user may write lets them put another folder of ours (an older
        # experiment's) in the named one's place, whose cells would then be reported as this sweep's
        return f"the sweep's folder {above}: another user could put another folder in its place"
    if not bad:
        return None
    return f"the sweep's folder {bad}: another user could add, move or remove its cells" if here == top else \
        f"a folder that {bad}: not searched (another user could add, move or remove cells in it)"


def _walk(top: str, ignore: Sequence[str], refused: list[dict[str, str]], ignored: list[str],
          trusted: Collection[int] | None) -> list[str]:
    """Every ``*.json`` below the directory ``top``; a folder that cannot be listed, a link to a folder (never
    followed) and a folder :func:`_folder_problem` rejects (never entered: another user's folders thousands deep
    are not walked; the files of a rejected ``top`` each refused) are refusals."""
    found: list[str] = []

    def unlistable(err: OSError) -> None:
        refused.append({"cell": str(err.filename), "problem": f"cannot list: {err.strerror or err}"})

    top_problem = _folder_problem(top, top, trusted)
    for here, dirs, names in os.walk(top, onerror=unlistable):
        why = top_problem if here == top else None  # a folder below is entered only once judged
        keep = []
        for name in sorted(dirs):
            full = os.path.join(here, name)
            bad = "a symbolic link to a folder: not followed" if os.path.islink(full) else \
                f"not searched: {why}" if why else _folder_problem(full, top, trusted)
            if bad:
                refused.append({"cell": full, "problem": bad})
            else:
                keep.append(name)
        dirs[:] = keep
        for name in sorted(n for n in names if n.endswith(".json")):
            full = os.path.join(here, name)
            if _ignored(full, top, ignore):
                ignored.append(full)
            elif why:
                refused.append({"cell": full, "problem": why})
            else:
                found.append(full)
    return found


def find_files(paths: Iterable[str], ignore: Sequence[str], refused: list[dict[str, str]],
               ignored: list[str], trusted: Collection[int] | None = None) -> list[str]:
    """Every ``*.json`` under ``paths`` (a named file whatever its name), sorted; a directory that cannot be
    listed and a missing path are refusals, files matching an ``ignore`` glob are set aside in ``ignored``
    (:func:`_walk` says which folders refuse their files)."""
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found += _walk(path, ignore, refused, ignored, trusted)
        elif not os.path.lexists(path):
            refused.append({"cell": path, "problem": "no such file or directory"})
        elif _ignored(path, "", ignore):
            ignored.append(path)
        elif why := _named_file_problem(path, trusted):
            refused.append({"cell": path, "problem": why})
        else:
            found.append(path)
    return found


def _named_file_problem(path: str, trusted: Collection[int] | None) -> str | None:
    """Why a result named on its own cannot be believed where it lies: its folder (where the name leads), or a
    folder above, is one another user may write, so they could have moved another of our cells (another
    combination's, its sidecar with it) onto its name, as in a sweep's folder (:func:`_folder_problem`)."""
    from hoststate.filetrust import folder_problem

    if trusted is None:
        return None
    folder = os.path.dirname(os.path.realpath(path))
    try:
        bad = folder_problem(folder, trusted)
    except OSError as err:
        bad = f"cannot be checked ({err.strerror or err})"
    return f"its folder {bad}: another user could have put another cell in its place" if bad else None


def read_cells(files: Sequence[str], refused: list[dict[str, str]], ignored: list[str] | None = None,
               checked: list[str] | None = None, trusted: Collection[int] | None = None,
               named: Collection[str] = ()) -> list[Cell]:
    """The verified cells of ``files``; every other file (a sidecar without its result included) is a refusal,
    but a sweep's ``summary.json`` that lists exactly its verified cells (``checked``). The sidecar of an
    ``ignored`` result is ignored with it. ``trusted``, ``named``: as :func:`read_cell`; the same file reached by
    two names (a folder and a file in it both named, a hard link) is one cell, read once."""
    names = set(files)
    seen: set[tuple[int, int]] = set()
    left_out = set(ignored or ())
    cells: list[Cell] = []
    summaries: list[str] = []
    for path in files:
        if is_sweep_list(path):
            summaries.append(path)
            continue
        if path.endswith(SIDECAR_SUFFIX):
            result = path[: -len(SIDECAR_SUFFIX)] + ".json"
            if result in left_out and ignored is not None:
                ignored.append(path)
            elif result not in names:
                refused.append({"cell": path, "problem": f"a sidecar without its result {os.path.basename(result)}"})
            continue
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) in seen:
            continue
        try:
            cells.append(read_cell(path, trusted, named=path in named))
        except Refusal as why:  # not counted as read: another name of it (a link refused first) is read on its own
            refused.append({"cell": path, "problem": str(why)})
            continue
        if st is not None:
            seen.add((st.st_dev, st.st_ino))
    for path in summaries:
        try:
            _check_writers(path, trusted, follow=path in named)
            why = _summary_mismatch(path, cells)
        except Refusal as err:
            why = str(err)
        if why:
            refused.append({"cell": path, "problem": why})
        elif checked is not None:
            checked.append(path)
    return cells


#: ``vllm bench sweep serve``'s list of a combination's runs, written beside them (``run_comb``).
SWEEP_SUMMARY = "summary.json"
#: ``vllm bench sweep serve_sla``'s list of every run its search made, in all its iteration folders below
#: (0.11.1-0.12.0 serve_sla.py: ``SLA--<sla>.json`` beside the ``request_rate=N`` folders).
SLA_LIST = re.compile(r"^SLA--.*\.json$")


def is_sweep_list(path: str) -> bool:
    """A file vLLM's sweep writes as a list of its runs: checked against the verified cells, never a cell."""
    name = os.path.basename(path)
    return name == SWEEP_SUMMARY or bool(SLA_LIST.match(name))


def _whole(cell: Cell) -> bytes:
    return canonical_json({**cell.result, "hoststate": cell.record})


def _sla_mismatch(path: str, data: list[Any], cells: Sequence[Cell]) -> str | None:
    """Why an ``SLA--*.json`` is not a list of verified cells below its folder (each entry a whole run, record
    included, as the run's file holds it), or None."""
    top = os.path.dirname(path) + os.sep
    below = {_whole(c) for c in cells if c.path.startswith(top)}
    for i, item in enumerate(data):
        if not isinstance(item, dict) or canonical_json(item) not in below:
            return f"lists a run that is no verified cell beside it (its entry {i + 1})"
    return None


def _summary_mismatch(path: str, cells: Sequence[Cell]) -> str | None:
    """Why a sweep's ``summary.json`` is not the list of the verified cells beside it (each entry the whole
    ``run=N.json`` as vLLM rewrote it, record included), or an ``SLA--*.json`` not one of the verified cells
    below it, or None when it is: then its numbers are the cells'."""
    try:
        data = read_json(path)
    except InputError as err:
        return _first_line(err, path)
    here = {os.path.basename(c.path): c for c in cells if os.path.dirname(c.path) == os.path.dirname(path)}
    if not isinstance(data, list) or not data:
        return "not a vllm bench sweep summary (a non-empty list of its runs)"
    if os.path.basename(path) != SWEEP_SUMMARY:
        return _sla_mismatch(path, data, cells)
    for item in data:
        number = item.get("run_number") if isinstance(item, dict) else None
        cell = here.get(f"run={number}.json") if isinstance(number, int) else None
        if cell is None:
            return f"lists a run (run_number {str(number)[:20]}) with no verified run=N.json beside it"
        own = {k: v for k, v in item.items() if k != "hoststate"}
        if canonical_json(own) != canonical_json(cell.result) or canonical_json(item.get("hoststate")) != \
                canonical_json(cell.record):
            return f"differs from run={number}.json, the cell it lists"
    return None


# -- the sweep ---------------------------------------------------------------------------------------------------


#: ``Group.compared`` for a group whose snapshot the policy finds no invalidating difference with the reference's.
NO_DIFFERENCE = "snapshots: no invalidating difference (the digests differ by values within the policy's tolerance)"


@dataclass
class Group:
    """Cells of one host state (host digest before the run, and whether the GPUs were watched)."""

    digest: str
    watched: bool
    cells: list[Cell]
    findings: list[Any] = field(default_factory=list)  # diff Findings against the reference (invalidating)
    compared: str = ""  # how the findings were found: "snapshots", "accepted", or why none could be

    @property
    def key(self) -> tuple[str, bool]:
        return self.digest, self.watched

    def comparable(self, reference: str) -> bool:
        """On the reference's host state: its digest, or snapshots the policy finds no invalidating difference
        between (the digest covers the raw values of invalidating paths; the diff also weighs tolerances,
        floors and what a value did: a KV cache 0.5 % larger after a restart is no other host)."""
        return self.digest == reference or self.compared == NO_DIFFERENCE

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.cells]


@dataclass
class Reference:
    """What the cells are compared with: the baseline they were guarded against, or ``--current``."""

    digest: str
    source: str  # "baseline", "current", "ambiguous" (cells guarded against several baselines), "none"
    names: list[str]
    snapshot: dict[str, Any] | None = None
    baselines: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ResultsReport:
    """Verified cells grouped by host state against a reference; everything that refuses the sweep, named."""

    reference: Reference
    groups: list[Group]
    refused_cells: list[dict[str, str]]
    ignored: list[str]
    judged: list[dict[str, Any]]
    explanation: dict[str, Any] | None = None
    #: vllm bench sweep summaries found to list exactly their verified cells.
    summaries: list[str] = field(default_factory=list)

    def group_of(self, key: tuple[str, bool]) -> Group | None:
        return next((g for g in self.groups if g.key == key), None)

    @property
    def mismatched(self) -> list[Group]:
        """Groups off the reference: another host state, or the same one unwatched."""
        return [g for g in self.groups if not (g.watched and g.comparable(self.reference.digest))]

    @property
    def reasons(self) -> list[str]:
        """Why the sweep is refused, most important first; empty when comparable."""
        out = []
        if self.reference.source == "ambiguous":
            out.append(f"cells guarded against {len(self.reference.baselines)} baselines")
        if any(not g.comparable(self.reference.digest) for g in self.mismatched):
            out.append("results from hosts that do not match")
        if any(not g.watched for g in self.groups):
            out.append("cells not watched")
        if self.refused_cells:
            out.append(f"{len(self.refused_cells)} cell(s) without a verified record")
        if any(j["verdict"] == "invalid" for j in self.judged):
            out.append("runs judged invalid")
        return out

    @property
    def refused(self) -> bool:
        return bool(self.reasons)

    @property
    def exit_code(self) -> int:
        return 1 if self.refused else 0

    def to_dict(self, base: str = "") -> dict[str, Any]:
        """docs/schemas/results.schema.json; cells named relative to ``base``."""
        return _to_dict(self, base)


def _group(cells: Sequence[Cell]) -> list[Group]:
    groups: dict[tuple[str, bool], Group] = {}
    for c in sorted(cells, key=lambda c: c.path):
        groups.setdefault((c.digest, c.watched), Group(c.digest, c.watched, [])).cells.append(c)
    return list(groups.values())


def choose_reference(cells: Sequence[Cell], current: Mapping[str, Any] | None, current_name: str) -> Reference:
    """``current`` (its digest recomputed) when given; else the one baseline every cell was guarded against.
    Cells guarded against several baselines have no reference: nothing is chosen for the user."""
    from hoststate.digest import digest

    if current is not None:
        return Reference(digest(current), "current", [current_name or "current host"], dict(current))
    baselines: dict[str, dict[str, Any]] = {}
    for c in cells:
        d, name = c.baseline
        entry = baselines.setdefault(d, {"digest": d, "names": [], "cells": 0})
        entry["cells"] += 1
        if name not in entry["names"]:
            entry["names"].append(name)
    if not baselines:
        return Reference("", "none", [])
    if len(baselines) > 1:
        ordered = sorted(baselines.values(), key=lambda b: (-b["cells"], b["digest"]))
        return Reference("", "ambiguous", [], None, ordered)
    [only] = baselines.values()
    snap = next((c.snapshot for c in sorted(cells, key=lambda c: c.path) if c.digest == only["digest"]), None)
    return Reference(only["digest"], "baseline", only["names"], snap, [only])


def _host_state(snap: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snap.items() if k != "guard"}


def separating_findings(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[Any]:
    """The invalidating findings between two snapshots under the default policy (what makes their digests
    differ), most important first; a value unreadable alike on both sides did not differ and is left out."""
    from hoststate.diff import compare
    from hoststate.render.findings import by_importance

    result = compare(_host_state(reference), _host_state(other))
    kept = [f for f in result.findings if f.severity == "invalidating"
            and not (f.change in ("unreadable", "coverage") and f.old == f.new)]
    return by_importance(kept)


def _accepted(group: Group) -> list[Any]:
    """The invalidating findings guard accepted for the group's first cell: its drift from the baseline (what
    names the group when no cell ran on the baseline). Entries that are not findings are left out."""
    from hoststate.diff import Finding
    from hoststate.render.findings import by_importance

    out = []
    for item in _get(group.cells[0].record, "guard", "accepted") or []:
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            out.append(Finding(item["path"], str(item.get("change", "changed")), item.get("old"), item.get("new"),
                               "invalidating", str(item.get("rule", "")), str(item.get("reason", ""))))
    return by_importance(out)


def _compare_groups(groups: Sequence[Group], ref: Reference) -> None:
    for g in groups:
        if g.digest == ref.digest:
            g.compared = "same host state"
            continue
        snap = next((c.snapshot for c in g.cells if c.snapshot), None)
        if ref.snapshot is not None and snap is not None:
            g.findings = separating_findings(ref.snapshot, snap)
            g.compared = "snapshots" if g.findings else NO_DIFFERENCE
        elif ref.source == "baseline":
            g.findings, g.compared = _accepted(g), "accepted"
        else:
            g.compared = "no reference to compare with"


def check_results(paths: Iterable[str], *, current: Mapping[str, Any] | None = None, current_name: str = "",
                  ignore: Sequence[str] = (), metrics: Sequence[str] = ()) -> ResultsReport:
    """Verify every cell under ``paths``, group the verified ones by host state and compare each group with the
    reference (``current``, else the cells' baseline); with ``metrics``, explain what moved (hoststate.explain).
    InputError when no file was found, or when no verified cell has one of ``metrics``."""
    from hoststate.filetrust import trusted_uids

    paths = list(paths)
    trusted = trusted_uids(*paths)
    refused: list[dict[str, str]] = []
    ignored: list[str] = []
    files = find_files(paths, ignore, refused, ignored, trusted)
    if not files and not refused:
        raise InputError("no result file found" + (f" ({len(ignored)} ignored)" if ignored else ""))
    checked: list[str] = []
    named = {p for p in paths if not os.path.isdir(p)}
    cells = read_cells(files, refused, ignored, checked, trusted, named)
    reference = choose_reference(cells, current, current_name)
    groups = _group(cells)
    groups.sort(key=lambda g: (g.key != (reference.digest, True), -len(g.cells), g.paths[0]))
    _compare_groups(groups, reference)
    judged = [{"cell": c.path, "verdict": c.verdict, "reasons": [str(r.get("text", "")) for r in
                                                                 c.record.get("reasons", []) if isinstance(r, dict)]}
              for c in cells if c.verdict in ("degraded", "invalid", "unwatched")]
    report = ResultsReport(reference, groups, sorted(refused, key=lambda r: r["cell"]), sorted(ignored),
                           sorted(judged, key=lambda j: j["cell"]), summaries=sorted(checked))
    if metrics and cells:  # without a verified cell the refusals say it all
        from hoststate.explain import explain

        report.explanation = explain(report, metrics)
    return report


# -- output -------------------------------------------------------------------------------------------------------


def _rel(path: str, base: str) -> str:
    return os.path.relpath(path, base) if base else path


def _reference_dict(ref: Reference) -> dict[str, Any]:
    return {"digest": ref.digest, "from": ref.source, "names": ref.names, "baselines": ref.baselines}


def _to_dict(report: ResultsReport, base: str) -> dict[str, Any]:
    from hoststate.render.summary import summarize

    groups = []
    for i, g in enumerate(report.groups):
        groups.append({
            "label": group_label(i), "digest": g.digest, "watched": g.watched,
            "reference": g.key == (report.reference.digest, True),
            "cells": [_rel(p, base) for p in g.paths], "compared": g.compared,
            "summary": [s.to_dict() for s in summarize(g.findings)],
            "findings": [f.to_dict() for f in g.findings],
        })
    out = {
        "format": "hoststate-results/1",
        "verdict": "refused" if report.refused else "comparable",
        "reasons": report.reasons,
        "reference": _reference_dict(report.reference),
        "groups": groups,
        "refused": [{"cell": _rel(r["cell"], base), "problem": r["problem"]} for r in report.refused_cells],
        "ignored": [_rel(p, base) for p in report.ignored],
        "summaries": [_rel(p, base) for p in report.summaries],
        "judged": [{**j, "cell": _rel(j["cell"], base)} for j in report.judged],
    }
    if report.explanation is not None:
        out["explanation"] = report.explanation
    return out
