"""Every format a guarded run writes: the ``[guard]`` table and its ``[guard.watch]``, the ``hoststate-run/1``
record merged into a result, and the ``RESULT.hoststate.json`` sidecar; plus the variables the command is given.

Pure builders and atomic writers; the run flow (hoststate.run.flow) is their only caller besides the faces.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from hoststate.diff import Finding
from hoststate.errors import InputError
from hoststate.run.guard import ALLOW_UNREADABLE, GUARD_TABLE, Acceptance, GuardResult

RECORD_FORMAT = "hoststate-run/1"


def _toml_value(value: Any) -> Any:
    """A finding's value as TOML can hold it (no null; odd types as their shown text)."""
    import tomli_w

    try:
        tomli_w.dumps({"v": value})
    except (TypeError, ValueError):
        from hoststate.render.text import show_value

        return show_value(value)
    return value


def _finding_record(finding: Finding, pattern: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"path": finding.path, "change": finding.change}
    if finding.old is not None:
        record["old"] = _toml_value(finding.old)
    if finding.new is not None:
        record["new"] = _toml_value(finding.new)
    record["rule"] = finding.rule
    record["reason"] = finding.reason
    if pattern:
        from hoststate.redact import redact_text

        record["accepted_by"] = redact_text(pattern)
    return record


