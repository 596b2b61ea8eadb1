"""The `system` collector: kernel, OS, CPU topology and frequency tuning, NUMA, memory, huge pages, IOMMU.

Everything is read from files under the root prefix (/proc, /sys, /etc), never from commands, so a
captured tree snaps like a live host. Per-CPU settings are grouped into CPU ranges
(``"0-223" = "performance"``) so a 224-thread host stays readable and a single odd CPU stands out.
"""

from __future__ import annotations

import os
import re
from typing import Any

from hoststate.collectors import Context, Section
from hoststate.coverage import source
from hoststate.io import Reader

CPU = "sys/devices/system/cpu"
# Per-CPU cpufreq files: snapshot key -> file under cpuN/cpufreq/.
CPUFREQ_FILES = {
    "driver": "scaling_driver",
    "governor": "scaling_governor",
    "scaling_min_khz": "scaling_min_freq",
    "scaling_max_khz": "scaling_max_freq",
    "cpuinfo_max_khz": "cpuinfo_max_freq",
    "energy_performance_preference": "energy_performance_preference",
}
# Optional per-CPU files: only some drivers have them (EPP: intel_pstate/amd-pstate active mode).
CPUFREQ_OPTIONAL = {"energy_performance_preference"}
CPUINFO_KEYS = {
    "vendor_id": "vendor",
    "model name": "model_name",
    "cpu family": "family",
    "model": "model",
    "stepping": "stepping",
    "microcode": "microcode",
    "CPU implementer": "implementer",  # arm64
    "CPU part": "part",
}
#: Boot parameters that switch one CPU vulnerability mitigation (kernel-parameters.txt; what mitigations=off does
#: all at once): syscall, context-switch and indirect-branch costs.
MITIGATION_KEYS = ("spectre_v1", "nospectre_v1", "spectre_v2", "nospectre_v2", "spectre_v2_user", "spectre_bhi",
                   "spectre_bhb", "pti", "nopti", "kpti", "mds", "tsx", "tsx_async_abort", "l1tf", "retbleed", "srbds",
                   "mmio_stale_data", "gather_data_sampling", "reg_file_data_sampling", "spec_store_bypass_disable",
                   "nospec_store_bypass_disable", "ssbd", "spec_rstack_overflow", "noibrs", "noibpb", "ibt")
#: Boot parameters that change scheduling, interrupts, timekeeping or how much of the machine the kernel uses.
SCHEDULING_KEYS = ("preempt", "nohz", "skew_tick", "rcu_nocb_poll", "irqaffinity", "threadirqs", "kthread_cpus",
                   "clocksource", "tsc", "numa", "mem", "maxcpus", "nr_cpus", "cpufreq.default_governor")
#: Boot parameters that switch off or narrow CPU idle and frequency management (kernel-parameters.txt;
#: Documentation/admin-guide/pm/cpuidle.rst, intel_idle.rst): what idle CPUs do and how fast they wake.
POWER_KEYS = ("cpuidle.off", "cpuidle.governor", "intel_idle.states_off", "cpufreq.off")
#: Boot parameters recorded for review (power management of links, watchdogs, PCI and cgroup options, page
#: zeroing, split-lock handling).
REVIEW_KEYS = ("pcie_aspm", "nmi_watchdog", "nowatchdog", "nosoftlockup", "pci", "cgroup_disable", "audit",
               "init_on_alloc", "init_on_free", "split_lock_detect")
CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs", "intel_iommu", "amd_iommu", "iommu", "iommu.passthrough",
                "iommu.strict", "intel_pstate", "amd_pstate", "transparent_hugepage", "default_hugepagesz",
                "hugepages", "hugepagesz", "numa_balancing", "processor.max_cstate", "intel_idle.max_cstate",
                "idle", "mitigations", "nosmt", *MITIGATION_KEYS, *SCHEDULING_KEYS, *POWER_KEYS, *REVIEW_KEYS)

