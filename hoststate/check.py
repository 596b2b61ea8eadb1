"""Advisories from one snapshot: states that are legal but make a benchmark misleading, each with a stable code.

Codes are ``HS`` + 3 digits; the hundreds digit is the area (1 CPU/OS, 2 DSA, 3 GPU, 4 vLLM, 9 snapshot). A code is
never reused and keeps its kebab name; docs/codes.md has one section per code. Each check is a pure function of
the snapshot mapping, listed in CHECKS next to its code. hoststate.render.check shows them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from hoststate.coverage import UNKNOWN, parse_entry
from hoststate.nvml import EVENT_REASONS
from hoststate.paths import Path, format_path
from hoststate.render.text import table

#: (code, kebab-name, area, summary). Append only; never renumber.
CODES: tuple[tuple[str, str, str, str], ...] = (
    ("HS101", "governor-not-performance", "cpu", "CPU frequency governor is not 'performance' on some CPUs"),
    ("HS102", "numa-balancing-enabled", "cpu", "automatic NUMA balancing is on"),
    ("HS201", "wq-config-not-saved", "dsa", "a DSA WQ is enabled but the configuration is not saved (lost at reboot)"),
    ("HS202", "wq-enabled-no-clients", "dsa", "a DSA WQ is enabled but no process uses it (clients = 0)"),
    ("HS203", "dsa-device-halted", "dsa", "a DSA device is halted"),
    ("HS301", "gpu-clock-events-active", "gpu", "clock-event reasons other than idle are active"),
    ("HS302", "foreign-gpu-processes", "gpu", "processes other than the vLLM server use a GPU"),
    ("HS303", "ecc-pending-differs", "gpu", "ECC mode pending differs from current (changes at next reset)"),
    ("HS304", "mig-pending-differs", "gpu", "MIG mode pending differs from current (changes at next reset)"),
    ("HS305", "nvlink-links-down", "gpu", "NVLink links are down"),
    ("HS401", "cudagraph-declared-observed-differ", "vllm", "declared CUDA graph mode differs from the observed one"),
    ("HS402", "suffix-decoding-moe", "vllm", "suffix speculative decoding on a mixture-of-experts model"),
    ("HS403", "suffix-decoding-405b-fp8-high-gmu", "vllm",
     "suffix decoding on a 405B FP8 model at high gpu_memory_utilization"),
    ("HS901", "collector-failed", "snapshot", "a collector failed (error, timeout or denied)"),
    ("HS902", "values-unreadable", "snapshot", "a collector could not read some values"),
    ("HS306", "gpu-missing", "gpu", "NVML counts more GPUs than the snapshot describes (a GPU lost or unreadable)"),
    ("HS404", "vllm-version-unknown", "vllm", "the vLLM version is unknown: the declared mode rests on assumed rules"),
)
_NAMES = {code: name for code, name, _, _ in CODES}
SEVERITIES = ("warning", "info")


@dataclass
class Advisory:
    code: str
    name: str
    severity: str
    message: str
    path: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _adv(code: str, severity: str, message: str, path: Path | None = None) -> Advisory:
    return Advisory(code, _NAMES[code], severity, message, format_path(path) if path else None)


_table = table  # the one helper of the presentation layer (hoststate.render.text.table)


# -- CPU / OS ----------------------------------------------------------------------------------------------------


def check_governor(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for cpus, governor in _table(snap, "system", "cpufreq", "governor").items():
        if governor != "performance":
            yield _adv("HS101", "info", f"CPUs {cpus} use governor {governor!r}: host-side latency (scheduling, "
                       "sampling, tokenisation) varies with load; use 'performance' for benchmarks",
                       ("system", "cpufreq", "governor", cpus))


def check_numa_balancing(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    value = _table(snap, "system", "numa").get("balancing")
    if isinstance(value, int) and not isinstance(value, bool) and value != 0:
        yield _adv("HS102", "info", f"kernel.numa_balancing = {value}: page-migration scans run under the server; "
                   "set it to 0 for benchmarks", ("system", "numa", "balancing"))


# -- DSA ---------------------------------------------------------------------------------------------------------


def _enabled_wqs(snap: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    for dev, device in sorted(_table(snap, "dsa", "devices").items()):
        for wq, attrs in sorted(_table(device, "wqs").items()):
            if isinstance(attrs, Mapping) and attrs.get("state") == "enabled":
                yield dev, wq, attrs


def check_wq_saved(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    saved = _table(snap, "accel_config", "saved")
    if not saved:
        return  # the saved configuration was not examined: nothing to say
    enabled = list(_enabled_wqs(snap))
    if not enabled:
        return
    names = ", ".join(f"{dev}/{wq}" for dev, wq, _ in enabled)
    where = saved.get("path", "/etc/accel-config/accel-config.conf")
    if saved.get("present") is False:
        yield _adv("HS201", "warning", f"{len(enabled)} enabled WQ(s) ({names}) but no saved configuration at "
                   f"{where}: the configuration is lost at reboot; run `accel-config save-config`",
                   ("accel_config", "saved", "present"))
    elif saved.get("matches_live") is False:
        diffs = saved.get("differences") or []
        extra = f" ({len(diffs)} difference(s), e.g. {diffs[0]})" if diffs else ""
        yield _adv("HS201", "warning", f"the saved configuration at {where} does not match the live one{extra}: a "
                   "reboot restores a different DSA layout; run `accel-config save-config`",
                   ("accel_config", "saved", "matches_live"))


def check_wq_clients(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for dev, wq, attrs in _enabled_wqs(snap):
        if attrs.get("clients") == 0:
            yield _adv("HS202", "warning", f"{dev}/{wq} is enabled ({attrs.get('mode', '?')}, "
                       f"{attrs.get('type', '?')}) but has 0 clients: no process uses it, so it cannot explain a "
                       "performance change", ("dsa", "devices", dev, "wqs", wq, "clients"))


def check_dsa_halted(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for dev, device in sorted(_table(snap, "dsa", "devices").items()):
        if isinstance(device, Mapping) and device.get("state") == "halted":
            yield _adv("HS203", "warning", f"{dev} is halted: its WQs accept no work until the device is reset "
                       "and re-enabled", ("dsa", "devices", dev, "state"))


# -- GPU ---------------------------------------------------------------------------------------------------------

#: NVML clock-event reason bits (hoststate.collectors.gpu, the one table); 0x1 is idle, the only harmless one here.
EVENT_REASON_BITS = dict(EVENT_REASONS)
_IDLE_NAMES = {"gpu_idle", "idle", "none"}


def _gpus(snap: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for uuid, dev in sorted(_table(snap, "gpu", "devices").items()):
        if isinstance(dev, Mapping):
            yield uuid, dev


def _event_reasons(value: Any) -> list[str]:
    """Active reasons other than idle, from a bitmask or a list / table of names."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [name for bit, name in EVENT_REASON_BITS.items() if value & bit and bit != 0x1] + (
            [f"0x{value & ~0x1FF:x}"] if value & ~0x1FF else [])
    if isinstance(value, str) and value.startswith("0x"):
        try:
            return _event_reasons(int(value, 16))
        except ValueError:
            return []
    if isinstance(value, list):
        return [str(v) for v in value if str(v).lower() not in _IDLE_NAMES]
    if isinstance(value, Mapping):
        return [str(k) for k, v in value.items() if v is True and str(k).lower() not in _IDLE_NAMES]
    return []


