"""The snapshot file format: mapping -> TOML and back, the schema check, the atomic write.

A snapshot is a plain dict shaped as design.md fixes it; this module is the only place that turns it into bytes
or back. Taking one is hoststate.capture's work; its digest is hoststate.digest's (the verdict side).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator, Mapping
from typing import Any

from hoststate import SCHEMA
from hoststate.errors import InputError
from hoststate.gcpause import paused
from hoststate.io import SNAPSHOT_MAX_BYTES, read_input
from hoststate.paths import format_path

#: The collector sections a snapshot holds, in file order (hoststate.collectors registers one per name).
NAMES: tuple[str, ...] = ("system", "dsa", "accel_config", "gpu", "vllm", "env", "packages")
#: Every status a collector section may carry.
STATUSES = ("ok", "absent", "partial", "error", "denied", "timeout", "skipped")

TOP_ORDER = ("hoststate", "collectors", *NAMES)
#: Tables about the snapshot rather than the host: never part of the digest.
BOOKKEEPING = ("hoststate", "collectors", "guard")


def toml_loads(text: str) -> dict[str, Any]:
    """Parse TOML text, every parse failure as ValueError (tomli's own error is one; nesting deep enough to
    exhaust its recursion is one too). The one TOML reader: tomli's compiled wheels parse 2.3-3.7 times as fast as
    the standard library's tomllib, the same parser in pure Python (docs/architecture.md); tomllib where tomli is
    not installed. Imported here: a snap reads no TOML."""
    try:
        import tomli as toml
    except ImportError:  # pragma: no cover - tomli is a dependency; tomllib is the same parser, slower
        import tomllib as toml
    try:
        return toml.loads(text)
    except RecursionError as err:
        raise ValueError("arrays or inline tables nested too deeply") from err


#: How deep tables and arrays may nest in a snapshot; hoststate writes at most about 8 levels.
MAX_DEPTH = 32


def check_values(data: Mapping[str, Any], source: str) -> None:
    """InputError (one line) on nesting deeper than MAX_DEPTH or a NaN/infinite number anywhere.

    Iterative, so no input can exhaust the stack. NaN and infinity are no host's value: NaN never equals
    itself (identical hosts would never match) and JSON cannot carry either.
    """
    # A stack of the tables and lists being walked, each with its path and an iterator over its items: memory
    # grows with the depth, not with the widest table (a table of 300,000 keys is not copied).
    stack: list[tuple[tuple[str, ...], Iterator[tuple[str, Any]]]] = [((), _items(data))]
    while stack:
        path, items = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        here, node = (*path, item[0]), item[1]
        if len(here) > MAX_DEPTH:
            shown = ".".join(here[:4])
            raise InputError(f"nested deeper than {MAX_DEPTH} levels (under {shown}...)", source)
        if isinstance(node, Mapping | list):
            stack.append((here, _items(node)))
        elif isinstance(node, float) and not math.isfinite(node):
            where = format_path(tuple(p for p in here if not p.startswith("[")))
            raise InputError(f"{where}: {node} is not a value a snapshot can hold (NaN and infinity never compare "
                             "equal and JSON cannot carry them)", source)


def _items(node: Mapping[str, Any] | list[Any]) -> Iterator[tuple[str, Any]]:
    """A table's (key, value) pairs, or a list's (``[i]``, item) pairs."""
    if isinstance(node, Mapping):
        return ((str(k), v) for k, v in node.items())
    return ((f"[{i}]", v) for i, v in enumerate(node))


def finite(value: Any) -> Any:
    """A collected value with NaN/infinite floats as the strings "nan", "inf", "-inf" (what check_values refuses
    must never be written); tables and lists element-wise."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    return value


