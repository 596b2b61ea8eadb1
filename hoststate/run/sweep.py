"""A ``vllm bench sweep serve`` cell guarded on its own: where the sweep puts the cell's result, and whether the
sweep's earlier cells ran on this host state.

``vllm bench sweep serve`` (vllm/benchmarks/sweep/serve.py, ``run_benchmark``) appends ``--save-result
--result-dir DIR --result-filename run=N.json`` to its ``--bench-cmd`` and reuses any ``run=N.json`` it finds
("Found existing results"), so a resumed sweep mixes cells from before and after a host change unless each new
cell is refused when its earlier cells ran on another host state. ``guard --watch --attach-from-argv`` reads the
result path from the command as ``vllm bench serve`` does and refuses such a cell before it starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hoststate.errors import HoststateError
from hoststate.policy import Policy

#: Sidecars read from one sweep at most (a sweep of more cells than this is refused, never half-checked).
MAX_CELLS = 4096


def _last_value(argv: Sequence[str], option: str) -> str | None:
    """The last value given to ``option`` (``--opt V`` or ``--opt=V``), as argparse keeps the last one."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == option and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(option + "="):
            found = arg[len(option) + 1:]
    return found


def result_from_argv(argv: Sequence[str]) -> str | None:
    """The file a ``vllm bench serve`` command line writes its result to: ``--result-filename`` inside
    ``--result-dir`` (vllm/benchmarks/serve.py joins them); None when the command names no file (vLLM then makes
    up a name from the time of day, which cannot be known before the run)."""
    name = _last_value(argv, "--result-filename")
    if not name:
        return None
    folder = _last_value(argv, "--result-dir")
    return os.path.join(folder, name) if folder else name


#: How vllm bench sweep names a combination's folder inside its experiment: ``SERVE-``/``BENCH-`` for its serve and
#: bench overrides (serve.py ``_get_comb_base_path``), ``WL-`` for a workload value alone (0.33's serve_workload.py,
#: ``extra_parts``); without any override the runs lie in the experiment folder itself.
COMBINATION_PREFIXES = ("SERVE-", "BENCH-", "WL-")
#: ``vllm bench sweep serve_sla`` (0.11.1-0.12.0, serve_sla.py ``_get_sla_iter_path``) puts each value it tries in
#: a folder ``request_rate=N`` or ``max_concurrency=N`` below the combination's (or the experiment's).
SLA_ITERATION = re.compile(r"^(request_rate|max_concurrency)=[^/]+$")


def _sweep_level(name: str) -> bool:
    """A folder vLLM's sweep makes below its experiment folder (a combination's, an SLA iteration's)."""
    return name.startswith(COMBINATION_PREFIXES) or bool(SLA_ITERATION.match(name))


def sweep_levels(result: str) -> list[str]:
    """The names of the folders vLLM's sweep made for a result below its experiment folder, outermost first (at
    most two: ``SERVE--a-BENCH--b/request_rate=8/run=0.json`` gives both; a result in the experiment folder none).
    What the cell ran, as far as its path says."""
    names: list[str] = []
    folder = os.path.dirname(result)
    for _ in range(2):
        name = os.path.basename(folder)
        if not _sweep_level(name):
            break
        names.insert(0, name)
        folder = os.path.dirname(folder)
    return names


def experiment_of(result: str) -> Path:
    """The sweep's experiment folder: above the result's folder and the combination and SLA iteration folders
    vLLM made for it (:func:`sweep_levels`)."""
    folder = Path(result).resolve().parent
    for _ in sweep_levels(str(Path(result).resolve())):
        folder = folder.parent
    return folder


def _sweep_folders(experiment: Path) -> list[Path]:
    """The experiment folder and the folders vLLM's sweep makes below it, two levels at most (links never
    followed: a link there is another folder than the sweep's)."""
    found, level = [experiment], [experiment]
    for _ in range(2):
        level = [d for parent in level for d in parent.iterdir()
                 if _sweep_level(d.name) and not d.is_symlink() and d.is_dir()]
        found += level
    return found


def _sidecars(result: str, problems: list[str]) -> list[Path]:
    """The sidecars of the sweep's other cells: in the experiment folder and its combinations' folders. Only
    this user's (or root's) regular files in folders no other user can write count (hoststate.filetrust): another
    user's sidecar dropped into a shared experiment folder is no earlier cell (``hoststate results`` names it),
    and a folder another user can write, where they could have removed a cell, goes into ``problems``."""
    from hoststate.filetrust import folder_problem, untrusted
    from hoststate.output import check_parent
    from hoststate.run.record import sidecar_path

    try:
        check_parent(result)  # the folder reached through another user's link is another folder than it says
    except HoststateError as err:
        problems.append(str(err))
        return []
    trusted = (os.geteuid(), 0)
    experiment = experiment_of(result)
    if not experiment.is_dir():
        return []  # the sweep's first cell: no earlier one
    own = Path(sidecar_path(str(Path(result).resolve())))
    found: set[Path] = set()
    try:
        folders = _sweep_folders(experiment)
    except OSError as err:
        problems.append(f"{experiment}: cannot be listed ({err.strerror})")
        return []
    for folder in folders:
        try:
            why = folder_problem(str(folder), trusted) if folder == experiment else untrusted(folder.lstat(), trusted)
        except OSError as err:
            why = f"cannot be read ({err.strerror})"
        if why:
            name = os.path.relpath(folder, experiment) if folder != experiment else str(folder)
            problems.append(f"{name}: the folder {why}: its earlier cells cannot be checked")
            continue
        for path in folder.glob("*.hoststate.json"):
            try:
                mine = path != own and untrusted(path.lstat(), trusted) is None
            except OSError:
                mine = False
            if mine:
                found.add(path)
        if len(found) > MAX_CELLS:
            raise HoststateError(f"{experiment}: more than {MAX_CELLS} cells; not checked")
    return sorted(found)


def earlier_conflicts(result: str, current: Mapping[str, Any], policy: Policy) -> list[str]:
    """One line per earlier cell of the sweep whose host state is not comparable with ``current`` (an
    invalidating finding between its sidecar's snapshot and this host), or whose sidecar cannot be read: a cell
    that cannot be checked is not taken as comparable. [] when every earlier cell ran on this host state.
    ``hoststate results`` on the experiment folder explains each difference."""
    from hoststate.diff import compare
    from hoststate.digest import digest as digest_of
    from hoststate.render.findings import importance
    from hoststate.run.guard import host_state
    from hoststate.run.record import read_sidecar

    here = str(current.get("hoststate", {}).get("digest", ""))
    seen: dict[str, str | None] = {here: None}  # host digest -> why it is not comparable (None: it is)
    lines: list[str] = []
    for path in _sidecars(result, lines):
        name = os.path.relpath(path, experiment_of(result))
        try:
            _record, snapshot = read_sidecar(str(path))
        except HoststateError as err:
            lines.append(f"{name}: cannot be read ({err})")
            continue
        digest = digest_of(snapshot)  # the snapshot's own, never what its record claims
        if digest not in seen:
            refused = [f for f in compare(host_state(snapshot), host_state(current), policy).findings
                       if f.severity == "invalidating"]
            top = min(refused, key=importance) if refused else None
            seen[digest] = f"another host state ({len(refused)} invalidating, first {top.path})" if top else None
        if seen[digest]:
            lines.append(f"{name}: {seen[digest]}")
    return lines
