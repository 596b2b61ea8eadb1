"""Watch a benchmark run: the documented face of hoststate.run (sampler, summary, judge, record, flow).

A snapshot says what the host was before a run; a watch says what happened during it: the GPUs are sampled while
the command runs (hoststate.run.sampler), the host is snapped again after it, and :func:`judge` rates the run
``clean``, ``degraded`` or ``invalid`` under :data:`RULES` (data: hoststate/run/judge_rules.toml; a TOML file of
``[[rule]]`` tables replaces entries by metric). Keys and the trace format are in docs/watch.md.
"""

from __future__ import annotations

from hoststate.collectors.vllm.http import VLLM_COUNTERS, parse_vllm_counters, scrape_vllm
from hoststate.collectors.vllm.placement import cgroup_of, read_cpu_stat
from hoststate.run.flow import (
    FAIL_ON_EXIT,
    WatchedRun,
    WatchOptions,
    drift,
    guard_and_watch,
    guarded_run,
    run_watched,
    watch_command,
)
from hoststate.run.judge import RULES, VERDICTS, Rule, baseline_metrics, judge, load_rules
from hoststate.run.record import RECORD_FORMAT, attach, build_record, metadata_env, sidecar_path, write_sidecar
from hoststate.run.sampler import (
    COUNTER_FIELDS,
    DEFAULT_CHECKPOINT,
    DEFAULT_INTERVAL,
    REPLAY_ENV,
    STOP_TIMEOUT,
    TRACE_FORMAT,
    LiveSource,
    Sampler,
    TraceSource,
    load_trace,
    open_source,
)
from hoststate.run.summary import BENIGN_XIDS, EVENT_TYPES, metrics, summarize

__all__ = [
    "BENIGN_XIDS", "COUNTER_FIELDS", "DEFAULT_CHECKPOINT", "DEFAULT_INTERVAL", "EVENT_TYPES", "FAIL_ON_EXIT",
    "RECORD_FORMAT", "REPLAY_ENV", "RULES", "STOP_TIMEOUT", "TRACE_FORMAT", "VERDICTS", "VLLM_COUNTERS",
    "LiveSource", "Rule", "Sampler", "TraceSource", "WatchOptions", "WatchedRun", "attach", "baseline_metrics",
    "build_record", "cgroup_of", "drift", "guard_and_watch", "guarded_run", "judge", "load_rules", "load_trace",
    "metadata_env", "metrics", "open_source", "parse_vllm_counters", "read_cpu_stat", "run_watched",
    "scrape_vllm", "sidecar_path", "summarize", "watch_command", "write_sidecar",
]  # fmt: skip
