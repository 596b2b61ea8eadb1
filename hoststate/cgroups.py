"""A process's cgroups as the kernel lists them (``/proc/PID/cgroup``) and the CPU quota their files set (v2's
``cpu.max``, v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``): pure parsing, with no import beyond the standard
library's basics, because hoststate.ahead reads this process's quota before the command's modules are imported
(a plain snap forks its host job only where a core is free for it), and the vLLM server's placement reads the
server's (hoststate.collectors.vllm.placement)."""

from __future__ import annotations

from collections.abc import Callable


def cgroup_dirs(text: str) -> tuple[str | None, str | None]:
    """(v2 path, v1 cpu-controller directory) from ``/proc/PID/cgroup`` (``0::/path``, ``N:cpu,cpuacct:/path``)."""
    v2 = v1 = None
    for line in text.splitlines():
        num, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if num == "0" and not controllers:
            v2 = "/" + path.strip().strip("/")
        elif "cpu" in controllers.split(","):
            v1 = f"{controllers}/{path.strip().strip('/')}".rstrip("/")
    return v2, v1


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``$MAX $PERIOD``) as CPUs of quota; None for ``max`` (no limit) or a period that is
    not one; ValueError when a field is not a number."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100000
    return round(int(fields[0]) / period, 3) if period > 0 else None


def cfs_max(quota: int, period: int) -> str:
    """cgroup v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` as v2's ``cpu.max`` text (-1: ``max``), so
    that one parser reads both."""
    return f"{'max' if quota < 0 else quota} {period}"


def cpu_quota(read: Callable[[str], str | None], cgroups: str) -> float | None:
    """The smallest CPU quota, in CPUs, of the cgroup ``cgroups`` (``/proc/PID/cgroup``'s text) names and of every
    cgroup above it, as a parent's quota limits its children too (a Kubernetes pod's above its containers');
    None where none is set or none could be read. ``read(rel)``: the text of a file under the root, None when it
    cannot be read. The walk ends at the hierarchy's mount, which is the process's own cgroup in a container
    that sees its cgroup as the root."""
    v2, v1 = cgroup_dirs(cgroups)
    if v2 is not None and read("sys/fs/cgroup/cgroup.controllers") is not None:
        base, path = "sys/fs/cgroup", v2
    elif v1 is not None:
        controllers, _, rest = v1.partition("/")
        base, path = f"sys/fs/cgroup/{controllers}", rest
    else:
        return None
    parts = [p for p in path.split("/") if p]
    quotas: list[float] = []
    for depth in range(len(parts), -1, -1):
        d = "/".join([base, *parts[:depth]])
        try:
            if base == "sys/fs/cgroup":
                quota = parse_cpu_max(read(f"{d}/cpu.max") or "max")
            else:
                q, p = int(read(f"{d}/cpu.cfs_quota_us") or -1), int(read(f"{d}/cpu.cfs_period_us") or 0)
                quota = parse_cpu_max(cfs_max(q, p))
        except (ValueError, ArithmeticError):  # not a quota (a word, a number no float holds): none that can be read
            quota = None
        if quota is not None and quota > 0:
            quotas.append(quota)
    return min(quotas) if quotas else None
