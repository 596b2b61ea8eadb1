"""vLLM releases as data, light enough for any collector: a version's sort key, and the VLLM_* variables of an
environment that a version reads as if they were not set.

hoststate/data/vllm_env_names.json (scripts/vllm_envs.py, from the released wheels' vllm/envs.py) lists, for each
recorded version, the names in ``environment_variables`` and, where the code makes it certain, the string each
reads as when unset. Two cases run vLLM as without the variable:

- a name an older recorded version reads and the given version no longer does (nor the recorded versions on
  either side of it): ``VLLM_USE_V1`` after the V0 engine was removed;
- a value equal to that default string in the given version (and in the recorded versions on either side):
  ``VLLM_USE_DEEP_GEMM=1`` on 0.12.0.

hoststate/data/vllm_env_forms.json (scripts/vllm_envs.py --forms) lists each version's switches: the entries that
turn the value into on or off (``bool(int(v))``, ``v.lower() in ('true', '1')``). Where the versions on either side
read a switch alike and nothing else in vLLM reads it (its default recorded), ``true`` and ``1`` are one setting:
the value is recorded as read (spelled), and one read as the default runs as unset (``VLLM_DISABLE_PYNCCL=0``).

The vLLM collector records a server's such variables apart (``vllm.env_same_as_unset``, with why), and the env
collector those this process passes on (``env.same_as_unset``), rather than among the variables rated by what they
do. A VLLM_* name that no recorded version reads stays where it was: a plugin or a fork may read it
(hoststate/variables.toml). Nothing is said for a version outside the recorded range. This module imports neither
the vLLM collector nor importlib.resources: the env collector runs in the child that reads the host ahead
(hoststate/ahead.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

DATA = "vllm_env_names.json"


def data_path(name: str) -> str:
    """A recorded table of vLLM's releases (hoststate/data), shipped beside the package and read by path as the
    policy's tables are (hoststate/policy.py): no importlib.resources, whose import costs about 8 ms."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", name)


_PATH = data_path(DATA)

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_key(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string such as ``0.11.1rc2.dev5+g1234`` or ``v0.12.0``."""
    m = _VERSION_RE.match(text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@functools.cache
def load_data(name: str) -> Any:
    """The shipped table ``name`` of hoststate/data, parsed once per process."""
    with open(data_path(name), encoding="utf-8") as f:
        return json.load(f)


def recorded_for(tables: Mapping[str, Any], version: str | None) -> tuple[str, Any] | None:
    """(recorded version, its entry) of ``tables`` (by version string) for exactly ``version``'s major.minor.patch,
    or None: another version's entry is never borrowed."""
    key = version_key(version or "")
    if key is not None:
        for recorded, entry in tables.items():
            if version_key(recorded) == key:
                return recorded, entry
    return None


Row = tuple[tuple[int, int, int], str, Mapping[str, str | None]]


@functools.lru_cache(maxsize=1)
def _table() -> list[Row]:
    """(version key, version, {name: default or None}) of each recorded version, oldest first."""
    with open(_PATH, encoding="utf-8") as f:
        names = json.load(f)
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
        elif (read := switch_read(name, value, version)) is not None and (
                read == switch_read(name, str(below[2].get(name)), version)):
            found[name] = (f"{value!r} reads as {below[2][name]!r}, what vLLM {version} reads when it is unset "
                           f"(vllm/envs.py of {where}: its default, read as {_forms()[below[1]][name]}, and no other "
                           f"file of vLLM reads the variable; hoststate/data/{DATA}, {FORMS})")
    return found


#: vllm/envs.py's switches (scripts/vllm_envs.py --forms): for each recorded version, the names whose entry turns the
#: value into on or off, and how, with the value written ``v`` (``bool(int(v))``, ``v.lower() in ('true', '1')``).
FORMS = "vllm_env_forms.json"
_SWITCH = re.compile(r"v(\.strip\(\))?(\.lower\(\))? (?:in \(((?:'[a-z0-9]*'(?:, )?)+)\)|([=!])= '([a-z0-9]*)')")


def _forms() -> dict[str, dict[str, str]]:
    return load_data(FORMS)


def _switch(form: str, value: str) -> bool:
    """Whether ``form`` reads ``value`` as on, as vLLM's Python does; ValueError where it fails (``int('true')``)."""
    if form == "bool(int(v))":
        return bool(int(value))
    m = _SWITCH.fullmatch(form)
    if m is None:
        raise ValueError(f"unknown form {form!r}")
    strip, lower, among, op, one = m.groups()
    value = value.strip() if strip else value
    value = value.lower() if lower else value
    if among is not None:
        return value in re.findall(r"'([a-z0-9]*)'", among)
    return (value == one) == (op == "=")


def switch_read(name: str, value: str, version: str | None) -> str | None:
    """``value`` of the switch ``name`` as ``version`` reads it, spelled ``"1"`` (on) or ``"0"`` (off) (``"true"``
    where only that reads as on), or None: not a switch of that version and the recorded ones on either side alike,
    read elsewhere in vLLM too (no default recorded), or a value it fails on."""
    around = _around(version)
    if around is None:
        return None
    below, above = around
    form = _forms().get(below[1], {}).get(name)
    if form is None or form != _forms().get(above[1], {}).get(name) or None in (below[2].get(name),
                                                                                   above[2].get(name)):
        return None
    try:
        on = _switch(form, value)
        return next(s for s in (("1", "true") if on else ("0", "false")) if _switch(form, s) == on)
    except (ValueError, StopIteration):
        return None


def spelled(env: Mapping[str, str], version: str | None) -> dict[str, tuple[str, str]]:
    """The VLLM_* switches of ``env`` that ``version`` reads as another spelling (``true`` as ``1``): name -> (the
    value as read, why)."""
    around = _around(version)
    if around is None:
        return {}
    where = around[0][1] if around[0] is around[1] else f"{around[0][1]} and {around[1][1]}"
    found = {}
    for name, value in env.items():
        if name.startswith("VLLM_") and isinstance(value, str):
            read = switch_read(name, value, version)
            if read is not None and read != value:
                form = _forms()[around[0][1]][name]
                found[name] = (read, f"{value!r} is {read!r}: vLLM {version} reads it as {form} "
                                     f"(vllm/envs.py of {where}; hoststate/data/{FORMS})")
    return found
