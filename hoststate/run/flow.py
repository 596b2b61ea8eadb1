"""The guarded run, owned once: snap, verdict, launch, watch, snap after, judge, record.

``hoststate guard`` (the CLI) and the library (:func:`guarded_run`, :func:`guard_and_watch`) both come through
:func:`guarded_run`; the CLI only parses options and renders what it returns.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hoststate import ahead
from hoststate.capture import SnapOptions
from hoststate.errors import GuardRefused, HoststateError
from hoststate.policy import Policy, load_policy
from hoststate.records import Frozen, Record, replace
from hoststate.run import DEFAULT_CHECKPOINT, DEFAULT_INTERVAL, REPLAY_ENV
from hoststate.run.guard import GuardResult, evaluate, host_state, refusal_message, snap_host
from hoststate.run.judge import VERDICTS, Rule, baseline_metrics, judge, shipped_rules
from hoststate.run.launch import run_command
from hoststate.run.record import (
    attach,
    build_record,
    command_env,
    file_state,
    identity,
    metadata_env,
    sidecar_path,
    watch_table,
    with_guard_table,
    write_sidecar,
)

#: Exit status of ``guard --watch --fail-on LEVEL`` when the command exited 0 and the run was judged LEVEL or worse.
FAIL_ON_EXIT = 4


class WatchedRun(Record):
    """A finished watched run: the command's status, the run verdict with its reasons, and what it is based on."""

    def __init__(self, returncode: int, verdict: str, reasons: list[dict[str, Any]], summary: dict[str, Any],
                 record: dict[str, Any], drift: list[dict[str, Any]] | None = None,
                 written: list[str] | None = None) -> None:
        self.returncode = returncode
        self.verdict = verdict
        self.reasons = reasons
        self.summary = summary
        self.record = record
        self.drift: list[dict[str, Any]] = [] if drift is None else drift
        self.written: list[str] = [] if written is None else written

    def exit_status(self, fail_on: str | None = None) -> int:
        """The command's status; :data:`FAIL_ON_EXIT` instead of 0 when the verdict reaches ``fail_on``."""
        if self.returncode == 0 and fail_on and VERDICTS.index(self.verdict) >= VERDICTS.index(fail_on):
            return FAIL_ON_EXIT
        return self.returncode


def _rules(rules: Sequence[Rule] | None) -> tuple[Rule, ...]:
    return shipped_rules() if rules is None else tuple(rules)


class WatchOptions(Frozen):
    """How ``--watch`` samples and judges a run, and where it writes (``attach``: a JSON result; ``trace``).

    ``rules``: the run rules (None: the shipped ones); ``attach_from_argv``: attach to the result file the command
    itself names (``--result-dir``/``--result-filename``, as ``vllm bench sweep serve`` passes them), and refuse a
    cell whose sweep's earlier cells ran elsewhere."""

    interval: float
    checkpoint: float
    rules: tuple[Rule, ...]
    attach: str | None
    trace: str | None
    attach_from_argv: bool

    def __init__(self, interval: float = DEFAULT_INTERVAL, checkpoint: float = DEFAULT_CHECKPOINT,
                 rules: tuple[Rule, ...] | None = None, attach: str | None = None, trace: str | None = None,
                 attach_from_argv: bool = False) -> None:
        self.__dict__.update(interval=interval, checkpoint=checkpoint,
                             rules=shipped_rules() if rules is None else rules, attach=attach, trace=trace,
                             attach_from_argv=attach_from_argv)


class RunOutcome(Record):
    """What a guarded run did: the guard's verdict, the command's status (None: not started), the watched run;
    ``written``: what was written, one line each (``wrote FILE ...``, ``not attached: ...``), in order;
    ``sweep_conflicts``: earlier cells of the sweep (``attach_from_argv``) that ran on another host state: the
    cell was refused."""

    def __init__(self, guard: GuardResult, returncode: int | None = None, watched: WatchedRun | None = None,
                 written: list[str] | None = None, sweep_conflicts: list[str] | None = None) -> None:
        self.guard = guard
        self.returncode = returncode
        self.watched = watched
        self.written: list[str] = [] if written is None else written
        self.sweep_conflicts: list[str] = [] if sweep_conflicts is None else sweep_conflicts

    @property
    def refused(self) -> bool:
        return bool(self.guard.refused or self.sweep_conflicts)

    def exit_status(self, fail_on: str | None = None) -> int:
        """The command's status (0 without a command); :data:`FAIL_ON_EXIT` as :meth:`WatchedRun.exit_status`."""
        if self.watched is not None:
            return self.watched.exit_status(fail_on)
        return self.returncode or 0