def jsonable(value: Any) -> Any:
    """A snapshot value as JSON can carry it: datetimes as ISO strings, NaN and infinities (which JSON has no
    token for: ``NaN``/``Infinity`` are not JSON) as the strings "nan", "inf", "-inf", lists and tables
    element-wise."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def to_toml(snap: Mapping[str, Any]) -> str:
    """Deterministic TOML: fixed top-level order, keys sorted below it."""
    import tomli_w

    ordered = {k: _sorted(snap[k]) for k in TOP_ORDER if k in snap}
    ordered.update({k: _sorted(snap[k]) for k in sorted(snap) if k not in ordered})
    return tomli_w.dumps(ordered)


# Fixed paths and the types tools rely on: (path, type, required).
_META_TYPES: tuple[tuple[str, type | tuple[type, ...], bool], ...] = (
    ("schema", int, True),
    ("version", str, True),
    ("taken_at", dt.datetime, True),
    ("hostname", str, False),
    ("label", str, False),
    ("root", str, False),
    ("digest", str, True),
)


def validate(snap: Any, source: str) -> dict[str, Any]:
    """Check what tools rely on; raise InputError with one line naming the first problem."""
    if not isinstance(snap, dict) or not isinstance(snap.get("hoststate"), dict):
        raise InputError("not a hoststate snapshot (no [hoststate] table)", source)
    check_values(snap, source)
    meta = snap["hoststate"]
    schema = meta.get("schema")
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise InputError(f"hoststate.schema must be an integer, found {type(schema).__name__}", source)
    if schema != SCHEMA:
        raise InputError(f"unsupported snapshot schema {schema} (this hoststate reads schema {SCHEMA})", source)
    for key, typ, required in _META_TYPES:
        if key not in meta:
            if required:
                raise InputError(f"hoststate.{key} is missing", source)
            continue
        if isinstance(meta[key], bool) or not isinstance(meta[key], typ):
            raise InputError(f"hoststate.{key} has the wrong type ({type(meta[key]).__name__})", source)
    collectors = snap.get("collectors", {})
    if not isinstance(collectors, dict):
        raise InputError("collectors must be a table", source)
    for name, entry in collectors.items():
        if not isinstance(entry, dict):
            raise InputError(f"collectors.{name} must be a table", source)
        if entry.get("status") not in STATUSES:
            raise InputError(f"collectors.{name}.status {entry.get('status')!r} is not a known status", source)
        if "unreadable" in entry and not isinstance(entry["unreadable"], dict):
            raise InputError(f"collectors.{name}.unreadable must be a table", source)
    for name in NAMES:
        if name in snap and not isinstance(snap[name], dict):
            raise InputError(f"[{name}] must be a table, found {type(snap[name]).__name__}", source)
    return snap


def share_keys(node: Any, like: Any) -> Any:
    """A copy of ``node`` whose tables take their keys from ``like``'s tables at the same paths where they are
    equal: snapshots of one host hold the same keys, and a pair loaded to be compared then holds each key once
    instead of twice (a pair at the input cap holds 396,000 keys a side). Leaves are not copied; neither tree
    is changed, and the copy is whole before ``node`` can be released, so what it frees is one block that the
    comparison reuses. Run on a validated tree (at most MAX_DEPTH levels)."""
    if isinstance(node, dict):
        if not isinstance(like, dict):
            like = {}
        own = {k: k for k in like}  # the other tree's key object for each key (a dict cannot be asked for it)
        return {own.get(k, k): share_keys(v, like.get(k)) for k, v in node.items()}
    if isinstance(node, list):
        others = like if isinstance(like, list) else []
        return [share_keys(v, others[i] if i < len(others) else None) for i, v in enumerate(node)]
    return node


@paused()
def loads(data: bytes | str, source: str = "<snapshot>", like: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parse and validate snapshot text; every defect is an InputError with one line. ``like``: a snapshot
    loaded before it, whose keys this one shares (share_keys)."""
    snap = validate(parse(data, source), source)
    return snap if like is None else share_keys(snap, like)


def parse(data: bytes | str, source: str = "<snapshot>") -> Any:
    """The TOML tree of snapshot text, not yet validated; InputError (one line) for text that is not TOML."""
    if isinstance(data, bytes):
        if not data.strip():
            raise InputError("empty file", source)
        if data.startswith(b"\xef\xbb\xbf"):
            raise InputError("starts with a UTF-8 byte-order mark; save it without BOM", source)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text (byte {err.start})", source) from err
    else:
        text = data
    if not text.strip():
        raise InputError("empty file", source)
    try:
        return toml_loads(text)
    except ValueError as err:
        raise InputError(f"not valid TOML: {err}", source) from err


@paused()
def read_parsed(path: str) -> list[Any] | None:
    """``[path, bytes, tree, times]`` of a snapshot file read and parsed (not validated; its dates and times
    lifted out, see lift_times), or None when either fails: the work of the child a guard forks to read its
    baseline beside the parent's start (hoststate.ahead), whose parent reads the file itself, with its own error,
    when this gives None."""
    try:
        data = read_input(path, max_bytes=SNAPSHOT_MAX_BYTES, what="baseline")
        tree = parse(data, path)
        return [path, data, tree, lift_times(tree)]
    except Exception:  # the parent's own read says what went wrong
        return None


#: The TOML date and time types (tomli's values), by the name lift_times records.
_TIMES = {"datetime": dt.datetime, "date": dt.date, "time": dt.time}


def lift_times(tree: Any) -> list[list[Any]]:
    """Each date or time in a parsed TOML ``tree`` as ``[keys, type name, isoformat]``, replaced in ``tree`` by
    None: ``marshal``, which carries the tree from the child to its parent, writes no datetime."""
    found: list[list[Any]] = []
    stack: list[tuple[list[Any], Any]] = [([], tree)]
    while stack:
        path, node = stack.pop()
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, (dict, list)):
                stack.append(([*path, key], value))
            elif isinstance(value, (dt.date, dt.time)):  # a datetime is a date
                found.append([[*path, key], type(value).__name__, value.isoformat()])
    for keys, _kind, _text in found:
        _at(tree, keys[:-1])[keys[-1]] = None
    return found


def restore_times(tree: Any, times: list[list[Any]]) -> Any:
    """``tree`` with the dates and times lift_times took out put back (``fromisoformat`` reads what ``isoformat``
    wrote, offset and microseconds included)."""
    for keys, kind, text in times:
        _at(tree, keys[:-1])[keys[-1]] = _TIMES[kind].fromisoformat(text)
    return tree


def _at(tree: Any, keys: list[Any]) -> Any:
    for key in keys:
        tree = tree[key]
    return tree


def load(path: str, like: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Read and validate a snapshot file (a regular file of at most io.SNAPSHOT_MAX_BYTES); ``like`` as loads."""
    return loads(read_input(path, max_bytes=SNAPSHOT_MAX_BYTES, what="snapshot"), path, like)


def write(path: str, text: str, *, force: bool = False, protect: tuple[str, ...] = ()) -> None:
    """Write atomically through the one writer (hoststate.output.write_output, which says the rules): never
    replaces an existing file without ``force``, a symlink, a device, or a file in ``protect``."""
    from hoststate.output import write_output

    write_output(path, text, force=force, protect=protect)