def check_clock_events(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for uuid, dev in _gpus(snap):
        for key, value in sorted(_table(dev, "observed").items()):
            if "event_reason" in key or "throttle_reason" in key:
                active = _event_reasons(value)
                if active:
                    yield _adv("HS301", "warning", f"GPU {dev.get('index', uuid)} has clock-event reasons active: "
                               f"{', '.join(active)}: clocks were held down when the snapshot was taken; check "
                               "power limits, cooling and application clocks",
                               ("gpu", "devices", uuid, "observed", key))


def _vllm_pids(snap: Mapping[str, Any]) -> set[int]:
    pids = {s.get("pid") for s in _servers(snap).values()}
    return {p for p in pids if isinstance(p, int)}


def check_foreign_processes(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    """HS302: processes on a GPU that are not the benchmark's. Where the snapshot says which are not (``occupancy``,
    decided when it was taken: the server, its descendants, and processes named as vLLM's that the invoking user
    runs; hoststate.collectors.gpu_occupancy), a process it does not list as foreign is the benchmark's; otherwise
    only the described servers' pids are: a name says nothing of who runs it."""
    own = _vllm_pids(snap)
    for uuid, dev in _gpus(snap):
        observed = _table(dev, "observed")
        occupancy = dev.get("occupancy") if isinstance(dev.get("occupancy"), Mapping) else None
        named_foreign = occupancy.get("foreign_process_names", []) if occupancy is not None else None
        for key in sorted(k for k in observed if "process" in k):
            procs = observed[key]
            if not isinstance(procs, list):
                continue
            foreign = []
            for proc in procs:
                pid = proc.get("pid") if isinstance(proc, Mapping) else proc
                name = str(proc.get("name", "")) if isinstance(proc, Mapping) else ""
                if pid in own or (named_foreign is not None and key == "processes"
                                  and (name or f"pid {pid}") not in named_foreign):
                    continue
                foreign.append(f"{pid}" + (f" ({name})" if name else ""))
            if foreign:
                yield _adv("HS302", "warning", f"GPU {dev.get('index', uuid)} is used by other processes: "
                           f"{', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}: they compete for memory "
                           "and SMs and contaminate the measurement", ("gpu", "devices", uuid, "observed", key))


def _pending_pairs(dev: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any, Any]]:
    """(pending key, current value, pending value) for ``<prefix>..._pending`` keys with a current sibling."""
    for key in sorted(dev):
        if key.startswith(prefix) and key.endswith("_pending"):
            stem = key[: -len("_pending")]
            for cur_key in (stem + "_current", stem):
                if cur_key in dev:
                    yield key, dev[cur_key], dev[key]
                    break


def _check_pending(snap: Mapping[str, Any], code: str, prefix: str, what: str) -> Iterator[Advisory]:
    for uuid, dev in _gpus(snap):
        for key, current, pending in _pending_pairs(dev, prefix):
            if current != pending:
                yield _adv(code, "warning", f"GPU {dev.get('index', uuid)}: {what} is {current!r} now but "
                           f"{pending!r} after the next GPU reset or reboot: a baseline taken now will not match "
                           "the host after that", ("gpu", "devices", uuid, key))


def check_ecc_pending(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    yield from _check_pending(snap, "HS303", "ecc", "ECC mode")


def check_mig_pending(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    yield from _check_pending(snap, "HS304", "mig", "MIG mode")


_DOWN = {"inactive", "down", "disabled", "off", "0", "false"}
_TOTAL_KEYS = ("links_total", "links_supported", "links_max", "link_count", "links")


def check_nvlink_down(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for uuid, dev in _gpus(snap):
        nvlink = _table(dev, "nvlink")
        if not nvlink:
            continue
        down: list[str] = []
        active = nvlink.get("links_active")
        total = next((nvlink[k] for k in _TOTAL_KEYS if isinstance(nvlink.get(k), int)), None)
        for link, info in sorted(_table(nvlink, "links").items()):
            state = info.get("state", info.get("active")) if isinstance(info, Mapping) else info
            if str(state).lower() in _DOWN:
                down.append(str(link))
        if down:
            msg = f"links {', '.join(down)} are down"
        elif isinstance(active, int) and isinstance(total, int) and active < total:
            msg = f"{active} of {total} links active"
        else:
            continue
        yield _adv("HS305", "warning", f"GPU {dev.get('index', uuid)}: NVLink {msg}: tensor-parallel traffic falls "
                   "back to fewer links or PCIe; check `nvidia-smi nvlink -s` and reseat or reset",
                   ("gpu", "devices", uuid, "nvlink"))


def check_gpu_missing(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    """A GPU NVML counts but could not describe (GpuIsLost, fallen off the bus) changes what a TP run can use."""
    gpu = _table(snap, "gpu")
    count, described = gpu.get("count"), len(list(_gpus(snap)))
    if isinstance(count, bool) or not isinstance(count, int) or count <= described:
        return
    unread = _table(snap, "collectors", "gpu", "unreadable")
    why = sorted({str(v) for k, v in unread.items() if str(k).startswith("devices")})
    yield _adv("HS306", "warning", f"{count - described} of {count} GPUs not described"
               f"{' (' + ', '.join(why) + ')' if why else ''}: a lost GPU leaves tensor-parallel runs without it and "
               "its NVLink peers with fewer links; check `nvidia-smi -q`, reset or service it before a benchmark",
               ("gpu", "count"))


# -- vLLM --------------------------------------------------------------------------------------------------------


def _servers(snap: Mapping[str, Any]) -> dict[Path, Mapping[str, Any]]:
    """The described vLLM servers by their table path: [vllm] itself, or each [vllm.servers."<port>"]."""
    vllm = _table(snap, "vllm")
    out: dict[Path, Mapping[str, Any]] = {}
    if any(k in vllm for k in ("args", "model", "cudagraph", "argv")):
        out[("vllm",)] = vllm
    for port, server in sorted(_table(vllm, "servers").items()):
        if isinstance(server, Mapping):
            out[("vllm", "servers", port)] = server
    return out


def check_cudagraph(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for path, server in _servers(snap).items():
        graph = _table(server, "cudagraph")
        declared, observed = graph.get("declared"), graph.get("observed")
        if declared and observed and str(declared).upper() != str(observed).upper():
            source = f" (from {graph['observed_from']})" if graph.get("observed_from") else ""
            yield _adv("HS401", "warning", f"declared CUDA graph mode {declared} but the server used {observed}"
                       f"{source}: a runtime downgrade; pin a mode the attention backend supports, or record the "
                       "observed one with the result", (*path, "cudagraph", "observed"))


def check_vllm_version(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    """Without a version, the declared CUDA graph mode follows the newest rules hoststate knows: say so."""
    for path, server in _servers(snap).items():
        graph = _table(server, "cudagraph")
        if server.get("version") is None and graph.get("declared"):
            rules = graph.get("rules_version")
            yield _adv("HS404", "warning", "the vLLM version is unknown"
                       + (f": the rules of {rules} (newest known) were assumed" if rules else "")
                       + f" for the declared mode {graph['declared']}; give --vllm-version (or let the server's "
                       "/version or log say it)", (*path, "version"))


def _spec_config(server: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = _table(server, "args").get("speculative_config")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            return {}
    return spec if isinstance(spec, Mapping) else {}


def _model(server: Mapping[str, Any]) -> str:
    return str(server.get("model") or _table(server, "args").get("model") or "")


#: Model-name patterns of mixture-of-experts families (matched case-insensitively against the model id).
MOE_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"deepseek-(r1|v2|v3|coder-v2)", r"mixtral", r"\d+b-a\d+(\.\d+)?b", r"moe", r"gpt-oss", r"llama-4",
    r"dbrx", r"kimi-k2", r"glm-4\.[5-9]", r"grok", r"jamba", r"minimax", r"arctic-(base|instruct)", r"hunyuan-a",
))


def is_moe(server: Mapping[str, Any]) -> bool:
    if _table(server, "args").get("enable_expert_parallel") is True:
        return True
    model = _model(server)
    return any(p.search(model) for p in MOE_PATTERNS)


def check_suffix_moe(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for path, server in _servers(snap).items():
        if _spec_config(server).get("method") == "suffix" and is_moe(server):
            yield _adv("HS402", "warning", f"suffix decoding on {_model(server) or 'a'} mixture-of-experts model: "
                       "a published sweep measured -49 % to -63.5 % on DeepSeek-R1 (671B MoE) on every corpus; "
                       "measure with and without it before keeping it", (*path, "args", "speculative_config"))


#: gpu_memory_utilization from which a 405B FP8 + suffix K=32 engine init failed (num_gpu_blocks=0; docs/codes.md).
HIGH_GMU = 0.85


def _default_gmu(version: Any) -> float:
    """vLLM's default gpu_memory_utilization: 0.9 up to 0.12, 0.92 later."""
    m = re.match(r"(\d+)\.(\d+)", str(version or ""))
    if m and (int(m.group(1)), int(m.group(2))) > (0, 12):
        return 0.92
    return 0.9


def check_suffix_405b_fp8(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for path, server in _servers(snap).items():
        if _spec_config(server).get("method") != "suffix":
            continue
        args = _table(server, "args")
        model = _model(server)
        fp8 = "fp8" in model.lower() or str(args.get("quantization", "")).lower() == "fp8"
        if not (re.search(r"405b", model, re.IGNORECASE) and fp8):
            continue
        gmu = args.get("gpu_memory_utilization")
        given = isinstance(gmu, (int, float)) and not isinstance(gmu, bool)
        value = float(gmu) if given else _default_gmu(server.get("version"))
        if value >= HIGH_GMU:
            yield _adv("HS403", "warning", f"suffix decoding on {model} at gpu_memory_utilization {value:g}"
                       f"{'' if given else ' (vLLM default)'}: a published run failed at engine init "
                       "(num_gpu_blocks=0) at 0.85 with K=32; check the KV block count in the log first",
                       (*path, "args", "gpu_memory_utilization" if given else "speculative_config"))


# -- snapshot ----------------------------------------------------------------------------------------------------


def _collectors(snap: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for name, entry in sorted(_table(snap, "collectors").items()):
        if isinstance(entry, Mapping):
            yield name, entry


def check_collectors(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for name, entry in _collectors(snap):
        status = entry.get("status")
        why = f": {entry['reason']}" if entry.get("reason") else ""
        if status in ("error", "timeout", "denied"):
            yield _adv("HS901", "warning", f"collector {name} {status}{why}: its part of the host is not in the "
                       "snapshot", ("collectors", name, "status"))


def check_unreadable(snap: Mapping[str, Any]) -> Iterator[Advisory]:
    for name, entry in _collectors(snap):
        unreadable = entry.get("unreadable") if isinstance(entry.get("unreadable"), Mapping) else {}
        # Observed absences (class "absent": a VM without cpufreq) are knowledge, not a failed read.
        n = sum(1 for why in unreadable.values() if parse_entry(why)[0] in UNKNOWN)
        if entry.get("status") == "partial" and n:
            yield _adv("HS902", "info", f"collector {name} could not read {n} value(s); see "
                       f"collectors.{name}.unreadable", ("collectors", name, "unreadable"))


#: code -> check, in code order. Each check yields advisories of its own code only.
CHECKS: dict[str, Callable[[Mapping[str, Any]], Iterator[Advisory]]] = {
    "HS101": check_governor,
    "HS102": check_numa_balancing,
    "HS201": check_wq_saved,
    "HS202": check_wq_clients,
    "HS203": check_dsa_halted,
    "HS301": check_clock_events,
    "HS302": check_foreign_processes,
    "HS303": check_ecc_pending,
    "HS304": check_mig_pending,
    "HS305": check_nvlink_down,
    "HS306": check_gpu_missing,
    "HS401": check_cudagraph,
    "HS402": check_suffix_moe,
    "HS403": check_suffix_405b_fp8,
    "HS404": check_vllm_version,
    "HS901": check_collectors,
    "HS902": check_unreadable,
}


def run_checks(snap: dict) -> list[Advisory]:
    """Every advisory for ``snap``, in code order; a check that trips over an odd value is skipped, not fatal."""
    out: list[Advisory] = []
    for check in CHECKS.values():
        try:
            out.extend(check(snap))
        except (AttributeError, TypeError, ValueError, KeyError):  # a malformed section must not hide the rest
            continue
    return out