def drift(before: Mapping[str, Any], after: Mapping[str, Any], policy: Policy) -> list[dict[str, Any]]:
    """The host findings between the snapshots before and after a run that matter (warning or worse)."""
    from hoststate.diff import compare

    result = compare(host_state(before), host_state(after), policy)
    # a value unreadable alike before and after (a collector not selected) did not change during the run
    return [f.to_dict() for f in result.findings
            if f.severity in ("invalidating", "warning") and not (f.change in ("unreadable", "coverage")
                                                                  and f.old == f.new)]


def described_server(current: Mapping[str, Any], *, any_user: bool = False) -> int | None:
    """The pid of the one vLLM server the snapshot before the run described and whose arguments guard compared
    (found by --vllm-url, or the one server running), when it runs as the invoking user: the server the benchmark
    loads. It and its children (the V1 EngineCore and workers hold the GPU contexts) are the run's own, as
    ``--vllm-pid``'s are; a server started by ``vllm bench sweep serve`` is the guard's sibling, never its child.
    None for another user's look-alike (``run_by_invoker = false``; ``any_user``: its pid all the same, the server
    whose metrics are read), several servers none named (one of them may be a leftover sharing the GPU:
    ``--vllm-pid`` names the benchmark's) or none running."""
    vllm = current.get("vllm")
    pid = vllm.get("pid") if isinstance(vllm, Mapping) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    return pid if any_user or vllm.get("run_by_invoker") is not False else None


def _save(path: str, snapshot: Mapping[str, Any], *, force: bool, protect: Sequence[str]) -> None:
    from hoststate.output import write_output
    from hoststate.snapshot import to_toml
    from hoststate.text import clean_all

    # guard's command and the baseline's name are argv: undecodable bytes become \xNN (hoststate.text)
    write_output(path, to_toml(clean_all(dict(snapshot))), force=force, protect=protect,
                 what="the baseline or another input")


def guarded_run(baseline: Any, command: Sequence[str] = (), opts: SnapOptions | None = None, *,
                policy_files: Sequence[str] = (), accept: Iterable[str] = (), allow_unreadable: bool = False,
                watch: WatchOptions | None = None, save_current: str | None = None, force: bool = False,
                protect: Sequence[str] = (), announce: Callable[[GuardResult], None] | None = None,
                env: Mapping[str, str] | None = None) -> RunOutcome:
    """The guarded run: snap and rate the host, write ``save_current``, then (not refused) run ``command``,
    watched when ``watch`` is given, and write its record. Never raises a refusal: ``outcome.refused`` says it.

    ``announce`` is called once the verdict is known and before anything is written or started (the CLI prints
    its report there). ``save_current`` holds the snapshot with its ``[guard]`` table, written once: before the
    command, or under ``watch`` after the run with ``[guard.watch]`` (the command is then not told its path).
    ``protect``: paths no output may replace (the baseline, the policies, the log).
    """
    opts = opts or SnapOptions()
    watch = _resolved(watch, command)
    # A user policy is read (and a bad one refused) before the host is snapped; the shipped rules' Policy is built
    # by the snap's warm thread while the collectors run.
    policy = load_policy(tuple(policy_files)) if policy_files else None
    result = evaluate(baseline, opts, policy=policy, policy_files=policy_files, accept=accept,
                      allow_unreadable=allow_unreadable)
    policy = policy if policy is not None else load_policy(())
    outcome = RunOutcome(result)
    if watch is not None and watch.attach_from_argv and watch.attach and not result.refused:
        from hoststate.run.sweep import earlier_conflicts

        outcome.sweep_conflicts = earlier_conflicts(watch.attach, result.current, policy)
    if announce is not None:
        announce(result)
    if outcome.sweep_conflicts:
        return outcome
    watching = watch is not None and bool(command) and not result.refused
    if save_current and not watching:
        _save(save_current, with_guard_table(result, command=command), force=force, protect=protect)
        outcome.written.append(f"wrote {save_current} (verdict {result.verdict})")
    if result.refused or not command:
        return outcome
    ahead.settle(opts.timeout)  # the GPU child of the snap has exited before the benchmark starts
    if not watching:
        outcome.returncode = run_command(command, env=command_env(result, saved=save_current, base=env))
        return outcome
    assert watch is not None
    run = watch_command(result, command, opts, policy=policy, watch=watch, force=force, protect=protect, env=env)
    outcome.watched, outcome.returncode = run, run.returncode
    outcome.written.extend(run.written)
    if save_current:
        snap = with_guard_table(result, command=command)
        snap["guard"]["watch"] = watch_table(run.verdict, run.reasons, run.summary)
        _save(save_current, snap, force=force, protect=protect)
        outcome.written.append(f"wrote {save_current} (verdict {result.verdict}, run {run.verdict})")
    return outcome