def guard_table(result: GuardResult, *, command: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``[guard]`` table a guarded run's saved snapshot carries (see docs/guard.md)."""
    table: dict[str, Any] = {
        "baseline": os.path.abspath(result.baseline) if result.baseline != "<baseline>" else result.baseline,
        "baseline_digest": result.baseline_digest,
    }
    if result.baseline_sha256:
        table["baseline_sha256"] = result.baseline_sha256
    table["verdict"] = result.verdict
    table["counts"] = {k: int(v) for k, v in result.diff.counts.items()}
    if result.policy_files:
        table["policy"] = [os.path.abspath(p) for p in result.policy_files]
    from hoststate.redact import redact_argv, redact_text

    if result.accept:
        table["accept"] = [redact_text(p) for p in result.accept]
    if result.allow_unreadable:
        table["allow_unreadable"] = True
    if command:
        table["command"] = redact_argv(list(command))
    matcher = Acceptance(result.accept)
    table["accepted"] = [_finding_record(f, matcher.match(f.path) or ALLOW_UNREADABLE) for f in result.accepted]
    if result.refused:
        table["refused"] = [_finding_record(f) for f in result.refused]
    return table


def with_guard_table(result: GuardResult, *, command: Sequence[str] | None = None) -> dict[str, Any]:
    """The current snapshot with its ``[guard]`` table, ready for hoststate.snapshot.to_toml."""
    snap = dict(result.current)
    snap[GUARD_TABLE] = guard_table(result, command=command)
    return snap


def command_env(result: GuardResult, *, saved: str | None = None,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The command's environment: ``base`` (os.environ) plus HOSTSTATE_* variables saying what guard decided.

    A harness can label its results with them (``non-comparable``) without parsing guard's stderr. The env collector
    does not record HOSTSTATE_* variables, so they never show up as drift.
    """
    env = dict(os.environ if base is None else base)
    env["HOSTSTATE_GUARD_VERDICT"] = result.verdict
    env["HOSTSTATE_BASELINE_DIGEST"] = result.baseline_digest
    env["HOSTSTATE_CURRENT_DIGEST"] = str(result.current.get("hoststate", {}).get("digest", ""))
    env["HOSTSTATE_ACCEPTED"] = str(len(result.accepted))
    if saved:
        env["HOSTSTATE_CURRENT"] = os.path.abspath(saved)
    else:
        env.pop("HOSTSTATE_CURRENT", None)
    return env


def watch_table(verdict: str, reasons: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> dict[str, Any]:
    """``[guard.watch]`` of a watched run's saved snapshot: a later ``--watch`` against it judges by these metrics
    (hoststate.run.judge.baseline_metrics)."""
    return {"verdict": verdict, "reasons": [r["text"] for r in reasons], "metrics": dict(summary["metrics"]),
            "seconds": summary["seconds"]}


def metadata_env(guard_result: Any, sidecar: str | None) -> dict[str, str]:
    """Variables for the command: ``HOSTSTATE_METADATA`` is ready for ``vllm bench serve --metadata``."""
    digest = str(guard_result.current.get("hoststate", {}).get("digest", ""))
    env = {
        "HOSTSTATE_WATCH": "1",
        "HOSTSTATE_METADATA": " ".join([f"hoststate_guard_verdict={guard_result.verdict}",
                                        f"hoststate_baseline_digest={guard_result.baseline_digest}",
                                        f"hoststate_current_digest={digest}"]),
    }
    if sidecar:
        env["HOSTSTATE_SIDECAR"] = os.path.abspath(sidecar)
    return env


def sidecar_path(result: str) -> str:
    """``DIR/NAME.hoststate.json`` beside a result ``DIR/NAME.json`` (``run=3.json`` -> ``run=3.hoststate.json``)."""
    stem = result[: -len(".json")] if result.endswith(".json") else result
    return stem + ".hoststate.json"


def build_record(guard_result: Any, summary: Mapping[str, Any], drift: Sequence[Mapping[str, Any]],
                 verdict: str, reasons: Sequence[Mapping[str, Any]], returncode: int,
                 after: Mapping[str, Any] | None, command: Sequence[str] = ()) -> dict[str, Any]:
    """The ``hoststate`` object attached to a result (docs/watch.md): JSON-ready, secrets redacted."""
    from hoststate.redact import redact_argv
    from hoststate.snapshot import jsonable

    meta = guard_result.current.get("hoststate", {})
    return jsonable({
        "format": RECORD_FORMAT,
        "verdict": verdict,
        "reasons": list(reasons),
        "command_status": returncode,
        "command": redact_argv(list(command)),
        "host": {"hostname": meta.get("hostname", ""), "digest": meta.get("digest", ""),
                 "digest_after": (after or {}).get("hoststate", {}).get("digest", "")},
        "guard": {"verdict": guard_result.verdict, "baseline": str(guard_result.baseline),
                  "baseline_digest": guard_result.baseline_digest,
                  "accepted": [f.to_dict() for f in guard_result.accepted]},
        "drift": list(drift),
        "watch": dict(summary),
    })


def dump(obj: Any, indent: int | None) -> str:
    """JSON as every run file is written (NaN kept: a counter NVML could not read stays visible)."""
    return json.dumps(obj, indent=indent, allow_nan=True) + ("\n" if indent else "")


#: The largest result file attached to (a --save-detailed result with per-request arrays is tens of MiB).
RESULT_MAX_BYTES = 256 << 20
#: Deepest JSON nesting read back: a vLLM result is 3 levels deep; thousands would exhaust the parser's stack.
MAX_DEPTH = 100


def _canonical(value: Any) -> Any:
    """Numbers as floats (``10`` and ``10.0`` are one value: ``vllm bench sweep`` rewrites a result with its
    overrides' own spelling of a number) when the float is the same number, containers element by element."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        # exactly the same number only: 2**53 + 1 is not 2**53, and an int beyond a float's range stays an int
        try:
            return float(value) if float(value) == value else value
        except OverflowError:
            return value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return str(value)


def canonical_json(obj: Any) -> bytes:
    """The one byte form digests are taken over: sorted keys, no spaces, ASCII escapes, numbers as floats,
    NaN/Infinity as Python's json writes them (vLLM's results may hold them)."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True).encode("ascii")


def content_digest(result: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """``sha256:`` of a result's own content: the ``keys`` given (the record's ``result_keys``), by default every
    key but ``hoststate``; a key missing from ``result`` is digested as missing, so taking one away shows."""
    wanted = sorted(keys) if keys is not None else sorted(k for k in result if k != "hoststate")
    own = {"keys": {k: result[k] for k in wanted if k in result}, "missing": [k for k in wanted if k not in result]}
    import hashlib  # here: OpenSSL's, for results of megabytes, loaded only where a result is stamped or read

    return "sha256:" + hashlib.sha256(canonical_json(own if own["missing"] else own["keys"])).hexdigest()


def text_digest(text: str) -> str:
    """sha256 of a text's UTF-8 bytes: the sidecar's snapshot text hashes as the file ``snap -o`` writes."""
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def file_digest(path: str, *, max_bytes: int = RESULT_MAX_BYTES) -> str:
    """sha256 of a regular file's bytes (as guard's ``baseline_sha256``); InputError when it cannot be read."""
    import hashlib

    from hoststate.io import read_input

    return "sha256:" + hashlib.sha256(read_input(path, max_bytes=max_bytes, what="file")).hexdigest()


def stamp(record: Mapping[str, Any], result: Mapping[str, Any], snapshot_text: str) -> dict[str, Any]:
    """``record`` bound to the result object it is merged into and to the sidecar's snapshot text."""
    keys = sorted(k for k in result if k != "hoststate")
    return {**record, "result_keys": keys, "result_sha256": content_digest(result, keys),
            "snapshot_sha256": text_digest(snapshot_text)}


#: A JSON string (escapes included) or one bracket: brackets inside strings are never counted.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of ``text`` (scanned, not parsed), at most ``limit + 1``: the parser recurses once per
    level, so a file thousands deep is refused here, before it can exhaust the stack."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def load_objects(text: str, source: str, *, max_depth: int = MAX_DEPTH) -> list[Any]:
    """Every JSON value of ``text``: one (``--save-result``) or one a line (``--append-result``). InputError, one
    line, when it is not JSON or nests deeper than ``max_depth``."""
    deepest = json_depth(text, max_depth)
    if deepest > max_depth:
        raise InputError(f"JSON nested deeper than {max_depth} levels", source)
    decoder = json.JSONDecoder()
    objects: list[Any] = []
    pos, end = 0, len(text.rstrip())
    try:
        while pos < end:
            while text[pos].isspace():
                pos += 1
            obj, pos = decoder.raw_decode(text, pos)
            objects.append(obj)
    except (ValueError, RecursionError) as err:
        raise InputError(f"not JSON ({str(err).splitlines()[0][:120]})", source) from err
    if not objects:
        raise InputError("empty file", source)
    return objects


def file_state(path: str) -> tuple[int, ...] | None:
    """(device, inode, size, mtime, ctime) of the regular file ``path`` (a link is not followed), or None: taken
    before the command and after it, equal only when the command did not write the file (any write moves mtime
    and ctime). Anything but a regular file is None: the attach refuses it for what it is."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path`` itself (not followed), or None: taken when the command exits, so the attach
    can tell the file the command wrote from one put in its place afterwards."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_in_own_folder(result: str, flags: int) -> int:
    """``result`` opened (``flags``) inside its folder, once that folder is checked to be one no other user can
    write (hoststate.filetrust): in a folder another user can write they could move the stamped file onto another
    cell's name, remove a cell the sweep judged invalid, or swap the file before it is stamped. A sticky folder
    (``/tmp``) is one: others may add names there, never replace ours. So must be every folder above it
    (filetrust.swappable), or the whole folder could be swapped for another of ours."""
    from hoststate.filetrust import folder_problem

    folder = os.path.dirname(result) or "."
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise InputError(f"{result}: cannot open its folder: {err.strerror}") from err
    try:
        # the folder, and every folder above it: one another user may write lets them swap this folder for
        # another of ours (an older experiment's), whose file of the same name would get this run's stamp
        why = folder_problem(folder, (os.geteuid(), 0), os.fstat(dfd))
        if why:
            raise InputError(f"{result}: its folder {why}; not stamped")
        return os.open(os.path.basename(result), flags, dir_fd=dfd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{result}: is a symbolic link; not stamped") from err
        raise InputError(f"{result}: cannot open the result: {err.strerror}") from err
    finally:
        os.close(dfd)


def _read_own_result(result: str, expect: tuple[int, int] | None | bool) -> str:
    """The result's text, read from one opened descriptor after checking what was opened: a regular file with
    one link, owned by the user this process runs as (the command's user: a result another user owns is never
    stamped, least of all as root), writable by no other user, and the very file that was there when the command
    exited (``expect``; False: not checked). InputError says which check failed."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    fd = _open_in_own_folder(result, flags)
    try:
        st = os.fstat(fd)
        why = None
        if not stat.S_ISREG(st.st_mode):
            why = "is not a regular file"
        elif st.st_nlink != 1:
            why = f"has {st.st_nlink} hard links (another name may be another user's file)"
        elif st.st_uid != os.geteuid():
            why = f"is owned by uid {st.st_uid}, not by the user the command ran as (uid {os.geteuid()})"
        elif st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != os.getegid()):
            why = "can be written by other users"
        elif expect is not False and expect != (st.st_dev, st.st_ino):
            why = "was put there after the command exited" if expect is None else \
                "was replaced after the command exited"
        if why:
            raise InputError(f"{result}: {why}; not stamped")
        if st.st_size > RESULT_MAX_BYTES:
            raise InputError(f"{result}: larger than {RESULT_MAX_BYTES >> 20} MiB; not stamped")
        chunks, size = [], 0
        while size <= RESULT_MAX_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise InputError(f"{result}: cannot read the result: {err.strerror}") from err
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{result}: not UTF-8 JSON ({err.reason})") from err


