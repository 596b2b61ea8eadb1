"""Capture: the one place that builds the collectors' context, runs them and assembles the snapshot.

`hoststate snap`, `guard`, `check`, `export` and the library (``hoststate.guard.snap_host``) all come through here;
the snapshot module holds only the file format, and the verdict side (policy, positions, diff, digest) never
imports this module.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from hoststate import SCHEMA, __version__
from hoststate.collectors import NAMES, Context, Section, run_all, select
from hoststate.errors import InputError
from hoststate.io import Reader
from hoststate.snapshot import finite
from hoststate.text import clean_all


def check_timeout(seconds: Any) -> float:
    """``seconds`` when it is a finite number above 0; InputError otherwise (nan or inf would never time out)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise InputError(f"--timeout {seconds!r}: must be a finite number of seconds greater than 0")
    return float(seconds)


def check_root(root: str | os.PathLike[str] | None) -> str:
    """``--root`` must be a host tree (holding sys or proc): a wrong directory would snap as an empty host."""
    root = os.fspath(root) if root else "/"
    if not os.path.isdir(root):
        raise InputError(f"--root {root}: not a directory")
    if not any(os.path.isdir(os.path.join(root, sub)) for sub in ("sys", "proc")):
        raise InputError(f"--root {root}: holds neither sys nor proc; give the top of a captured host tree")
    return root


def context(*, root: str | os.PathLike[str] | None = "/", only: Sequence[str] | None = None,
            skip: Sequence[str] | None = None, timeout: float | None = 20.0, vllm_pid: int | None = None,
            vllm_cmd: str | None = None, vllm_log: str | None = None, vllm_url: str | None = None,
            vllm_version: str | None = None) -> tuple[Context, tuple[str, ...]]:
    """The collectors' Context and the selected collector names; InputError on a bad root, selection or timeout."""
    root = check_root(root)
    timeout = check_timeout(20.0 if timeout is None else timeout)
    try:
        names = select(list(only) if only else None, list(skip) if skip else None)
    except ValueError as err:
        raise InputError(str(err)) from err
    ctx = Context(root=root, vllm_pid=vllm_pid, vllm_cmd=vllm_cmd, vllm_log=vllm_log, vllm_url=vllm_url,
                  vllm_version=vllm_version, timeout=timeout)
    return ctx, names


#: The host's name when hoststate runs in a container of its own UTS namespace (the Kubernetes DaemonSet sets it
#: from the pod's spec.nodeName, as dcgm-exporter's NODE_NAME), so that no host namespace is needed for it.
HOSTNAME_ENV = "HOSTSTATE_HOSTNAME"


def _hostname(ctx: Context) -> str | None:
    if ctx.live:
        import os
        import socket

        return os.environ.get(HOSTNAME_ENV) or socket.gethostname()
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


def _redact_section(sec: Section) -> None:
    """The last pass over what a collector found: every string redacted by shape (hoststate.redact), so a
    secret quoted where no collector expected one (an error message, a kernel command line) is not kept."""
    from hoststate.redact import redact_strings, redact_text

    sec.data = redact_strings(sec.data)
    sec.reason = redact_text(sec.reason) if sec.reason else sec.reason
    sec.unreadable = {redact_text(k): redact_text(v) for k, v in sec.unreadable.items()}
    sec.notes[:] = [redact_text(n) for n in sec.notes]


def collect(ctx: Context, names: tuple[str, ...] = NAMES, label: str | None = None) -> dict[str, Any]:
    """Run the collectors and return the snapshot mapping (never raises for a collector's sake)."""
    from hoststate.redact import redact_text

    sections = run_all(ctx, names)
    for sec in sections.values():
        _redact_section(sec)
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