def sweep_refusal(conflicts: Sequence[str]) -> str:
    """One line for a sweep cell refused because earlier cells ran on another host state."""
    return (f"refused: {len(conflicts)} earlier cell(s) of this sweep ran on another host state; the command was not "
            "started")


def _resolved(watch: WatchOptions | None, command: Sequence[str]) -> WatchOptions | None:
    """``attach_from_argv``: the result path the command names, or InputError before anything is snapped."""
    if watch is None or not watch.attach_from_argv:
        return watch
    from hoststate.errors import InputError
    from hoststate.run.sweep import result_from_argv

    if watch.attach:
        raise InputError("--attach-from-argv and --attach: give one")
    path = result_from_argv(command)
    if path is None:
        raise InputError("--attach-from-argv: the command names no --result-filename (vllm bench sweep serve "
                         "passes --result-dir DIR --result-filename run=N.json)")
    return replace(watch, attach=path)


def watch_command(guard_result: GuardResult, command: Sequence[str], opts: SnapOptions | None = None, *,
                  policy: Policy | None = None, watch: WatchOptions | None = None, force: bool = False,
                  baseline_snapshot: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                  protect: Sequence[str] = ()) -> WatchedRun:
    """Run ``command`` (guard already said it may run) under the watch, snap the host again, judge and record.

    With ``watch.attach`` the record is merged into that JSON result and written beside it as
    ``RESULT.hoststate.json`` (the sidecar alone when the command left no JSON object there: the record says why).
    """
    from hoststate.run.sampler import Sampler, descendants, open_source  # here: a guard that watches nothing skips it

    opts, watch = opts or SnapOptions(), watch or WatchOptions()
    gpu_before = guard_result.current.get("collectors", {}).get("gpu", {}).get("status")
    if gpu_before == "timeout" and not os.environ.get(REPLAY_ENV):
        # NVML hung for the snapshot already: opening it again here could hang before the command starts
        source, status = None, "skipped: NVML timed out in the snapshot before the run"
    else:
        source, status = open_source(live=os.path.abspath(opts.root) == "/")
    me, server = os.getpid(), opts.vllm_pid
    metrics_from = server if server is not None else described_server(guard_result.current, any_user=True)
    loaded = described_server(guard_result.current)  # the server the benchmark loads: its GPU contexts are own
    roots = [me] + ([int(server)] if server else []) + ([loaded] if loaded is not None else [])
    sampler = Sampler(source, interval=watch.interval, checkpoint=watch.checkpoint, root=opts.root,
                      cgroup_pid=server, vllm_url=opts.vllm_url, gpu_status=status, record=bool(watch.trace),
                      own_pids=lambda: descendants(roots), server_pid=metrics_from)
    sidecar = sidecar_path(watch.attach) if watch.attach else None
    full_env = {**command_env(guard_result, base=env), **metadata_env(guard_result, sidecar)}
    full_env.pop("HOSTSTATE_CURRENT", None)  # under --watch the saved snapshot is written after the run
    before = file_state(watch.attach) if watch.attach else None  # an earlier run's result already there
    sampler.start()
    try:
        returncode = run_command(command, env=full_env)
    finally:
        sampler.stop()
    written = identity(watch.attach) if watch.attach else None  # the file the command left, before anything else
    untouched = before is not None and file_state(str(watch.attach)) == before
    summary = sampler.summary()
    after = snap_host(opts)
    found = drift(guard_result.current, after, policy or load_policy(()))
    values = dict(summary["metrics"])
    values["host_invalidating"] = sum(1 for f in found if f["severity"] == "invalidating")
    values["host_warning"] = sum(1 for f in found if f["severity"] == "warning")
    summary["metrics"] = values
    base = baseline_snapshot if baseline_snapshot is not None else guard_result.baseline_snapshot
    verdict, reasons = judge(values, baseline_metrics(base), watch.rules)
    record = build_record(guard_result, summary, found, verdict, reasons, returncode, after, command)
    run = WatchedRun(returncode, verdict, reasons, summary, record, found)
    if watch.attach:
        _attach_both(run, watch.attach, sidecar or "", guard_result.current, protect, expect=written,
                     untouched=untouched)
    if watch.trace:  # last: a trace that cannot be written costs the trace, not the attached verdict
        from hoststate.output import write_output
        from hoststate.run.record import dump

        try:
            write_output(watch.trace, dump(sampler.trace("recorded by hoststate guard --watch"), 1),
                         force=force, protect=protect)
            run.written.append(f"wrote {watch.trace}")
        except HoststateError as err:
            run.written.append(f"trace not written: {err}")
    return run


