"""The VLLM_* variables of a server that its vLLM version reads as if they were not set.

hoststate/data/vllm_env_names.json (scripts/vllm_envs.py, from the released wheels' vllm/envs.py) lists, for each
recorded version, the names in ``environment_variables`` and, where the code makes it certain, the string each
reads as when unset. Two cases run the server as without the variable:

- a name an older recorded version reads and the server's version no longer does (nor the recorded versions on
  either side of it): ``VLLM_USE_V1`` after the V0 engine was removed;
- a value equal to that default string in the server's version (and in the recorded versions on either side):
  ``VLLM_USE_DEEP_GEMM=1`` on 0.12.0.

The collector records such variables apart (``vllm.env_same_as_unset``, with why) rather than among the variables
rated by what they do. A VLLM_* name that no recorded version reads stays where it was: a plugin or a fork may read
it (hoststate/variables.toml). Nothing is said for a version outside the recorded range.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources

from hoststate.collectors.vllm.versions import version_key

DATA = "vllm_env_names.json"

Row = tuple[tuple[int, int, int], str, Mapping[str, str | None]]


@functools.lru_cache(maxsize=1)
def _table() -> list[Row]:
    """(version key, version, {name: default or None}) of each recorded version, oldest first."""
    names = json.loads(resources.files("hoststate").joinpath("data", DATA).read_text(encoding="utf-8"))
    rows = [(version_key(v), v, n) for v, n in names.items()]
    return sorted((k, v, n) for k, v, n in rows if k is not None)


def _around(version: str | None) -> tuple[Row, Row] | None:
    """The recorded rows at or below and at or above ``version`` (one row twice for a recorded one)."""
    key = version_key(version or "")
    rows = _table()
    if key is None or not rows or not rows[0][0] <= key <= rows[-1][0]:
        return None
    return max(r for r in rows if r[0] <= key), min(r for r in rows if r[0] >= key)


def same_as_unset(env: Mapping[str, str], version: str | None) -> dict[str, str]:
    """The VLLM_* names of ``env`` that ``version`` reads as if unset, each with why."""
    around = _around(version)
    if around is None:
        return {}
    below, above = around
    where = below[1] if below is above else f"{below[1]} and {above[1]}"
    found = {}
    for name, value in env.items():
        if not name.startswith("VLLM_"):
            continue
        if name not in below[2] and name not in above[2]:
            last = [v for k, v, names in _table() if k < below[0] and name in names]
            if last:
                found[name] = (f"vLLM {version} does not read it: vllm/envs.py of {where} no longer lists it; "
                               f"{last[-1]} is the last recorded version that reads it (hoststate/data/{DATA})")
        elif below[2].get(name) is not None and below[2].get(name) == above[2].get(name) == value:
            found[name] = (f"{value!r} is what vLLM {version} reads when it is unset (vllm/envs.py of {where}: "
                           f"its default, and no other file of vLLM reads the variable; hoststate/data/{DATA})")
    return found
