"""Guard a benchmark: snap the host now, diff it against a baseline, refuse when anything is invalidating.

The library half of ``hoststate guard`` (no click here), also the API for benchmark harnesses::

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

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.diff import DiffResult, Finding, compare
from hoststate.errors import GuardRefused, InputError
from hoststate.paths import split_path
from hoststate.policy import Pattern, Policy, compile_pattern, load_policy

__all__ = [
    "GuardRefused",
    "GuardResult",
    "Acceptance",
    "check_baseline",
    "command_env",
    "evaluate",
    "guard_table",
    "run_command",
    "with_guard_table",
]

VERDICTS = ("comparable", "non-comparable", "refused")
#: ``accepted_by`` of an unreadable finding accepted by ``allow_unreadable`` rather than by a pattern.
ALLOW_UNREADABLE = "--allow-unreadable"
#: The table a guarded run's saved snapshot carries; never part of what is compared.
GUARD_TABLE = "guard"


class Acceptance:
    """``accept`` patterns (the policy's path syntax: ``*`` one key, ``**`` any number of keys), compiled once.

    A bad pattern raises InputError naming it, before anything is snapped.
    """

    def __init__(self, patterns: Iterable[str] = ()):
        self.patterns: tuple[str, ...] = tuple(patterns)
        self._compiled: list[tuple[str, Pattern]] = []
        for pattern in self.patterns:
            try:
                self._compiled.append((pattern, compile_pattern(split_path(pattern))))
            except ValueError as err:
                raise InputError(f"--accept {pattern!r}: bad pattern: {err}") from err
        self.used: set[str] = set()

    def match(self, path: str) -> str | None:
        """The first pattern that matches the finding's dotted path, or None."""
        try:
            keys = split_path(path)
        except ValueError:
            return None
        for pattern, compiled in self._compiled:
            if compiled.match(keys):
                self.used.add(pattern)
                return pattern
        return None

    @property
    def unused(self) -> list[str]:
        """Patterns that matched no invalidating finding (worth a note: a typo accepts nothing)."""
        return [p for p in self.patterns if p not in self.used]


@dataclass
class GuardResult:
    """What guard found: the verdict, the diff, and which invalidating findings were accepted or refused."""

    verdict: str
    diff: DiffResult
    accepted: list[Finding]
    refused: list[Finding]
    current: dict[str, Any]
    baseline: str
    baseline_digest: str
    baseline_sha256: str = ""
    accept: tuple[str, ...] = ()
    #: Accept patterns that matched no invalidating finding.
    unused_accept: list[str] = field(default_factory=list)
    policy_files: tuple[str, ...] = ()
    #: Every unreadable invalidating finding was accepted (``--allow-unreadable``).
    allow_unreadable: bool = False
    #: The baseline snapshot as read (the report says when it describes vLLM differently from ``current``).
    baseline_snapshot: dict[str, Any] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        """Every finding of the diff (ignored ones left out), invalidating first."""
        return self.diff.findings

    @property
    def ok(self) -> bool:
        """True when the command may run (comparable, or non-comparable with every invalidating finding accepted)."""
        return not self.refused

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.diff.findings if f.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the verdict, the accepted and refused findings, and the diff in design.md's report shape."""
        current = self.current.get("hoststate", {})
        return {
            "verdict": self.verdict,
            "baseline": self.baseline,
            "baseline_digest": self.baseline_digest,
            "current_digest": current.get("digest", ""),
            "allow_unreadable": self.allow_unreadable,
            "accepted": [f.to_dict() for f in self.accepted],
            "refused": [f.to_dict() for f in self.refused],
            "diff": self.diff.to_dict(self.baseline, "<this host>"),
        }


# -- baseline ----------------------------------------------------------------------------------------------------


def read_baseline(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The baseline snapshot and the sha256 of its bytes; opened read-only, once. InputError when bad."""
    from hoststate.io import SNAPSHOT_MAX_BYTES, read_input
    from hoststate.snapshot import loads

    name = os.fspath(path)
    data = read_input(name, max_bytes=SNAPSHOT_MAX_BYTES, what="baseline")
    return loads(data, name), "sha256:" + hashlib.sha256(data).hexdigest()


def _host_state(snap: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot without the [guard] table: a baseline may itself be a guarded run's saved snapshot."""
    return {k: v for k, v in snap.items() if k != GUARD_TABLE}


# -- snapping ----------------------------------------------------------------------------------------------------


def snap_host(*, root: str = "/", only: Sequence[str] | None = None, skip: Sequence[str] | None = None,
              timeout: float = 20.0, vllm_pid: int | None = None, vllm_cmd: str | None = None,
              vllm_log: str | None = None, vllm_url: str | None = None, vllm_version: str | None = None,
              label: str | None = None) -> dict[str, Any]:
    """Snapshot the host (or a captured tree under ``root``) as ``hoststate snap`` would (hoststate.capture)."""
    from hoststate.capture import collect, context

    ctx, names = context(root=root, only=only, skip=skip, timeout=timeout, vllm_pid=vllm_pid, vllm_cmd=vllm_cmd,
                         vllm_log=vllm_log, vllm_url=vllm_url, vllm_version=vllm_version)
    return collect(ctx, names, label=label)


# -- evaluate ----------------------------------------------------------------------------------------------------


def evaluate(baseline: str | os.PathLike[str] | Mapping[str, Any], *, root: str = "/",
             only: Sequence[str] | None = None, skip: Sequence[str] | None = None, timeout: float = 20.0,
             vllm_pid: int | None = None, vllm_cmd: str | None = None, vllm_log: str | None = None,
             vllm_url: str | None = None, vllm_version: str | None = None, label: str | None = None,
             policy_files: Sequence[str] = (), policy: Policy | None = None,
             accept: Iterable[str] | Acceptance = (), allow_unreadable: bool = False,
             current: Mapping[str, Any] | None = None) -> GuardResult:
    """Snap this host (or use ``current``), diff it against ``baseline`` and rate the outcome; never raises a refusal.

    :param baseline: a snapshot file path (read-only) or an already loaded snapshot mapping.
    :param root, only, skip, timeout, vllm_*: the collector and vLLM source options of ``hoststate snap``;
        ``vllm_cmd`` is the exact command of the server the benchmark is about to start.
    :param policy_files: user policy files, a layer above the shipped default (ignored when ``policy`` is given).
    :param accept: path patterns whose invalidating findings are accepted (the run is then ``non-comparable``).
    :param allow_unreadable: accept every invalidating finding whose value could not be read on one side
        (change ``unreadable``); without it such a finding refuses like any other (guard fails closed).
    :param current: a snapshot to use instead of snapping the host.
    :returns: a GuardResult; ``result.ok`` is False (verdict ``refused``) when an invalidating finding was not
        accepted. :func:`check_baseline` raises GuardRefused instead.
    :raises InputError: a missing or bad baseline, a bad policy (PolicyError) or accept pattern, a bad option.
    """
    acceptance = accept if isinstance(accept, Acceptance) else Acceptance(accept)
    if isinstance(baseline, Mapping):
        from hoststate.snapshot import validate

        base_snap, base_name, base_sha = validate(dict(baseline), "<baseline>"), "<baseline>", ""
    else:
        base_name = os.fspath(baseline)
        base_snap, base_sha = read_baseline(base_name)
    if policy is None:
        policy = load_policy(tuple(policy_files))
    if current is None:
        current = snap_host(root=root, only=only, skip=skip, timeout=timeout, vllm_pid=vllm_pid, vllm_cmd=vllm_cmd,
                            vllm_log=vllm_log, vllm_url=vllm_url, vllm_version=vllm_version, label=label)
        if vllm_cmd is not None:
            _refuse_refused_command(current)
    current = dict(current)
    diff = compare(_host_state(base_snap), _host_state(current), policy)
    accepted: list[Finding] = []
    refused: list[Finding] = []
    for finding in diff.findings:
        if finding.severity != "invalidating":
            continue
        by = acceptance.match(finding.path)
        if by is None and allow_unreadable and finding.change == "unreadable":
            by = ALLOW_UNREADABLE
        (accepted if by else refused).append(finding)
    verdict = "refused" if refused else "non-comparable" if accepted else "comparable"
    return GuardResult(
        verdict=verdict,
        diff=diff,
        accepted=accepted,
        refused=refused,
        current=current,
        baseline=base_name,
        baseline_digest=str(base_snap.get("hoststate", {}).get("digest", "")),
        baseline_sha256=base_sha,
        accept=acceptance.patterns,
        unused_accept=acceptance.unused,
        policy_files=tuple(policy_files),
        allow_unreadable=allow_unreadable,
        baseline_snapshot=base_snap,
    )


def _refuse_refused_command(snap: Mapping[str, Any]) -> None:
    """A ``--vllm-cmd`` that vLLM itself would refuse is bad input: nothing is compared or run."""
    vllm = snap.get("vllm")
    cudagraph = vllm.get("cudagraph") if isinstance(vllm, Mapping) else None
    refused = cudagraph.get("refused") if isinstance(cudagraph, Mapping) else None
    if refused:
        raise InputError(f"--vllm-cmd: {' '.join(str(refused).split())}; the command was not started")


def refusal_message(result: GuardResult) -> str:
    """One line saying why the baseline is refused, naming the most important finding (report.headline)."""
    from hoststate.report import headline, importance, safe

    n = len(result.refused)
    top = min(result.refused, key=importance).path if result.refused else ""
    unread = sum(1 for f in result.refused if f.change == "unreadable")
    unread_note = f", {unread} unreadable (--allow-unreadable)" if unread else ""
    return (f"refused: {n} invalidating finding{'s' if n != 1 else ''}{unread_note}, first {safe(top)}: "
            f"{headline(result.refused)}")


def check_baseline(baseline: str | os.PathLike[str] | Mapping[str, Any], **options: Any) -> GuardResult:
    """:func:`evaluate`, raising GuardRefused (carrying the GuardResult as ``.result``) when the run must not start.

    Returns the GuardResult when the run may go ahead: verdict ``comparable``, or ``non-comparable`` when
    invalidating findings were accepted (record ``result.accepted`` with the run's numbers).
    """
    result = evaluate(baseline, **options)
    if result.refused:
        raise GuardRefused(refusal_message(result), result)
    return result


# -- the [guard] table -------------------------------------------------------------------------------------------


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


# -- running the command -----------------------------------------------------------------------------------------


#: Signals sent to guard that it passes on to its command (design.md: guard never orphans its command).
FORWARDED: tuple[signal.Signals, ...] = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM,
)
#: Signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\\, hang-up).
TERMINAL_SIGNALS: frozenset[int] = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGHUP})
#: siginfo's si_code for a signal the kernel itself sent (a terminal's, a timer's); Linux's SI_KERNEL.
SI_KERNEL = 0x80
#: Signals Python itself ignores at start-up; the command starts with them at their defaults, as the shell's would.
_PYTHON_IGNORED: frozenset[int] = frozenset(
    s for s in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if s is not None
)


