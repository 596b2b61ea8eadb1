"""The VLLM_* variables a server's vLLM version no longer reads.

hoststate/data/vllm_env_names.json lists the names in ``environment_variables`` of each recorded version's
``vllm/envs.py``, read from the released wheels. A name that an older recorded version reads and the server's
version does not (nor the recorded versions on either side of it) was dropped from vLLM: ``VLLM_USE_V1`` after the
V0 engine was removed in 0.11.1. Set or not, such a variable changes nothing in that server, so the collector
records it apart (``vllm.env_unread``) rather than among the variables rated by what they do. A VLLM_* name that
no recorded version reads stays where it was: a plugin or a fork may read it (hoststate/variables.toml).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources

from hoststate.collectors.vllm.versions import version_key

DATA = "vllm_env_names.json"


@functools.lru_cache(maxsize=1)
def _table() -> list[tuple[tuple[int, int, int], str, frozenset[str]]]:
    """(version key, version, names) of each recorded version, oldest first."""
    names = json.loads(resources.files("hoststate").joinpath("data", DATA).read_text(encoding="utf-8"))
    rows = [(version_key(v), v, frozenset(n)) for v, n in names.items()]
    return sorted((k, v, n) for k, v, n in rows if k is not None)


def unread(env: Mapping[str, str], version: str | None) -> dict[str, str]:
    """The VLLM_* names of ``env`` that ``version`` no longer reads, each with why; none for a version outside the
    recorded range (older than the oldest, newer than the newest, or not understood)."""
    key = version_key(version or "")
    rows = _table()
    if key is None or not rows or not rows[0][0] <= key <= rows[-1][0]:
        return {}
    below = max(r for r in rows if r[0] <= key)
    above = min(r for r in rows if r[0] >= key)
    found = {}
    for name in env:
        if not name.startswith("VLLM_") or name in below[2] or name in above[2]:
            continue
        last = [v for k, v, names in rows if k < below[0] and name in names]
        if last:
            around = below[1] if below is above else f"{below[1]} and {above[1]}"
            found[name] = (f"vLLM {version} does not read it: vllm/envs.py of {around} no longer lists it; "
                           f"{last[-1]} is the last recorded version that reads it (hoststate/data/{DATA})")
    return found