def run_watched(guard_result: Any, command: Sequence[str], *, root: str = "/",
                snap_options: Mapping[str, Any] | None = None, policy: Any = None,
                interval: float = DEFAULT_INTERVAL, checkpoint: float = DEFAULT_CHECKPOINT,
                rules: Sequence[Rule] | None = None, attach_to: str | None = None, trace_to: str | None = None,
                trace_force: bool = False, baseline_snapshot: Mapping[str, Any] | None = None,
                env: Mapping[str, str] | None = None, protect: Sequence[str] = ()) -> WatchedRun:
    """:func:`watch_command` with its options spelled out (the earlier signature, kept for callers)."""
    opts = SnapOptions.of(snap_options or {}, root=root)
    watch = WatchOptions(interval=interval, checkpoint=checkpoint, rules=_rules(rules), attach=attach_to,
                         trace=trace_to)
    return watch_command(guard_result, command, opts, policy=policy, watch=watch, force=trace_force,
                         baseline_snapshot=baseline_snapshot, env=env, protect=protect)


def _attach_both(run: WatchedRun, result: str, sidecar: str, snapshot: Mapping[str, Any],
                 protect: Sequence[str], expect: tuple[int, int] | None | bool = False,
                 untouched: bool = False) -> None:
    """The result and its sidecar, each stamp bound to what it stamps (``result_sha256``, ``snapshot_sha256``).
    One that cannot be written (a link, a FIFO, not JSON, not the command's own file) costs that file only, never
    the other, and is said in ``run.written`` (the command has already run: nothing is raised). ``untouched``:
    the command did not write the result (the file is the one that was there before the run, an earlier run's
    numbers): never stamped as this run's, and a sidecar already beside it, that earlier run's, is kept."""
    from hoststate.run.record import text_digest
    from hoststate.snapshot import to_toml

    text = to_toml(snapshot)
    record = dict(run.record, sidecar=os.path.basename(sidecar), snapshot_sha256=text_digest(text))
    if untouched:
        why = (f"{result}: the command did not write it (the file that was there before the run, an earlier run's "
               "numbers): not stamped as this run's")
        record["attach_error"] = why
        run.written.append(f"not attached: {why}")
        run.record = record
        if os.path.lexists(sidecar):
            run.written.append(f"kept {sidecar}: the earlier run's")
            return
    else:
        try:
            run.written.append(attach(result, record, protect=protect, expect=expect))
        except HoststateError as err:
            record["attach_error"] = str(err)
            run.written.append(f"not attached: {err}")
    run.record = record
    try:
        write_sidecar(sidecar, record, text, protect=protect)
        run.written.append(f"wrote {sidecar}")
    except HoststateError as err:
        run.written.append(f"sidecar not written: {err}")


def guard_and_watch(baseline: Any, command: Sequence[str], *, attach_to: str | None = None,
                    interval: float = DEFAULT_INTERVAL, checkpoint: float = DEFAULT_CHECKPOINT,
                    rules: Sequence[Rule] | None = None, policy_files: Sequence[str] = (), accept: Iterable[str] = (),
                    allow_unreadable: bool = False, save_current: str | None = None, trace_to: str | None = None,
                    force: bool = False, attach_from_argv: bool = False, **snap_options: Any) -> WatchedRun:
    """``hoststate guard --baseline B --watch [--attach RESULT] [--save-current F] [--watch-trace T] -- CMD`` as
    one call, for harnesses: the same flow as the CLI (:func:`guarded_run`).

    Raises :class:`hoststate.errors.GuardRefused` (the command is not started) as
    :func:`hoststate.guard.check_baseline` does; otherwise returns the finished :class:`WatchedRun`.
    ``snap_options``: ``root``, ``only``, ``skip``, ``timeout``, ``vllm_pid``, ``vllm_cmd``, ``vllm_log``,
    ``vllm_url``, ``vllm_version``, ``label`` (:class:`hoststate.capture.SnapOptions`).
    """
    if not command:
        raise HoststateError("guard_and_watch needs a command to watch")
    protect = tuple(str(p) for p in (baseline, *policy_files) if isinstance(p, str | os.PathLike))
    outcome = guarded_run(baseline, command, SnapOptions.of(snap_options), policy_files=policy_files,
                          accept=accept, allow_unreadable=allow_unreadable, save_current=save_current, force=force,
                          watch=WatchOptions(interval=interval, checkpoint=checkpoint, rules=_rules(rules),
                                             attach=attach_to, trace=trace_to, attach_from_argv=attach_from_argv),
                          protect=protect)
    if outcome.sweep_conflicts:
        raise GuardRefused(sweep_refusal(outcome.sweep_conflicts), outcome.guard)
    if outcome.refused:
        raise GuardRefused(refusal_message(outcome.guard), outcome.guard)
    assert outcome.watched is not None
    outcome.watched.written = list(outcome.written)
    return outcome.watched