def _from_terminal(signum: int, code: int) -> bool:
    """True for a signal the terminal sent to the whole foreground process group, the command included:
    forwarding it would deliver it twice (a second Ctrl-C makes many benchmarks abort instead of stopping
    cleanly). A hang-up sent to guard as a session leader reached guard alone."""
    if signum not in TERMINAL_SIGNALS or code != SI_KERNEL:
        return False
    return not (signum == signal.SIGHUP and os.getsid(0) == os.getpid())


def _spawn_error(argv0: str, err: OSError) -> int:
    """The shell's status and one line for a command that could not be started."""
    from hoststate.redact import redact_argv

    name = redact_argv([argv0])[0]
    if isinstance(err, FileNotFoundError):
        print(f"hoststate: {name}: command not found", file=sys.stderr)
        return 127
    if isinstance(err, PermissionError):
        print(f"hoststate: {name}: permission denied", file=sys.stderr)
        return 126
    print(f"hoststate: {name}: cannot execute: {err.strerror or err}", file=sys.stderr)
    return 126


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run_command(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` as guard's own command would be run by the shell, and return its exit status.

    The command inherits stdin, stdout, stderr, the terminal, the process group, the signal mask, the
    environment given (os.environ by default, never redacted) and every inheritable file descriptor. While it
    runs, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM sent to guard are forwarded to it and
    guard keeps waiting, so the command is never orphaned by a signal guard can catch. A Ctrl-C, Ctrl-\\ or
    hang-up from the terminal already reached the command (same foreground process group) and is not sent
    twice. A signal ignored when guard started stays ignored, for the command too (``nohup``).

    A command killed by signal N gives 128 + N; a command that cannot be found gives 127, one that cannot be
    executed 126 (one line on stderr), as in the shell.
    """
    if not argv:
        raise InputError("no command given after '--'")
    full_env = dict(os.environ if env is None else env)
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread receives process signals reliably: a harness thread gets plain inheritance.
        try:
            proc = subprocess.Popen(list(argv), close_fds=False, env=full_env)
        except OSError as err:
            return _spawn_error(argv[0], err)
        return _status(proc.wait())

    caller_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handled = [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN and s not in caller_mask]
    waited = {*handled, signal.SIGCHLD}
    child: list[int] = []

    def stray(signum: int, _frame: Any) -> None:
        """A forwardable signal the kernel gave to another thread (one a timed-out collector left behind):
        its origin is unknown, so it is forwarded."""
        if child:
            with contextlib.suppress(OSError):
                os.kill(child[0], signum)

    signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # first: a signal from now on waits for the loop below
    saved = {s: signal.signal(s, stray) for s in handled}
    try:
        try:
            # The command starts with the caller's signal mask (not the one guard waits with) and with the
            # signals guard catches at their defaults (exec resets caught signals).
            pid = os.posix_spawnp(argv[0], list(argv), full_env, setsigmask=caller_mask,
                                  setsigdef=_PYTHON_IGNORED)
        except OSError as err:
            return _spawn_error(argv[0], err)
        child.append(pid)
        return _status(_wait_forwarding(pid, waited))
    finally:
        child.clear()  # reaped: its pid may be reused, so nothing is sent to it any more
        while signal.sigtimedwait(waited, 0) is not None:
            pass  # arrived after the command ended: nothing left to forward them to
        signal.pthread_sigmask(signal.SIG_SETMASK, caller_mask)
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def _wait_forwarding(pid: int, waited: set[int]) -> int:
    """Wait for ``pid``, forwarding every signal of ``waited`` but SIGCHLD; its returncode as subprocess gives it."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        # The timeout only bounds how late a stray signal's handler runs; a signal or SIGCHLD wakes this at once.
        info = signal.sigtimedwait(waited, 1.0)
        if info is None or info.si_signo == signal.SIGCHLD or _from_terminal(info.si_signo, info.si_code):
            continue
        with contextlib.suppress(ProcessLookupError):  # it has just exited: waitpid reports it next
            os.kill(pid, info.si_signo)
