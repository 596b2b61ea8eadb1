"""The guard's verdict: snap this host, diff it against a baseline, and rate the outcome (see hoststate.guard).

Verdicts: ``comparable`` (nothing invalidating), ``non-comparable`` (invalidating findings, every one of them
accepted with an ``accept`` pattern: the run goes ahead but its numbers are labelled), ``refused`` (at least one
invalidating finding not accepted: the command must not start). The baseline is only ever opened for reading.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hoststate.capture import SnapOptions
from hoststate.diff import DiffResult, Finding, compare
from hoststate.errors import GuardRefused, InputError
from hoststate.paths import split_path
from hoststate.policy import Pattern, Policy, compile_pattern, load_policy
from hoststate.records import Record

VERDICTS = ("comparable", "non-comparable", "refused")

#: ``accepted_by`` of an unreadable finding accepted by ``allow_unreadable`` rather than by a pattern.
ALLOW_UNREADABLE = "--allow-unreadable"

#: Seconds a guard waits for the child reading its baseline ahead before it reads the file itself.
BASELINE_WAIT = 20.0

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


class GuardResult(Record):
    """What guard found: the verdict, the diff, and which invalidating findings were accepted or refused.

    ``unused_accept``: accept patterns that matched no invalidating finding; ``allow_unreadable``: every unreadable
    invalidating finding was accepted (``--allow-unreadable``); ``baseline_snapshot``: the baseline as read (the
    report says when it describes vLLM differently from ``current``)."""

    def __init__(self, verdict: str, diff: DiffResult, accepted: list[Finding], refused: list[Finding],
                 current: dict[str, Any], baseline: str, baseline_digest: str, baseline_sha256: str = "",
                 accept: tuple[str, ...] = (), unused_accept: list[str] | None = None,
                 policy_files: tuple[str, ...] = (), allow_unreadable: bool = False,
                 baseline_snapshot: dict[str, Any] | None = None) -> None:
        self.verdict = verdict
        self.diff = diff
        self.accepted = accepted
        self.refused = refused
        self.current = current
        self.baseline = baseline
        self.baseline_digest = baseline_digest
        self.baseline_sha256 = baseline_sha256
        self.accept = accept
        self.unused_accept: list[str] = [] if unused_accept is None else unused_accept
        self.policy_files = policy_files
        self.allow_unreadable = allow_unreadable
        self.baseline_snapshot: dict[str, Any] = {} if baseline_snapshot is None else baseline_snapshot

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


def read_baseline(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The baseline snapshot and the sha256 of its bytes; opened read-only, once. InputError when bad."""
    import time

    from hoststate import ahead
    from hoststate.digest import sha256
    from hoststate.io import SNAPSHOT_MAX_BYTES, read_input
    from hoststate.snapshot import loads, restore_times, validate

    name = os.fspath(path)
    early = ahead.baseline(name, time.perf_counter() + BASELINE_WAIT)
    if early is not None:  # read and parsed by the child the command forked as it started (hoststate.ahead)
        _name, data, tree, times = early
        return validate(restore_times(tree, times), name), "sha256:" + sha256(data).hexdigest()
    data = read_input(name, max_bytes=SNAPSHOT_MAX_BYTES, what="baseline")
    return loads(data, name), "sha256:" + sha256(data).hexdigest()


def host_state(snap: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot without the [guard] table: a baseline may itself be a guarded run's saved snapshot."""
    return {k: v for k, v in snap.items() if k != GUARD_TABLE}


def snap_host(opts: SnapOptions | None = None, **options: Any) -> dict[str, Any]:
    """Snapshot the host (or a captured tree under ``root``) as ``hoststate snap`` would (hoststate.capture).

    ``opts`` or keyword options of :class:`hoststate.capture.SnapOptions` (root, only, skip, timeout, vllm_*, label).
    """
    from hoststate.capture import snap

    return snap(opts if opts is not None else SnapOptions.of(options))


def evaluate(baseline: str | os.PathLike[str] | Mapping[str, Any], opts: SnapOptions | None = None, *,
             policy_files: Sequence[str] = (), policy: Policy | None = None,
             accept: Iterable[str] | Acceptance = (), allow_unreadable: bool = False,
             current: Mapping[str, Any] | None = None, **options: Any) -> GuardResult:
    """Snap this host (or use ``current``), diff it against ``baseline`` and rate the outcome; never raises a refusal.

    :param baseline: a snapshot file path (read-only) or an already loaded snapshot mapping.
    :param opts: how to snap (:class:`hoststate.capture.SnapOptions`); or its fields as keyword ``options``
        (``vllm_cmd`` is the exact command of the server the benchmark is about to start).
    :param policy_files: user policy files, a layer above the shipped default (ignored when ``policy`` is given).
    :param accept: path patterns whose invalidating findings are accepted (the run is then ``non-comparable``).
    :param allow_unreadable: accept every invalidating finding whose value could not be read on one side
        (change ``unreadable``); without it such a finding refuses like any other (guard fails closed).
    :param current: a snapshot to use instead of snapping the host.
    :returns: a GuardResult; ``result.ok`` is False (verdict ``refused``) when an invalidating finding was not
        accepted. :func:`check_baseline` raises GuardRefused instead.
    :raises InputError: a missing or bad baseline, a bad policy (PolicyError) or accept pattern, a bad option.
    """
    opts = opts if opts is not None else SnapOptions.of(options)
    acceptance = accept if isinstance(accept, Acceptance) else Acceptance(accept)
    if isinstance(baseline, Mapping):
        from hoststate.snapshot import validate

        base_snap, base_name, base_sha = validate(dict(baseline), "<baseline>"), "<baseline>", ""
    else:
        base_name = os.fspath(baseline)
        base_snap, base_sha = read_baseline(base_name)
    if policy is None and policy_files:  # a bad user policy is an error before the host is snapped
        policy = load_policy(tuple(policy_files))
    if current is None:
        current = snap_host(opts)
        if opts.vllm_cmd is not None:
            _refuse_refused_command(current)
    if policy is None:  # the shipped rules: built by the snap's warm thread while the collectors ran
        policy = load_policy(())
    current = dict(current)
    diff = compare(host_state(base_snap), host_state(current), policy)
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
    from hoststate.render.findings import importance
    from hoststate.render.summary import headline
    from hoststate.render.text import safe

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
