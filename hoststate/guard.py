"""Guard a benchmark: snap the host now, diff it against a baseline, refuse when anything is invalidating.

The library face of ``hoststate guard`` (the flow itself is hoststate.run), the API for benchmark harnesses::

    from hoststate.guard import GuardRefused, check_baseline

    try:
        result = check_baseline("baseline.toml", vllm_cmd="vllm serve MODEL -tp 8")
    except GuardRefused as refused:
        for f in refused.result.refused:
            print(f"{f.path}: {f.old!r} -> {f.new!r}  ({f.reason})")
        raise SystemExit(3) from None
    print(result.verdict)          # "comparable" or "non-comparable" (invalidating findings accepted)

Verdicts: ``comparable`` (nothing invalidating), ``non-comparable`` (invalidating findings, every one of them
accepted with an ``accept`` pattern: the run goes ahead but its numbers are labelled), ``refused`` (at least one
invalidating finding not accepted: the command must not start). The baseline is only ever opened for reading.
"""

from __future__ import annotations

from hoststate.errors import GuardRefused
from hoststate.run.flow import RunOutcome, guarded_run
from hoststate.run.guard import (
    ALLOW_UNREADABLE,
    GUARD_TABLE,
    VERDICTS,
    Acceptance,
    GuardResult,
    check_baseline,
    evaluate,
    host_state,
    read_baseline,
    refusal_message,
    snap_host,
)
from hoststate.run.launch import run_command
from hoststate.run.record import command_env, guard_table, with_guard_table

#: The earlier private name, for callers that used it.
_host_state = host_state

__all__ = [
    "ALLOW_UNREADABLE",
    "GUARD_TABLE",
    "VERDICTS",
    "GuardRefused",
    "GuardResult",
    "Acceptance",
    "RunOutcome",
    "check_baseline",
    "command_env",
    "evaluate",
    "guard_table",
    "guarded_run",
    "host_state",
    "read_baseline",
    "refusal_message",
    "run_command",
    "snap_host",
    "with_guard_table",
]
