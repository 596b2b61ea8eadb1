"""Check a sweep's results before comparing or resuming it: did every cell run on the same host state?

``vllm bench sweep serve`` reuses any ``run=N.json`` it finds ("Found existing results") and keeps no host facts
in it, which is how a sweep ends up mixing hosts. ``hoststate guard --watch --attach RESULT`` records the host
digest, the run verdict and (in ``RESULT.hoststate.json``) the snapshot taken before the run; this module reads
them back for a whole directory, groups the cells by host digest, and names, for each cell off the reference
host, the invalidating findings that separate it. The library half of ``hoststate results`` (no click here;
hoststate.render.results shows it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import InputError

#: Largest result or sidecar file read.
MAX_BYTES = 256 << 20
SIDECAR_SUFFIX = ".hoststate.json"


@dataclass
class Cell:
    """One result of the sweep: its file, the attached record, and the snapshot before the run when kept."""

    path: str
    record: dict[str, Any] | None
    snapshot: dict[str, Any] | None = None

    @property
    def digest(self) -> str:
        return str(((self.record or {}).get("host") or {}).get("digest", ""))

    @property
    def verdict(self) -> str:
        return str((self.record or {}).get("verdict", ""))


@dataclass
class ResultsReport:
    """Cells grouped by host digest; ``mismatched`` cells with the findings that part them from the reference."""

    reference: str
    reference_from: str
    groups: list[tuple[str, list[str]]]
    mismatched: list[dict[str, Any]]
    unattached: list[str]
    judged: list[dict[str, Any]]
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """Not comparable: cells from other hosts, cells without a record, or cells judged invalid."""
        return bool(self.mismatched or self.unattached or any(j["verdict"] == "invalid" for j in self.judged))

    @property
    def exit_code(self) -> int:
        return 1 if self.refused else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": "refused" if self.refused else "comparable",
            "reference": {"digest": self.reference, "from": self.reference_from},
            "groups": [{"digest": d, "cells": cells} for d, cells in self.groups],
            "mismatched": self.mismatched,
            "unattached": self.unattached,
            "judged": self.judged,
            "skipped": self.skipped,
        }


def _read_json(path: str) -> Any:
    from hoststate.io import read_input

    text = read_input(path, max_bytes=MAX_BYTES, what="result").decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    obj, end = decoder.raw_decode(text.lstrip())
    rest = text.lstrip()[end:].strip()
    while rest:  # --append-result: one object a line; the last one is the latest run
        obj, end = decoder.raw_decode(rest)
        rest = rest[end:].strip()
    return obj


def _files(paths: Iterable[str], skipped: list[dict[str, str]]) -> list[str]:
    found: list[str] = []

    def unlistable(err: OSError) -> None:
        skipped.append({"file": str(err.filename), "error": err.strerror or str(err)})

    for path in paths:
        if os.path.isdir(path):
            for top, dirs, names in os.walk(path, onerror=unlistable):
                dirs.sort()
                found.extend(os.path.join(top, n) for n in sorted(names) if n.endswith(".json"))
        elif os.path.exists(path):
            found.append(path)
        else:
            skipped.append({"file": path, "error": "no such file or directory"})
    return found


def _snapshot_of(sidecar: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    from hoststate.snapshot import loads

    text = sidecar.get("snapshot")
    return loads(text, f"{path} snapshot") if isinstance(text, str) else None


def read_cells(paths: Iterable[str], skipped: list[dict[str, str]]) -> list[Cell]:
    """Every result file under ``paths``: a JSON object (its ``hoststate`` key, or none), paired with its
    ``.hoststate.json`` sidecar; a sidecar without its result is a cell of its own. Lists (summary.json) and
    unreadable files are skipped with a reason."""
    files = _files(paths, skipped)
    sidecars = {f for f in files if f.endswith(SIDECAR_SUFFIX)}
    cells: list[Cell] = []
    paired: set[str] = set()
    for path in files:
        if path in sidecars:
            continue
        try:
            obj = _read_json(path)
        except (InputError, ValueError) as err:
            skipped.append({"file": path, "error": str(err).splitlines()[0][:200]})
            continue
        if not isinstance(obj, dict) or str(obj.get("format", "")).startswith("hoststate-"):
            why = "a hoststate file, not a result" if isinstance(obj, dict) else "not a JSON object (a summary?)"
            skipped.append({"file": path, "error": why})
            continue
        cell = Cell(path, obj.get("hoststate") if isinstance(obj.get("hoststate"), dict) else None)
        side = path[: -len(".json")] + SIDECAR_SUFFIX
        if side in sidecars:
            paired.add(side)
            _add_sidecar(cell, side, skipped)
        cells.append(cell)
    for side in sorted(sidecars - paired):
        cell = Cell(side, None)
        _add_sidecar(cell, side, skipped)
        cells.append(cell)
    return cells


def _add_sidecar(cell: Cell, side: str, skipped: list[dict[str, str]]) -> None:
    try:
        data = _read_json(side)
        if not isinstance(data, dict):
            raise InputError(f"{side}: not a JSON object")
        cell.snapshot = _snapshot_of(data, side)
    except (InputError, ValueError) as err:
        skipped.append({"file": side, "error": str(err).splitlines()[0][:200]})
        return
    if cell.record is None:
        cell.record = {k: v for k, v in data.items() if k != "snapshot"}


def check_results(paths: Iterable[str], *, current: Mapping[str, Any] | None = None,
                  current_name: str = "") -> ResultsReport:
    """Group the cells by host digest against a reference: ``current`` (a snapshot of the host about to resume
    the sweep) when given, else the largest group. InputError when no result file was found."""
    skipped: list[dict[str, str]] = []
    cells = read_cells(paths, skipped)
    if not cells:
        raise InputError("no result file found" + (f" ({skipped[0]['file']}: {skipped[0]['error']})" if skipped
                                                   else ""))
    attached = [c for c in cells if c.record is not None and c.digest]
    unattached = sorted(c.path for c in cells if c not in attached)
    groups: dict[str, list[Cell]] = {}
    for c in attached:
        groups.setdefault(c.digest, []).append(c)
    if current is not None:
        reference = str(current.get("hoststate", {}).get("digest", ""))
        ref_from, ref_snap = current_name or "current host", dict(current)
    elif groups:
        # the largest group; a tie goes to the group holding the first cell by name (the sweep's first run)
        reference = min(groups, key=lambda d: (-len(groups[d]), min(c.path for c in groups[d])))
        ref_from = "majority"
        ref_snap = next((c.snapshot for c in groups[reference] if c.snapshot), None)
    else:
        reference, ref_from, ref_snap = "", "none", None
    order = sorted(groups, key=lambda d: (d != reference, -len(groups[d])))
    mismatched = _mismatched(groups, order, reference, ref_snap)
    judged = [{"cell": c.path, "verdict": c.verdict, "reasons": [r.get("text", "") for r in
                                                                 (c.record or {}).get("reasons", [])]}
              for c in attached if c.verdict in ("degraded", "invalid")]
    return ResultsReport(reference, ref_from, [(d, sorted(c.path for c in groups[d])) for d in order], mismatched,
                         unattached, sorted(judged, key=lambda j: j["cell"]), skipped)


def _mismatched(groups: dict[str, list[Cell]], order: list[str], reference: str,
                ref_snap: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    from hoststate.diff import compare
    from hoststate.guard import _host_state
    from hoststate.render.summary import headline

    out: list[dict[str, Any]] = []
    for digest in order:
        if digest == reference:
            continue
        group = sorted(groups[digest], key=lambda c: c.path)
        snap = next((c.snapshot for c in group if c.snapshot), None)
        findings: list[dict[str, Any]] = []
        summary = "host digest differs (no snapshot kept to name the findings)"
        if snap is not None and ref_snap is not None:
            result = compare(_host_state(ref_snap), _host_state(snap))
            invalidating = [f for f in result.findings if f.severity == "invalidating"]
            findings = [f.to_dict() for f in invalidating]
            summary = headline(invalidating) if invalidating else "host digest differs; no invalidating finding"
        for c in group:
            out.append({"cell": c.path, "digest": digest, "finding": summary, "findings": findings})
    return sorted(out, key=lambda o: o["cell"])
