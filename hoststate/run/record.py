"""Every format a guarded run writes: the ``[guard]`` table and its ``[guard.watch]``, the ``hoststate-run/1``
record merged into a result, and the ``RESULT.hoststate.json`` sidecar; plus the variables the command is given.

Pure builders and atomic writers; the run flow (hoststate.run.flow) is their only caller besides the faces.
"""

from __future__ import annotations

import json
import os
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
        from hoststate.report import show_value

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


def attach(result: str, record: Mapping[str, Any], *, protect: Sequence[str] = ()) -> str:
    """Merge ``record`` atomically into the JSON result file under ``hoststate``; the file's own keys are kept.

    A ``vllm bench serve --save-result`` file is one object (``json.dump``, no indent; ``vllm bench sweep``
    rewrites it with indent 4, kept as found); with ``--append-result`` it holds one object a line, and the
    last one (this run's) gets the record. Returns what was done, or raises InputError when it is no JSON object.
    """
    from hoststate.io import read_input
    from hoststate.output import write_output

    text = read_input(result, max_bytes=256 << 20, what="result").decode("utf-8")
    decoder = json.JSONDecoder()
    objects: list[Any] = []
    pos = 0
    try:
        while pos < len(text.rstrip()):
            while text[pos].isspace():
                pos += 1
            obj, pos = decoder.raw_decode(text, pos)
            objects.append(obj)
    except ValueError as err:
        raise InputError(f"{result}: not a JSON result ({err})") from err
    if not objects or not isinstance(objects[-1], dict):
        raise InputError(f"{result}: holds no JSON object to attach to")
    objects[-1]["hoststate"] = dict(record)
    indent = 4 if text.lstrip().startswith("{\n") else None
    # one object as vLLM wrote it; appended results stay one object a line
    new = dump(objects[0], indent) if len(objects) == 1 else "\n".join(json.dumps(o) for o in objects)
    write_output(result, new, force=True, protect=protect, what="an input")
    return f"attached to {result}" + (f" (object {len(objects)} of {len(objects)})" if len(objects) > 1 else "")


def write_sidecar(path: str, record: Mapping[str, Any], snapshot: Mapping[str, Any], *,
                  protect: Sequence[str] = ()) -> None:
    """``RESULT.hoststate.json``: the record plus the snapshot taken before the run (TOML text), so that
    ``hoststate results`` can name what differs between the hosts of a sweep's cells."""
    from hoststate.output import write_output
    from hoststate.snapshot import to_toml

    write_output(path, dump({**record, "snapshot": to_toml(snapshot)}, 1), force=True, protect=protect,
                 what="an input")