def attach(result: str, record: Mapping[str, Any], *, protect: Sequence[str] = (),
           expect: tuple[int, int] | None | bool = False) -> str:
    """Merge ``record`` atomically into the JSON result file under ``hoststate``; the file's own keys are kept,
    and the record gains ``result_keys`` and ``result_sha256`` (:func:`content_digest` of those keys).

    A ``vllm bench serve --save-result`` file is one object (``json.dump``, no indent; ``vllm bench sweep``
    rewrites it with indent 4, kept as found); with ``--append-result`` it holds one object a line, and the
    last one (this run's) gets the record. ``expect``: the result's :func:`identity` when the command exited.
    Returns what was done, or raises InputError when the file is not the command's own JSON object.
    """
    from hoststate.output import write_output

    text = _read_own_result(result, expect)
    objects = load_objects(text, result)
    if not objects or not isinstance(objects[-1], dict):
        raise InputError(f"{result}: holds no JSON object to attach to")
    # the keys stamped: vllm bench sweep serve adds run_number and its overrides after the run; what it adds is not
    # covered, what was there is
    keys = sorted(k for k in objects[-1] if k != "hoststate")
    stamp = dict(record, result_keys=keys, result_sha256=content_digest(objects[-1], keys))
    objects[-1]["hoststate"] = stamp
    indent = 4 if text.lstrip().startswith("{\n") else None
    try:
        # one object as vLLM wrote it; appended results stay one object a line
        new = dump(objects[0], indent) if len(objects) == 1 else "\n".join(json.dumps(o) for o in objects)
    except RecursionError as err:
        raise InputError(f"{result}: nested too deeply to be a benchmark result") from err
    write_output(result, new, force=True, protect=protect, what="an input")
    if isinstance(record, dict):
        record.update(result_keys=keys, result_sha256=stamp["result_sha256"])
    return f"attached to {result}" + (f" (object {len(objects)} of {len(objects)})" if len(objects) > 1 else "")


