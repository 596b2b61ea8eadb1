"""The guarded run, owned once: ``guard`` (the verdict), ``launch`` (the process and its signals), ``sampler``
(NVML while it runs), ``summary`` and ``judge`` (the run verdict), ``record`` (every format a run writes) and
``flow`` (the one flow the CLI and the library both use). ``hoststate.guard`` and ``hoststate.watch`` are the
documented faces."""