_CPU = "sys/devices/system/cpu"
_IOMMU_PARAMS = ("iommu.intel_iommu", "iommu.amd_iommu", "iommu.iommu", "iommu.iommu_passthrough", "iommu.iommu_strict")
#: What this collector reads (root-relative paths) -> where it lands in the ``system`` table; first match names it.
SOURCES = (
    source(rf"{_CPU}/online", "cpu.threads", "cpu.sockets", "cpu.cores", "cpufreq.**", "cpuidle.disabled", "numa.**"),
    source(rf"{_CPU}/possible", "cpu.threads", "cpu.sockets", "cpu.cores", "cpufreq.**", "cpuidle.disabled", "numa.**",
           absent=("ENOENT",)),  # only bounds the online list
    source(r"proc/sys/kernel/osrelease", "kernel.release"),
    source(r"proc/sys/kernel/version", "kernel.version"),
    source(r"proc/cmdline", "kernel.cmdline", "kernel.params", *_IOMMU_PARAMS),
    source(rf"{_CPU}/(?P<k>isolated|nohz_full)", "kernel.{k}", absent=("ENOENT",)),  # older kernels lack them
    source(r"(?:etc|usr/lib)/os-release", "os.**", absent=("ENOENT",)),  # either file may be missing
    source(r"proc/cpuinfo", *(f"cpu.{k}" for k in CPUINFO_KEYS.values())),
    source(rf"{_CPU}/cpu\d+/topology/.*", "cpu.sockets", "cpu.cores"),
    source(rf"{_CPU}/smt/(?:control|active)", "cpu.smt_control", "cpu.smt_active", absent=("ENOENT",)),
    source(rf"{_CPU}/vulnerabilities", "cpu.vulnerabilities.**", absent=("ENOENT",)),  # before 4.15, or not x86/arm64
    source(rf"{_CPU}/vulnerabilities/(?P<v>[^/]+)", "cpu.vulnerabilities.{v}"),
    *(source(rf"{_CPU}/cpu\d+/cpufreq/{name}", f"cpufreq.{key}",
             absent=("ENOENT",) if key in CPUFREQ_OPTIONAL else ()) for key, name in CPUFREQ_FILES.items()),
    source(rf"{_CPU}/cpu\d+(?:/cpufreq)?", "cpufreq.**", absent=("ENOENT",)),  # no cpufreq (a VM): absent
    source(rf"{_CPU}/intel_pstate", "cpufreq.intel_pstate_*", "cpufreq.no_turbo", absent=("ENOENT",)),
    source(rf"{_CPU}/intel_pstate/.*", "cpufreq.intel_pstate_*", "cpufreq.no_turbo"),
    source(rf"{_CPU}/amd_pstate", "cpufreq.amd_pstate_status", absent=("ENOENT",)),  # another scaling driver
    source(rf"{_CPU}/amd_pstate/.*", "cpufreq.amd_pstate_status"),
    source(rf"{_CPU}/cpufreq/boost", "cpufreq.boost", absent=("ENOENT",)),  # only some drivers have it
    source(rf"{_CPU}/cpuidle", "cpuidle.**", absent=("ENOENT",)),  # a kernel without cpuidle
    source(rf"{_CPU}/cpuidle/current_governor(?:_ro)?", "cpuidle.governor", absent=("ENOENT",)),  # by kernel
    source(rf"{_CPU}/cpuidle/.*", "cpuidle.**"),
    # Per-CPU idle states (cpuidle.rst, "Representation of Idle States"): no directory is no state on that CPU (no
    # cpuidle driver for it); a state whose name or flag could not be read leaves every count unknown.
    source(rf"{_CPU}/cpu\d+/cpuidle", "cpuidle.disabled", absent=("ENOENT",)),
    source(rf"{_CPU}/cpu\d+/cpuidle/state\d+(?:/name|/disable)?", "cpuidle.disabled"),
    source(r"sys/devices/system/node/online", "numa.nodes", "numa.cpus", "numa.absent",
           absent=("ENOENT",)),  # a kernel without NUMA: absent = true
    source(r"sys/devices/system/node/(?P<n>node\d+)/cpulist", "numa.cpus.{n}"),
    source(r"proc/sys/kernel/numa_balancing", "numa.balancing", absent=("ENOENT",)),  # a kernel without it
    source(r"proc/meminfo", "memory.**"),
    source(r"sys/kernel/mm/transparent_hugepage", "thp.**", absent=("ENOENT",)),  # built without THP
    source(r"sys/kernel/mm/transparent_hugepage/.*", "thp.**"),
    source(r"sys/kernel/mm/hugepages", "hugepages.**", absent=("ENOENT",)),  # no huge page sizes
    source(r"sys/kernel/mm/hugepages/.*", "hugepages.**"),
    source(r"sys/class/iommu", "iommu.units", absent=("ENOENT",)),  # no IOMMU class: no IOMMU units
    source(r"sys/bus/pci/devices", "p2p.**", absent=("ENOENT",)),  # no PCI bus (some VMs): nothing to say
    source(r"sys/bus/pci/devices/[^/]+/class", "p2p.**", absent=("ENOENT",)),  # no class: not a GPU
    source(r"sys/bus/pci/devices/[^/]+(?:/vendor)?", "p2p.**"),  # which devices are GPUs, where they sit
    source(r"sys/bus/pci/devices/(?P<g>[^/]+)/iommu_group", "p2p.gpus.{g}.iommu_*",
           absent=("ENOENT",)),  # no IOMMU translation for this device
    source(r"sys/kernel/iommu_groups/\d+/type", "p2p.gpus.*.iommu_type", absent=("ENOENT",)),  # before 5.11
    source(r"sys/devices/pci[^/]*(?:/[^/]+)*/(?P<b>[^/]+)/config", "p2p.bridges.{b}.**"),
)