def write_sidecar(path: str, record: Mapping[str, Any], snapshot: Mapping[str, Any] | str, *,
                  protect: Sequence[str] = ()) -> None:
    """``RESULT.hoststate.json``: the record plus the snapshot taken before the run (TOML text), so that
    ``hoststate results`` can name what differs between the hosts of a sweep's cells."""
    from hoststate.output import write_output
    from hoststate.snapshot import to_toml

    text = snapshot if isinstance(snapshot, str) else to_toml(snapshot)
    write_output(path, dump({**record, "snapshot": text}, 1), force=True, protect=protect, what="an input")


#: The largest sidecar read back (its snapshot is at most the snapshot cap, its record a few hundred KiB).
SIDECAR_MAX_BYTES = 16 << 20


def read_sidecar(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``RESULT.hoststate.json``: its record and the snapshot taken before the run, bounded and checked;
    InputError when it is not one (too large, nested too deep, another format, no snapshot)."""
    from hoststate.io import read_input
    from hoststate.snapshot import loads

    data = read_input(path, max_bytes=SIDECAR_MAX_BYTES, what="sidecar")
    try:
        record = load_objects(data.decode("utf-8"), path)[-1]
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 ({err.reason})") from err
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise InputError(f"{path}: not a {RECORD_FORMAT} sidecar")
    text = record.pop("snapshot", None)
    if not isinstance(text, str):
        raise InputError(f"{path}: holds no snapshot")
    return record, loads(text.encode("utf-8"), path)
