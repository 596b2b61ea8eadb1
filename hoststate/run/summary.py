"""What a watched run's samples add up to: per-GPU shares, counter deltas, events, and the flat metrics judged.

Pure functions over a finished sampler (hoststate.run.sampler); this module imports no sampler, so the sampler
may name its tables from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hoststate.nvml import SAMPLED_REASONS as REASON_BITS

#: Which violation counter measures the time each sampled reason held the clocks down.
SHARE_COUNTERS = {
    "sw_power_cap": "violation_power_ns",
    "sw_thermal_slowdown": "violation_sw_thermal_ns",
    "hw_thermal_slowdown": "violation_hw_thermal_ns",
    "hw_power_brake_slowdown": "violation_hw_power_brake_ns",
}

#: NVML event types registered (nvmlEventType*): the ones that spoil a run. Clock and pstate events are not
#: registered: the samples already show them, and they would arrive many times a second.
EVENT_TYPES = (
    (0x2, "double_bit_ecc"), (0x8, "xid"), (0x400, "dram_retirement"), (0x800, "dram_retirement_failure"),
    (0x1000, "non_fatal_poison"), (0x2000, "fatal_poison"), (0x4000, "gpu_unavailable"), (0x8000, "recovery_action"),
)  # fmt: skip

#: XIDs that say nothing about the GPU's health: 13/31/43/45 are an application's own faults or its being
#: stopped (NVIDIA's XID catalogue); they are listed in the summary but do not invalidate the run.
BENIGN_XIDS = frozenset({13, 31, 43, 45})


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 6)


def _gpu_summary(i: int, info: Mapping[str, Any], acc: Any, first: Mapping[str, Any], last: Mapping[str, Any],
                 seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"index": int(info.get("index", i)), "uuid": str(info.get("uuid", "")),
                           "samples": acc.samples}
    if info.get("name"):
        out["name"] = str(info["name"])
    sampled = {name: round(acc.reasons.get(name, 0) / acc.reasons_read, 4) for _, name in REASON_BITS} \
        if acc.reasons_read else {}
    shares: dict[str, Any] = {}
    for name, share in sampled.items():
        counter = SHARE_COUNTERS.get(name)
        if counter and counter in first and counter in last and seconds > 0:
            shares[name] = round(min(1.0, max(0.0, (last[counter] - first[counter]) / (seconds * 1e9))), 4)
        else:
            shares[name] = share
    out["share"] = shares
    out["sampled_share"] = sampled
    deltas = {k: _num(last[k] - first[k]) for k in last if k in first and isinstance(last[k], int | float)}
    if "energy_mj" in deltas and deltas["energy_mj"] < 0:  # the counter was reset (as vLLM's energy meter reads it)
        del deltas["energy_mj"]
    out["counters"] = deltas
    if acc.sm_n:
        out["sm_mhz"] = {"min": acc.sm_min, "mean": round(acc.sm_sum / acc.sm_n, 1), "max": acc.sm_max}
    if acc.power_n:
        out["power_w"] = {"mean": round(acc.power_sum / acc.power_n / 1000, 1), "max": round(acc.power_max / 1000, 1)}
    if acc.temp_max is not None:
        out["temperature_max_c"] = acc.temp_max
    out["pstates"] = dict(sorted(acc.pstates.items()))
    out["processes_max"] = acc.max_procs
    return out


def _delta(start: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> dict[str, Any]:
    if not start or not end:
        return {}
    return {k: _num(end[k] - start[k]) for k in end if k in start}


def summarize(s: Any) -> dict[str, Any]:
    seconds = max(0.0, s.t1 - s.t0)
    first = s.checkpoints[0][1] if s.checkpoints else []
    last = s.checkpoints[-1][1] if s.checkpoints else []
    gpus = [
        _gpu_summary(i, info, acc, first[i] if i < len(first) else {}, last[i] if i < len(last) else {}, seconds)
        for i, (info, acc) in enumerate(zip(s.source.gpus if s.source is not None else [], s.accs, strict=False))
    ]
    out: dict[str, Any] = {
        "gpu_status": s.gpu_status,
        "seconds": round(seconds, 3),
        "interval_s": s.interval,
        "samples": max((g["samples"] for g in gpus), default=0),
        "missed_samples": s.missed,
        "checkpoints": len(s.checkpoints),
        "sampler_cpu_s": round(s.cpu_s, 4),
        "gpus": gpus,
        "events": [{"gpu": e[1], "type": dict((b, n) for b, n in EVENT_TYPES).get(e[2], hex(e[2])), "data": e[3]}
                   for e in s.event_list],
    }
    if s._foreign:
        start = getattr(s, "_from_start", set())
        out["foreign_processes"] = [{"pid": pid, "gpus": idx, **({"from_start": True} if pid in start else {})}
                                    for pid, idx in sorted(s._foreign.items())]
    cgroup = _delta(s.host.get("cgroup_start"), s.host.get("cgroup_end"))
    if cgroup:
        out["cgroup"] = {"path": s.host.get("cgroup") or "", **cgroup}
    vllm = _delta(s.host.get("vllm_start"), s.host.get("vllm_end"))
    if s.vllm_url:
        out["vllm"] = vllm
    unreadable = dict(getattr(s.source, "unreadable", {}) or {})
    if unreadable:
        out["unreadable"] = unreadable
    if s.errors:
        out["errors"] = list(s.errors)
    out["metrics"] = metrics(out)
    return out


def _rates(summary: Mapping[str, Any]) -> dict[str, float]:
    """NVLink CRC errors per second (retried by the link itself) and replay/recovery errors, worst GPU."""
    seconds = summary.get("seconds") or 0
    crc = [g["counters"].get("nvlink_crc_flit_errors", 0) + g["counters"].get("nvlink_crc_data_errors", 0)
           for g in summary.get("gpus", []) if "counters" in g]
    link = [g["counters"].get("nvlink_replay_errors", 0) + g["counters"].get("nvlink_recovery_errors", 0)
            for g in summary.get("gpus", []) if "counters" in g]
    out: dict[str, float] = {"nvlink_link_errors": max(link, default=0)}
    if seconds:
        out["nvlink_crc_errors_per_s"] = round(max(crc, default=0) / seconds, 3)
    return out


def _below_base_unexplained(gpu: Mapping[str, Any], seconds: float) -> float | None:
    """The share of the run a GPU's clocks were below the base clock (NVML's TOTAL_BASE_CLOCKS violation time)
    while no clock-event reason was ever sampled, idle included; None when the counter was not read."""
    below = gpu.get("counters", {}).get("violation_total_base_clocks_ns")
    if below is None or not seconds:
        return None
    if any(v > 0 for v in gpu.get("sampled_share", {}).values()):
        return 0.0  # a reason was set: its own rule judges it
    return round(min(1.0, max(0.0, below / (seconds * 1e9))), 4)


def metrics(summary: Mapping[str, Any]) -> dict[str, float | int]:
    """The flat numbers :data:`RULES` judge, each the worst over the GPUs (docs/watch.md lists them)."""
    gpus = summary.get("gpus", [])
    out: dict[str, float | int] = {}
    for _, name in REASON_BITS[1:]:
        values = [g["share"][name] for g in gpus if name in g.get("share", {})]
        if values:
            out[f"share.{name}"] = max(values)
    for key in ("ecc_dbe_volatile", "ecc_sbe_volatile", "remapped_uncorrectable", "remapped_pending",
                "remapped_failure", "pcie_replays"):
        values = [g["counters"][key] for g in gpus if key in g.get("counters", {})]
        if values:
            out[key] = max(values)
    nvlink = [sum(v for k, v in g.get("counters", {}).items() if k.startswith("nvlink_")) for g in gpus]
    if any("nvlink_crc_flit_errors" in g.get("counters", {}) for g in gpus):
        out["nvlink_errors"] = max(nvlink)
        out.update(_rates(summary))
    seconds = summary.get("seconds") or 0
    if seconds and any("pcie_replays" in g.get("counters", {}) for g in gpus):
        out["pcie_replays_per_min"] = round(max(g["counters"].get("pcie_replays", 0) for g in gpus) * 60 / seconds, 3)
    below = [_below_base_unexplained(g, seconds) for g in gpus]
    if any(b is not None for b in below):
        out["share.below_base_clock_unexplained"] = max(b for b in below if b is not None)
    events = summary.get("events", [])
    out["xid_events"] = sum(1 for e in events if e["type"] == "xid" and e["data"] not in BENIGN_XIDS)
    out["error_events"] = sum(1 for e in events if e["type"] != "xid")
    out["foreign_processes"] = len(summary.get("foreign_processes", []))
    cgroup = summary.get("cgroup", {})
    if cgroup.get("throttled_usec") is not None and summary.get("seconds"):
        out["cpu_throttled_share"] = round(min(1.0, cgroup["throttled_usec"] / 1e6 / summary["seconds"]), 4)
    for key, value in summary.get("vllm", {}).items():
        out[f"vllm_{key}"] = value
    out["sampler_errors"] = len(summary.get("errors", []))
    # a verdict covers only what was watched: no GPU sampled is said, never shown as clean
    out["gpus_unwatched"] = 0 if gpus and summary.get("samples") else 1
    out["gpus_lost"] = len({k.split("/", 1)[0] for k, v in summary.get("unreadable", {}).items() if v == "GpuIsLost"})
    return out