#: The most CPUs a kernel can have (CONFIG_NR_CPUS tops out at 8192 on x86-64 and ppc64, 4096 on arm64): a cpulist
#: naming a CPU at or above it was not printed by a kernel, and expanding it could cost gigabytes.
MAX_CPUS = 16384


def parse_cpulist(text: str, limit: int = MAX_CPUS) -> list[int]:
    """Kernel cpulist format (``0-3,8,10-11``) to a sorted list; empty text is no CPUs.

    ValueError on junk, a reversed range, or a CPU at or above ``limit`` (checked before a range is expanded, so
    ``0-99999999`` costs nothing).
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi) if hi else int(lo)
        if first < 0 or last < first:
            raise ValueError(f"bad range {part!r}")
        if last >= limit:
            raise ValueError(f"CPU {last} beyond the {limit} possible")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def possible_cpus(r: Reader) -> int:
    """How many CPU numbers this kernel can have (``cpu/possible``), bounded by MAX_CPUS; MAX_CPUS when unknown."""
    text = r.read(f"{CPU}/possible", record=False)
    try:
        cpus = parse_cpulist(text) if text is not None else []
    except ValueError:
        cpus = []
    return cpus[-1] + 1 if cpus else MAX_CPUS


def format_cpulist(cpus: list[int]) -> str:
    """Inverse of parse_cpulist, with maximal ranges."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def group_by_value(values: dict[int, Any]) -> dict[str, Any]:
    """{cpu: value} -> {"0-3,8": value}: one entry per distinct value."""
    groups: dict[Any, list[int]] = {}
    for cpu, value in values.items():
        groups.setdefault(value, []).append(cpu)
    return {format_cpulist(cpus): value for value, cpus in groups.items()}


