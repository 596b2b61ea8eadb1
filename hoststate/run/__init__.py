"""The guarded run, owned once: ``guard`` (the verdict), ``launch`` (the process and its signals), ``sampler``
(NVML while it runs), ``summary`` and ``judge`` (the run verdict), ``record`` (every format a run writes) and
``flow`` (the one flow the CLI and the library both use). ``hoststate.guard`` and ``hoststate.watch`` are the
documented faces."""

#: Seconds between two samples of the cheap readings: on 8 GPUs about 0.3 ms of CPU a sample (docs/performance.md).
DEFAULT_INTERVAL = 1.0

#: Seconds between two reads of the expensive counters (besides the start and the end).
DEFAULT_CHECKPOINT = 60.0

#: A recorded trace replayed instead of NVML (tests, benchmarks), as HOSTSTATE_NVML_REPLAY is for snapshots.
REPLAY_ENV = "HOSTSTATE_WATCH_REPLAY"
