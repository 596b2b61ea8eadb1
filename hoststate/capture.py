"""Capture: the one place that builds the collectors' context, runs them and assembles the snapshot.

`hoststate snap`, `guard`, `check`, `export` and the library (``hoststate.guard.snap_host``) all come through here;
the snapshot module holds only the file format, and the verdict side (policy, positions, diff, digest) never
imports this module.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from hoststate import SCHEMA, __version__, ahead
from hoststate.collectors import NAMES, TIMEOUT, Context, Section, plan, run_all
from hoststate.collectors import check_root as check_root  # part of this API: a host tree's check
from hoststate.collectors import gpu_section as gpu_section  # hoststate.ahead's work, part of this API
from hoststate.errors import InputError
from hoststate.io import Reader, check_timeout  # noqa: F401 - check_timeout is part of this API
from hoststate.snapshot import finite
from hoststate.text import clean_all


def context(*, root: str | os.PathLike[str] | None = "/", only: Sequence[str] | None = None,
            skip: Sequence[str] | None = None, timeout: float | None = TIMEOUT, vllm_pid: int | None = None,
            vllm_cmd: str | None = None, vllm_log: str | None = None, vllm_url: str | None = None,
            vllm_version: str | None = None) -> tuple[Context, tuple[str, ...]]:
    """The collectors' Context and the selected collector names (hoststate.collectors.plan), with the sections
    collected ahead taken where the context is the one they were collected for; InputError on a bad root,
    selection or timeout."""
    ctx, names = plan(root=root, only=only, skip=skip, timeout=timeout, vllm_pid=vllm_pid, vllm_cmd=vllm_cmd,
                      vllm_log=vllm_log, vllm_url=vllm_url, vllm_version=vllm_version)
    if not (ctx.live and ctx.timeout == TIMEOUT and set(ahead.HOST_NAMES) <= set(names)):
        ahead.discard(ahead.HOST)  # collected for a plain snap: every host collector, the default timeout
    ctx.early = _early
    return ctx, names


def _early(name: str, ctx: Context) -> Section | None:
    """The section a child forked at the start collected (hoststate.ahead): the GPU's for a context equal in what
    it reads (the live host, no --vllm-pid, the real NVML module), the host job's for the context ``context``
    kept it for; None otherwise or when the child failed: the collector then runs here. A child that does not
    answer within the collectors' timeout is killed and its sections are ``timeout``, as a wedged thread's are
    (run_all gives up on them then too; for the host job that includes an accel_config that would have waited out
    a wedged dsa: fail closed)."""
    job = ahead.NAME if name == ahead.NAME else ahead.HOST if name in ahead.HOST_NAMES else None
    if job is None:
        return None
    if job == ahead.NAME and not (ctx.live and ctx.vllm_pid is None and ctx.nvml is None):
        ahead.discard(job)
        return None
    started = time.perf_counter()
    state, handed = ahead.take(job, started + ctx.timeout)
    if state == "timeout":
        return Section(status="timeout", reason=f"did not finish within {ctx.timeout:g}s",
                       took_ms=round((time.perf_counter() - started) * 1000, 1))
    if job == ahead.HOST and isinstance(handed, dict):
        handed = handed.get(name)
    if state != "ok" or not isinstance(handed, dict):
        return None
    try:
        return Section(**handed)
    except TypeError:  # not a section's fields
        return None


#: The host's name when hoststate runs in a container of its own UTS namespace (the Kubernetes DaemonSet sets it
#: from the pod's spec.nodeName, as dcgm-exporter's NODE_NAME), so that no host namespace is needed for it.
HOSTNAME_ENV = "HOSTSTATE_HOSTNAME"


@dataclass(frozen=True)
class SnapOptions:
    """How to snap a host, built once (by the CLI from its options, or by a caller) and handed on whole.

    ``root``: read the host through this prefix; ``only``/``skip``: collector selection; ``timeout``: seconds a
    collector may take; ``vllm_*``: where the vLLM server is described from; ``label``: ``[hoststate].label``;
    ``prepare``: modules the caller imports once the snapshot is taken (guard's report), imported while the
    collectors run (on a GPU host the parent waits for NVML meanwhile).
    """

    root: str = "/"
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] | None = None
    timeout: float = TIMEOUT
    vllm_pid: int | None = None
    vllm_cmd: str | None = None
    vllm_log: str | None = None
    vllm_url: str | None = None
    vllm_version: str | None = None
    label: str | None = None
    prepare: tuple[str, ...] = ()

    @classmethod
    def of(cls, options: Mapping[str, Any] | None = None, **more: Any) -> SnapOptions:
        """From a mapping of option names (unknown names are an error: a typo must not snap silently)."""
        given = {**(options or {}), **more}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise InputError(f"unknown snap option(s): {', '.join(unknown)}")
        given = {k: v for k, v in given.items() if v is not None or k in ("only", "skip")}
        for key in ("only", "skip"):
            if given.get(key) is not None:
                given[key] = tuple(given[key])
        if isinstance(given.get("prepare"), str):  # one module's name, not its letters
            given["prepare"] = (given["prepare"],)
        elif given.get("prepare") is not None:
            given["prepare"] = tuple(given["prepare"])
        return cls(**given)


def context_of(opts: SnapOptions) -> tuple[Context, tuple[str, ...]]:
    """:func:`context` from a SnapOptions value."""
    return context(root=opts.root, only=opts.only, skip=opts.skip, timeout=opts.timeout, vllm_pid=opts.vllm_pid,
                   vllm_cmd=opts.vllm_cmd, vllm_log=opts.vllm_log, vllm_url=opts.vllm_url,
                   vllm_version=opts.vllm_version)


def snap(opts: SnapOptions) -> dict[str, Any]:
    """Snapshot the host (or a captured tree under ``opts.root``) as ``hoststate snap`` would."""
    ctx, names = context_of(opts)
    return collect(ctx, names, label=opts.label, prepare=opts.prepare)


def _hostname(ctx: Context) -> str | None:
    if ctx.live:
        import os

        return os.environ.get(HOSTNAME_ENV) or os.uname().nodename  # what gethostname(2) reads, without socket
    reader = Reader(ctx.root)
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):
        text = reader.read(rel, record=False)
        if text:
            return text.splitlines()[0].strip()
    return None


def assemble(sections: Mapping[str, Section], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Sections and meta as the snapshot mapping, with the digest filled in."""
    from hoststate.digest import digest  # here: `check FILE` validates --timeout with this module, never snaps

    snap: dict[str, Any] = {"hoststate": dict(meta), "collectors": {}}
    for name, sec in sections.items():
        status: dict[str, Any] = {"status": sec.status, "took_ms": sec.took_ms}
        if sec.reason:
            status["reason"] = sec.reason
        if sec.unreadable:
            status["unreadable"] = dict(sec.unreadable)
        snap["collectors"][name] = status
        if sec.data:
            snap[name] = finite(sec.data)
    snap = clean_all(snap)  # no surrogate (an undecodable byte) may reach UTF-8 TOML or the digest: hoststate.text
    snap["hoststate"]["digest"] = digest(snap)
    return snap


def _warm(names: tuple[str, ...], modules: tuple[str, ...] = ()) -> None:
    """What the last steps build on first use, built while the collectors run (the same cached objects; never
    raises): redaction's rule table and keywords (hoststate.redact.prepare, which a snap of the GPUs alone would
    otherwise build after NVML answered; a section that finishes first waits for this build rather than make its
    own), the digest's default policy, with the rules of the tables ``names`` (the digest builds the others as
    it rates them), then ``modules`` (SnapOptions.prepare)."""
    with contextlib.suppress(Exception):
        from hoststate.redact import prepare

        prepare()
    with contextlib.suppress(Exception):
        from hoststate.policy import default_policy

        default_policy().prepare(names)
    for module in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def _redact_section(sec: Section) -> None:
    """The last pass over what a collector found: every string redacted by shape (hoststate.redact), so a
    secret quoted where no collector expected one (an error message, a kernel command line) is not kept."""
    from hoststate.redact import prepare, redact_strings, redact_text

    prepare()
    sec.data = redact_strings(sec.data)
    sec.reason = redact_text(sec.reason) if sec.reason else sec.reason
    sec.unreadable = {redact_text(k): redact_text(v) for k, v in sec.unreadable.items()}
    sec.notes[:] = [redact_text(n) for n in sec.notes]


def collect(ctx: Context, names: tuple[str, ...] = NAMES, label: str | None = None,
            prepare: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the collectors and return the snapshot mapping (never raises for a collector's sake); ``prepare``: as
    SnapOptions.prepare."""
    from hoststate.redact import redact_text

    # Redaction's patterns and the digest's policy are built, and each section redacted, while the slowest
    # collector still waits. Where the GPU section is read by a child (hoststate.ahead), the parent waits for NVML
    # and fills the wait: the policy's tables for every collector, and each section's leaves rated as it
    # finishes. Without that wait the same work is only more of it under one interpreter lock (18 ms more of a
    # snap on the project's VM, docs/performance.md), and the digest builds and rates what the snapshot has.
    fill = ahead.pending(ahead.NAME)
    warm = threading.Thread(target=_warm, args=(names if fill else (), prepare), name="warm", daemon=True)
    warm.start()
    redacted: set[int] = set()

    def finish(name: str, sec: Section) -> None:
        _redact_section(sec)
        redacted.add(id(sec))
        if fill:
            from hoststate.digest import rate_ahead

            rate_ahead(name, sec.data)

    sections = run_all(ctx, names, finish)
    ahead.discard()  # a child collecting ahead that this collection did not take must not outlive it
    for sec in sections.values():
        if id(sec) not in redacted:  # a timeout's or a skipped collector's section, made after the threads
            _redact_section(sec)
    warm.join(ctx.timeout)
    meta: dict[str, Any] = {
        "schema": SCHEMA,
        "version": __version__,
        "taken_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0),
    }
    host = _hostname(ctx)
    if host:
        meta["hostname"] = host
    if label:
        meta["label"] = redact_text(label)
    meta["root"] = os.path.abspath(ctx.root) if not ctx.live else "/"
    return assemble(sections, meta)