def parse_os_release(text: str) -> dict[str, str]:
    """os-release(5) lines to a dict with lower-case keys; quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip().lower()] = value
    return out


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The first processor block's identity fields (vendor, model, microcode ...)."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in CPUINFO_KEYS and CPUINFO_KEYS[key] not in out:
            name = CPUINFO_KEYS[key]
            out[name] = int(value) if name in ("family", "model", "stepping") and value.isdigit() else value
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo to bytes per field."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?", line)
        if m:
            factor = 1024 if line.rstrip().endswith("kB") else 1
            out[m.group(1)] = int(m.group(2)) * factor
    return out


def cmdline_args(text: str) -> list[tuple[str, str | None]]:
    """The kernel's own split of a boot command line (lib/cmdline.c next_arg): (name, value or None) per parameter,
    ``"`` around spaces, the quotes around a value dropped, and nothing after a bare ``--`` (kernel/params.c
    parse_args: the rest goes to init)."""
    out: list[tuple[str, str | None]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            break
        quoted = text[i] == '"'
        start = i + quoted
        in_quote, equals, j = quoted, -1, start
        while j < n and (in_quote or not text[j].isspace()):
            if equals < 0 and j > start and text[j] == "=":  # next_arg: an "=" first in the parameter is its name's
                equals = j
            if text[j] == '"':
                in_quote = not in_quote
            j += 1
        arg = text[start:j]
        if quoted and arg.endswith('"'):
            arg = arg[:-1]
        name, value = (arg, None) if equals < 0 else (text[start:equals], arg[equals - start + 1:])
        if value is not None and value.startswith('"'):
            value = value[1:]  # next_arg: "Don't include quotes in value." (the closing one went with the arg's)
            if not quoted and value.endswith('"'):
                value = value[:-1]
        if value is None and name == "--":
            break
        out.append((name, value))
        i = j + 1
    return out


#: The recorded parameters by the name the kernel matches: "Hyphens (dashes) and underscores are equivalent in
#: parameter names" (Documentation/admin-guide/kernel-parameters.rst; kernel/params.c parameq, dash2underscore).
_CMDLINE_NAMES = {key.replace("-", "_"): key for key in CMDLINE_KEYS}


#: Parameters whose value is a CPU list (kernel-parameters.rst, "cpu lists"; lib/bitmap.c bitmap_parselist), isolcpus
#: after its flags (kernel/sched/isolation.c housekeeping_isolcpus_setup: nohz, domain, managed_irq, in any order).
CPULIST_KEYS = frozenset({"isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity", "kthread_cpus"})
_PLAIN_CPULIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")


def cpulist_value(value: str) -> str:
    """A CPU-list parameter's value as the set of CPUs it names, with maximal ranges (``2,3,4-5`` is ``2-5``), and
    isolcpus's flags in one order; anything else (``N``, ``all``, a ``:used/group`` stride, a reversed range) as
    given."""
    parts = value.split(",")
    flags = []
    while parts and parts[0] and (parts[0].replace("_", "").isalpha()):
        flags.append(parts.pop(0))
    rest = ",".join(parts)
    if not _PLAIN_CPULIST.fullmatch(rest):
        return value
    try:
        cpus = format_cpulist(parse_cpulist(rest))
    except ValueError:
        return value
    return ",".join([*sorted(set(flags)), cpus])


def parse_cmdline(text: str) -> dict[str, str]:
    """Boot parameters that change performance, by the name the kernel reads them as (``nohz-full`` is
    ``nohz_full``), each with its value as the kernel passes it on (a bare flag maps to ""; the last one given
    wins), a CPU list as the CPUs it names. The line as written is kept in ``kernel.cmdline``."""
    out: dict[str, str] = {}
    for name, value in cmdline_args(text):
        key = _CMDLINE_NAMES.get(name.replace("-", "_"))
        if key is not None:
            out[key] = cpulist_value(value) if key in CPULIST_KEYS and value else value or ""
    return out


def bracketed(text: str) -> str:
    """The selected choice of a sysfs multiple-choice file: ``always [madvise] never`` -> madvise."""
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


#: How a subsystem absent by design is recorded: a value, so a VM without cpufreq is ``ok`` and still differs from a
#: host that has it.
ABSENT = {"absent": True}


def missing(r: Reader, rel: str) -> bool | None:
    """True when ``rel`` does not exist (ENOENT/ENOTDIR: knowledge, nothing recorded), False when it exists, None
    when it could not be looked at (the reason is recorded as unreadable)."""
    if r.stat(rel) is not None:
        return False
    key = rel.lstrip("/")
    if r.unreadable.get(key) in ("ENOENT", "ENOTDIR"):
        del r.unreadable[key]
        return True
    return None


def _kernel(r: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, rel in (("release", "proc/sys/kernel/osrelease"), ("version", "proc/sys/kernel/version")):
        value = r.read(rel)
        if value is not None:
            out[key] = value
    cmdline = r.read("proc/cmdline")
    if cmdline is not None:
        out["cmdline"] = cmdline
        params = parse_cmdline(cmdline)
        if params:
            out["params"] = params
    for key in ("isolated", "nohz_full"):
        value = r.read(f"{CPU}/{key}", record=False)
        if value is not None:
            out[key] = value
    return out


def _os(r: Reader) -> dict[str, Any]:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = r.read(rel, record=False)
        if text is not None:
            info = parse_os_release(text)
            return {k: info[k] for k in ("id", "version_id", "pretty_name", "version_codename") if k in info}
    return {}  # neither file exists (an observed absence); any other failure was recorded by the reads


def _cpu(r: Reader, cpus: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    text = r.read("proc/cpuinfo")
    if text is not None:
        out.update(parse_cpuinfo(text))
    packages: dict[int, int] = {}
    cores: set[tuple[int, int]] = set()
    for cpu in cpus:
        pkg = r.read_int(f"{CPU}/cpu{cpu}/topology/physical_package_id")
        core = r.read_int(f"{CPU}/cpu{cpu}/topology/core_id")
        if pkg is not None:
            packages[cpu] = pkg
            if core is not None:
                cores.add((pkg, core))
    if cpus:
        out["threads"] = len(cpus)
    if packages:
        out["sockets"] = len(set(packages.values()))
    if cores:
        out["cores"] = len(cores)
    smt = r.read(f"{CPU}/smt/control", record=False)
    if smt is not None:
        out["smt_control"] = smt
        active = r.read_int(f"{CPU}/smt/active", record=False)
        if active is not None:
            out["smt_active"] = bool(active)
    vulnerabilities = _vulnerabilities(r)
    if vulnerabilities:
        out["vulnerabilities"] = vulnerabilities
    return out


def _vulnerabilities(r: Reader) -> dict[str, str]:
    """The mitigation in force for each CPU vulnerability the kernel knows (``Not affected``, ``Vulnerable``,
    ``Mitigation: ...``): what ``mitigations=`` and the per-vulnerability boot parameters resolve to on this CPU
    and microcode. The boot parameters are recorded and rated on their own (``kernel.params``): a snapshot pair that
    differs only in the boot line, with this table read the same, still shows the parameter."""
    names = r.listdir(f"{CPU}/vulnerabilities", record=False)
    if names is None:
        missing(r, f"{CPU}/vulnerabilities")  # absent: nothing to say; unreadable: recorded
        return {}
    out: dict[str, str] = {}
    for name in sorted(n for n in names if not n.startswith(".")):
        value = r.read(f"{CPU}/vulnerabilities/{name}")
        if value is not None:
            out[name] = value.strip()
    return out


def _cpufreq(r: Reader, cpus: list[int]) -> dict[str, Any]:
    """Per-CPU frequency settings grouped into ranges; a host without cpufreq (a VM) records ``absent = true``."""
    if not cpus:
        return {}
    gone = missing(r, f"{CPU}/cpu{cpus[0]}/cpufreq")
    if gone:
        return dict(ABSENT)
    if gone is None:
        return {}
    out: dict[str, Any] = {}
    for key, name in CPUFREQ_FILES.items():
        values: dict[int, Any] = {}
        for cpu in cpus:
            rel = f"{CPU}/cpu{cpu}/cpufreq/{name}"
            optional = key in CPUFREQ_OPTIONAL
            if optional and not r.exists(rel):
                continue
            text = r.read(rel)
            if text is not None:
                values[cpu] = int(text) if text.isdigit() else text
        if values:
            out[key] = group_by_value(values)
    if r.isdir(f"{CPU}/intel_pstate"):
        for key in ("status", "no_turbo", "max_perf_pct", "min_perf_pct"):
            value = r.read(f"{CPU}/intel_pstate/{key}")
            if value is not None:
                name = "no_turbo" if key == "no_turbo" else f"intel_pstate_{key}"
                out[name] = int(value) if value.isdigit() else value
    if r.isdir(f"{CPU}/amd_pstate"):
        value = r.read(f"{CPU}/amd_pstate/status")
        if value is not None:
            out["amd_pstate_status"] = value
    if r.exists(f"{CPU}/cpufreq/boost"):
        value = r.read_int(f"{CPU}/cpufreq/boost")
        if value is not None:
            out["boost"] = value
    return out


def _cpuidle(r: Reader, cpus: list[int]) -> dict[str, Any]:
    if not r.isdir(f"{CPU}/cpuidle"):
        return {}
    out: dict[str, Any] = {}
    for key, name in (("driver", "current_driver"), ("governor", "current_governor_ro")):
        value = r.read(f"{CPU}/cpuidle/{name}", record=key == "driver")
        if value is None and key == "governor":
            value = r.read(f"{CPU}/cpuidle/current_governor", record=False)
        if value is not None:
            out[key] = value
    disabled = idle_states_disabled(r, cpus)
    if disabled:
        out["disabled"] = disabled
    return out


_STATE = re.compile(r"state(\d+)")


def idle_states_disabled(r: Reader, cpus: list[int]) -> dict[str, int]:
    """For each idle state by name (``POLL``, ``C1``, ``C1E``, ``C6``), on how many online CPUs it is disabled at
    run time: ``cpuN/cpuidle/stateM/disable`` = 1 (Linux Documentation/admin-guide/pm/cpuidle.rst), what
    ``cpupower idle-set -d/-D`` writes. 0 is a state every CPU may enter; a count below the CPU count is a state
    disabled on some CPUs only. Only these sysfs files are read: ``/dev/cpu_dma_latency`` is never opened (opening
    it adds a PM QoS request). A name repeated on one CPU keeps its state directory: ``"C1 (state2)"``."""
    counts: dict[str, int] = {}
    for cpu in cpus:
        base = f"{CPU}/cpu{cpu}/cpuidle"
        entries = r.listdir(base, record=False)
        if entries is None:
            continue  # no directory: no idle state on this CPU (any other failure is recorded)
        seen: set[str] = set()
        for entry in sorted((e for e in entries if _STATE.fullmatch(e)), key=lambda e: int(e[5:])):
            name = r.read(f"{base}/{entry}/name")
            flag = r.read_int(f"{base}/{entry}/disable")
            if name is None or flag is None:
                continue  # recorded: every count is unknown (SOURCES)
            key = entry if not name else name if name not in seen else f"{name} ({entry})"
            seen.add(name)
            counts[key] = counts.get(key, 0) + (1 if flag else 0)
    return counts


def _numa(r: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    online = r.read("sys/devices/system/node/online", record=False)
    nodes = None
    try:
        nodes = parse_cpulist(online) if online is not None else None
    except ValueError as err:
        r.note("sys/devices/system/node/online", f"not a node list: {str(err)[:80]}")
    if nodes is not None:
        out["nodes"] = len(nodes)
        cpus = {}
        for node in nodes:
            text = r.read(f"sys/devices/system/node/node{node}/cpulist")
            if text is not None:
                cpus[f"node{node}"] = text
        if cpus:
            out["cpus"] = cpus
    elif online is None and missing(r, "sys/devices/system/node/online"):
        out.update(ABSENT)  # a kernel without NUMA support: one memory node
    if missing(r, "proc/sys/kernel/numa_balancing"):
        return out
    balancing = r.read_int("proc/sys/kernel/numa_balancing")
    if balancing is not None:
        out["balancing"] = balancing
    return out


def _memory(r: Reader) -> dict[str, Any]:
    text = r.read("proc/meminfo")
    if text is None:
        return {}
    info = parse_meminfo(text)
    return {"total_bytes": info["MemTotal"]} if "MemTotal" in info else {}


def _thp(r: Reader) -> dict[str, Any]:
    if missing(r, "sys/kernel/mm/transparent_hugepage"):
        return dict(ABSENT)  # a kernel built without transparent huge pages
    out: dict[str, Any] = {}
    for key in ("enabled", "defrag"):
        value = r.read(f"sys/kernel/mm/transparent_hugepage/{key}")
        if value is not None:
            out[key] = bracketed(value)
    return out


def _hugepages(r: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in r.listdir("sys/kernel/mm/hugepages", record=False) or []:
        count = r.read_int(f"sys/kernel/mm/hugepages/{entry}/nr_hugepages")
        if count is not None:
            out[entry.removeprefix("hugepages-")] = count
    return out


def _iommu(r: Reader, params: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    units = r.listdir("sys/class/iommu", record=False)
    if units is None and missing(r, "sys/class/iommu"):
        units = []  # no IOMMU class: no IOMMU units (a VM without a virtual IOMMU)
    if units is not None:
        out["units"] = len([u for u in units if not u.startswith(".")])  # sysfs has no dotfiles; a tree may hold .keep
    for key in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict"):
        if key in params:
            out[key.replace(".", "_")] = params[key]
    return out


#: PCI classes of NVIDIA GPUs (3D controller, VGA) and the vendor id.
GPU_CLASSES = ("0x0302", "0x0300")
NVIDIA = "0x10de"
#: ACS control bits (include/uapi/linux/pci_regs.h PCI_ACS_*); RR, CR and EC send peer-to-peer requests up to the
#: root complex (and through the IOMMU) instead of across the switch.
ACS_BITS = (("SV", 0x01), ("TB", 0x02), ("RR", 0x04), ("CR", 0x08), ("UF", 0x10), ("EC", 0x20), ("DT", 0x40))
ACS_REDIRECT = 0x04 | 0x08 | 0x20
PCI_EXT_CAP_ID_ACS = 0x0D
_BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)


def acs_control(config: bytes) -> int | None:
    """The ACS control register from a device's config space (extended capabilities from 0x100), None when the
    device has no ACS capability. ValueError when only the 64 or 256 bytes an unprivileged read gets are there."""
    if len(config) < 0x104:
        raise ValueError(f"config space is {len(config)} bytes: the extended capabilities need root to read")
    offset, seen = 0x100, 0
    while offset and seen < 64:  # a loop in the chain ends here
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            return int.from_bytes(config[offset + 6:offset + 8], "little")
        offset, seen = (header >> 20) & 0xFFC, seen + 1
        if offset < 0x100 or offset + 8 > len(config):
            return None
    return None


def _gpu_functions(r: Reader) -> list[str]:
    """PCI addresses of the NVIDIA GPUs (``sys/bus/pci/devices``); [] without a PCI bus."""
    out = []
    for bdf in r.listdir("sys/bus/pci/devices", record=False) or []:
        cls = r.read(f"sys/bus/pci/devices/{bdf}/class", record=False)
        if cls is None or not cls.startswith(GPU_CLASSES):
            continue
        if r.read(f"sys/bus/pci/devices/{bdf}/vendor") == NVIDIA:
            out.append(bdf)
    return out


def _bridges(r: Reader, bdf: str) -> tuple[str, list[str]] | None:
    """(the device's directory under sys/devices, the bridges above it, root port first), from the bus link."""
    link = r.readlink(f"sys/bus/pci/devices/{bdf}")
    if link is None:
        return None
    path = os.path.normpath(os.path.join("sys/bus/pci/devices", link))
    parts = path.split("/")
    if not path.startswith("sys/devices/pci") or parts[-1] != bdf:
        r.note(f"sys/bus/pci/devices/{bdf}", "not a link into sys/devices/pci*")
        return None
    return path, [p for p in parts[3:-1] if _BDF.fullmatch(p)]


def _p2p(r: Reader) -> dict[str, Any]:
    """The peer-to-peer path between GPUs: each GPU's IOMMU group and its default domain type (identity is
    passthrough; DMA and DMA-FQ translate every peer access), and ACS on each bridge between a GPU and its root
    port (request or completion redirect sends peer traffic up to the root complex). Empty without NVIDIA GPUs."""
    gpus: dict[str, Any] = {}
    bridges: dict[str, Any] = {}
    for bdf in _gpu_functions(r):
        entry: dict[str, Any] = {}
        group = r.readlink(f"sys/bus/pci/devices/{bdf}/iommu_group", record=False)
        if group is None and missing(r, f"sys/bus/pci/devices/{bdf}/iommu_group"):
            entry["iommu_group"] = "none"  # no IOMMU translates this device
        elif group is not None:
            entry["iommu_group"] = group.rsplit("/", 1)[-1]
            kind = r.read(f"sys/kernel/iommu_groups/{entry['iommu_group']}/type", record=False)
            if kind is not None:
                entry["iommu_type"] = kind
        found = _bridges(r, bdf)
        if found is not None:
            path, above = found
            entry["bridges"] = above
            base = path.rsplit("/", 1 + len(above))[0]
            for i, bridge in enumerate(above):
                if bridge not in bridges:
                    bridges[bridge] = _acs(r, "/".join([base, *above[:i + 1]]) + "/config")
        gpus[bdf] = entry
    out: dict[str, Any] = {}
    if gpus:
        out["gpus"] = gpus
    if bridges:
        out["bridges"] = {k: v for k, v in bridges.items() if v}
    return out


def _acs(r: Reader, rel: str) -> dict[str, Any]:
    """One bridge's ACS: the control bits set, and whether peer requests are redirected upstream."""
    data = r.read_bytes(rel, max_bytes=4096)
    if data is None:
        return {}
    try:
        ctrl = acs_control(data)
    except ValueError as err:
        r.note(rel, str(err))
        return {}
    if ctrl is None:
        return {"acs_capability": False}  # no ACS here: peer traffic is never redirected by this bridge
    return {"acs_capability": True, "acs": [name for name, bit in ACS_BITS if ctrl & bit],
            "acs_redirect": bool(ctrl & ACS_REDIRECT)}


def collect(ctx: Context) -> Section:
    section = Section()
    r = Reader(ctx.root, section.unreadable)
    online = r.read(f"{CPU}/online")
    try:
        cpus = parse_cpulist(online, possible_cpus(r)) if online is not None else []
    except ValueError as err:
        r.note(f"{CPU}/online", f"not a cpulist: {str(err)[:80]}")
        cpus = []
    kernel = _kernel(r)
    data: dict[str, Any] = {
        "kernel": kernel,
        "os": _os(r),
        "cpu": _cpu(r, cpus),
        "cpufreq": _cpufreq(r, cpus),
        "cpuidle": _cpuidle(r, cpus),
        "numa": _numa(r),
        "memory": _memory(r),
        "thp": _thp(r),
        "hugepages": _hugepages(r),
        "iommu": _iommu(r, kernel.get("params", {})),
        "p2p": _p2p(r),
    }
    section.data = {k: v for k, v in data.items() if v}
    if not any(data[k] for k in ("kernel", "cpu", "memory")):  # absence markers alone do not make a host
        section.data = {}
        section.status, section.reason = "absent", "no /proc or /sys under the root"
    return section.settle()
