"""Sweeps for the results tests: host states made from the seed's two snapshots by changing one subsystem at a
time, and cells written as ``guard --watch --attach`` writes them (the record of hoststate.watch.build_record,
merged by hoststate.watch.attach, its sidecar by hoststate.watch.write_sidecar), bound to the result's content
by hoststate.run.record.stamp as the attach side does it."""

from __future__ import annotations

import copy
import json
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from hoststate.digest import digest
from hoststate.guard import evaluate
from hoststate.run.record import stamp
from hoststate.snapshot import load, to_toml
from hoststate.watch import Sampler, attach, build_record, load_trace, sidecar_path, write_sidecar
from tests.conftest import FIXTURES

SEED = {name: load(str(FIXTURES / "snapshots" / f"seed-{name}.toml")) for name in ("baseline", "experiment")}


def _dsa(snap: dict) -> None:
    snap["dsa"] = copy.deepcopy(SEED["experiment"]["dsa"])


def _vllm(snap: dict) -> None:
    snap["vllm"] = copy.deepcopy(SEED["experiment"]["vllm"])


def _kernel(snap: dict) -> None:
    snap["system"]["kernel"]["release"] = "6.11.0-29-generic"


def _torch(snap: dict) -> None:
    snap["packages"]["torch"] = "2.9.1"


def _thp(snap: dict) -> None:
    snap["system"]["thp"]["enabled"] = "always"


def _dsa_denied(snap: dict) -> None:
    """The DSA collector denied (sysfs unreadable to the user who snapped): no [dsa] table, its reason recorded."""
    snap.pop("dsa", None)
    snap["collectors"]["dsa"] = {"status": "denied", "took_ms": 0.1, "reason": "permission denied"}


#: One host change each, by the subsystem whose findings name it (the explanation's change subsystem).
CHANGES = {"dsa": _dsa, "vllm": _vllm, "system": _kernel, "packages": _torch}
EXTRA = {"thp": _thp, "dsa-denied": _dsa_denied}


def _summary(trace: str | None) -> dict[str, Any]:
    """What the watch's sampler saw: a recorded H200 trace replayed, or no GPU at all (``trace`` None)."""
    source = load_trace(str(FIXTURES / "watch" / trace)) if trace else None
    sampler = Sampler(source, interval=30.0, root=str(FIXTURES / "watch"),
                      gpu_status="ok" if trace else "absent: no NVIDIA driver loaded").start()
    return sampler.stop().summary()


#: The watch of a run on the H200 (its dense matmul trace), and of one where no GPU could be sampled.
WATCHED = _summary("h200-dense-b.json")
NO_GPU = _summary(None)


def host(*changes: str, label: str = "") -> dict[str, Any]:
    """The seed's baseline host with ``changes`` (keys of CHANGES or EXTRA) made, its digest recomputed."""
    snap = copy.deepcopy(SEED["baseline"])
    for name in changes:
        {**CHANGES, **EXTRA}[name](snap)
    snap["hoststate"]["digest"] = digest(snap)
    if label:
        snap["hoststate"]["label"] = label
    return snap


def write_cell(root: pathlib.Path, rel: str, snap: Mapping[str, Any], values: Mapping[str, Any], *,
               baseline: Mapping[str, Any] | None = None, verdict: str = "clean",
               reasons: Iterable[Mapping[str, Any]] = (), indent: int | None = 4, bind: bool = True,
               watched: Mapping[str, Any] | None = None) -> pathlib.Path:
    """A result ``root/rel`` holding ``values`` (as vLLM writes it: one json.dump object, ``vllm bench sweep``
    rewrites it with indent 4), guarded against ``baseline`` (default: the seed's baseline host; any
    invalidating drift accepted, as ``--accept`` would), with its record attached and its sidecar beside it."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": "20261203-120000", "backend": "vllm", "completed": 100, **values},
                               indent=indent))
    guarded = evaluate(dict(baseline or host()), current=snap, accept=["**"])
    record = build_record(guarded, watched if watched is not None else WATCHED, [], verdict, list(reasons), 0, snap,
                          ["vllm", "bench", "serve"])
    record["sidecar"] = os.path.basename(sidecar_path(str(path)))
    if bind:
        record = stamp(record, json.loads(path.read_text()), to_toml(snap))
    attach(str(path), record)
    write_sidecar(sidecar_path(str(path)), record, snap)
    return path
