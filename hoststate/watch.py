"""Watch a benchmark run: sample the GPUs while it runs, read the expensive counters at its ends, judge the run.

A snapshot says what the host was before a run; this module says what happened during it. The sampler is a
thread at the lowest CPU priority (nice 19) that reads only NVML's cheap values (clock-event reasons, SM clock,
power, temperature, pstate, running processes: a few microseconds each) at ``DEFAULT_INTERVAL``, and polls NVML
events (XID, ECC, row remapping) without waiting. The expensive counters (violation times by reason, energy,
PCIe replays, ECC and remapped rows, NVLink errors: one batched ``nvmlDeviceGetFieldValues`` of about 5 ms a GPU)
are read at the start, at the end and every ``DEFAULT_CHECKPOINT`` seconds. The server's cgroup ``cpu.stat`` and,
when a vLLM URL is known, its ``/metrics`` counters are read at the start and the end.

:func:`judge` rates a watched run ``clean``, ``degraded`` or ``invalid`` under :data:`RULES` (data; a TOML file
of ``[[rule]]`` tables replaces entries by metric). A rule with ``baseline = true`` compares against the
baseline run's own value, so a host that is power-capped all the time is clean when its baseline was too.
Keys and the trace format are in docs/watch.md.

``pynvml`` is imported lazily, and this module imports nothing heavy: a sampler must not cost a run start-up time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.errors import HoststateError, InputError

#: Seconds between two samples of the cheap readings: on 8 GPUs about 0.3 ms of CPU a sample (docs/performance.md).
DEFAULT_INTERVAL = 1.0
#: Seconds between two reads of the expensive counters (besides the start and the end).
DEFAULT_CHECKPOINT = 60.0
TRACE_FORMAT = "hoststate-watch-trace/1"
#: Seconds :meth:`Sampler.stop` waits for the sampling thread (one sample and one checkpoint take milliseconds).
STOP_TIMEOUT = 10.0
#: A recorded trace replayed instead of NVML (tests, benchmarks), as HOSTSTATE_NVML_REPLAY is for snapshots.
REPLAY_ENV = "HOSTSTATE_WATCH_REPLAY"
VERDICTS = ("clean", "degraded", "invalid")

#: Clock-event reason bits sampled each time (nvmlClocksEventReason*), as the gpu collector names them.
REASON_BITS = (
    (0x1, "gpu_idle"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"), (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
)  # fmt: skip
#: Counters read at checkpoints: name -> NVML_FI_DEV_* field id (nvidia-ml-py 13.x; ns unless the name says).
COUNTER_FIELDS = (
    ("violation_power_ns", 74), ("violation_thermal_ns", 75), ("violation_sync_boost_ns", 76),
    ("violation_board_limit_ns", 77), ("violation_low_utilization_ns", 78), ("violation_reliability_ns", 79),
    ("violation_total_app_clocks_ns", 80), ("violation_total_base_clocks_ns", 81),
    ("violation_sw_thermal_ns", 269), ("violation_hw_thermal_ns", 270), ("violation_hw_power_brake_ns", 271),
    ("energy_mj", 83), ("pcie_replays", 94), ("ecc_sbe_volatile", 3), ("ecc_dbe_volatile", 4),
    ("remapped_correctable", 142), ("remapped_uncorrectable", 143), ("remapped_pending", 144),
    ("remapped_failure", 145), ("nvlink_crc_flit_errors", 38), ("nvlink_crc_data_errors", 45),
    ("nvlink_replay_errors", 52), ("nvlink_recovery_errors", 59),
)  # fmt: skip
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
EVENT_MASK = sum(bit for bit, _ in EVENT_TYPES)
#: XIDs that say nothing about the GPU's health: 13/31/43/45 are an application's own faults or its being
#: stopped (NVIDIA's XID catalogue); they are listed in the summary but do not invalidate the run.
BENIGN_XIDS = frozenset({13, 31, 43, 45})
#: vLLM /metrics counters summed over label sets: name -> (metric, label filter).
VLLM_COUNTERS = {
    "preemptions": ("vllm:num_preemptions", None),
    "aborted_requests": ("vllm:request_success", ("finished_reason", "abort")),
    "failed_requests": ("vllm:request_success", ("finished_reason", "error")),
}


def _now() -> float:
    return time.monotonic()


def _error_name(err: BaseException) -> str:
    name = type(err).__name__
    return name[len("NVMLError_"):] if name.startswith("NVMLError_") else name


# -- sources: what the sampler reads -------------------------------------------------------------------------------


class LiveSource:
    """The host's GPUs through NVML (the real ``pynvml``, or any module-like object with its functions).

    ``replicate`` reads every GPU that many times a sample: only to measure what a sampler costs on a larger host.
    """

    def __init__(self, nvml: Any, replicate: int = 1):
        self.nvml = nvml
        self.unreadable: dict[str, str] = {}
        self.handles: list[Any] = []
        self.gpus: list[dict[str, Any]] = []
        self._events: Any = None
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = {"index": index, "uuid": self._text(nvml.nvmlDeviceGetUUID(handle))}
                with contextlib.suppress(Exception):
                    info["name"] = self._text(nvml.nvmlDeviceGetName(handle))
                self.handles.append(handle)
                self.gpus.append(info)
        except Exception:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            raise
        self._register_events()
        self.handles = self.handles * max(1, replicate)
        self.gpus = self.gpus * max(1, replicate)

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def _register_events(self) -> None:
        nvml = self.nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except Exception as err:
            self.unreadable["events"] = _error_name(err)
            return
        for index, handle in enumerate(self.handles):
            try:
                supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
                nvml.nvmlDeviceRegisterEvents(handle, supported & EVENT_MASK, self._events)
            except Exception as err:
                self.unreadable[f"{index}/events"] = _error_name(err)

    def _call(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as err:
            self.unreadable.setdefault(key, _error_name(err))
            return None

    def cheap(self) -> tuple[float, list[list[Any]]]:
        """One sample: per GPU ``[reasons, sm_mhz, power_mw, temperature_c, pstate, [pids]]`` (None: unread)."""
        n = self.nvml
        rows = []
        for i, h in enumerate(self.handles):
            procs = self._call(f"{i}/processes", n.nvmlDeviceGetComputeRunningProcesses, h)
            rows.append([
                self._call(f"{i}/clocks_event_reasons", n.nvmlDeviceGetCurrentClocksEventReasons, h),
                self._call(f"{i}/clocks_sm_mhz", n.nvmlDeviceGetClockInfo, h, 1),
                self._call(f"{i}/power_draw_mw", n.nvmlDeviceGetPowerUsage, h),
                self._call(f"{i}/temperature_gpu_c", n.nvmlDeviceGetTemperature, h, 0),
                self._call(f"{i}/pstate", n.nvmlDeviceGetPerformanceState, h),
                None if procs is None else sorted(int(p.pid) for p in procs),
            ])
        return _now(), rows

    def counters(self) -> tuple[float, list[dict[str, Any]]]:
        """The expensive counters of every GPU, one batched field read each; unread fields are left out."""
        out = []
        ids = [fid for _, fid in COUNTER_FIELDS]
        for i, h in enumerate(self.handles):
            values = self._call(f"{i}/counters", self.nvml.nvmlDeviceGetFieldValues, h, ids)
            row: dict[str, Any] = {}
            for (name, _), value in zip(COUNTER_FIELDS, values or (), strict=False):
                if int(value.nvmlReturn) != 0:
                    self.unreadable.setdefault(f"{i}/{name}", f"NVML return {int(value.nvmlReturn)}")
                    continue
                row[name] = _field_value(value)
            out.append(row)
        return _now(), out

    def events(self) -> list[list[Any]]:
        """Events waiting in the set, without blocking: ``[t, gpu index or -1, type, data]`` each."""
        if self._events is None:
            return []
        found: list[list[Any]] = []
        for _ in range(64):  # a storm of events must not hold the sampler
            try:
                data = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception as err:
                if _error_name(err) != "Timeout":
                    self.unreadable.setdefault("events/wait", _error_name(err))
                break
            found.append([_now(), self._device_index(data.device), int(data.eventType), int(data.eventData)])
        return found

    def _device_index(self, device: Any) -> int:
        import ctypes

        try:
            address = ctypes.cast(device, ctypes.c_void_p).value
            for i, h in enumerate(self.handles):
                if ctypes.cast(h, ctypes.c_void_p).value == address:
                    return i
        except (TypeError, ctypes.ArgumentError):
            pass
        return -1

    def close(self) -> None:
        if self._events is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlEventSetFree(self._events)
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def _field_value(value: Any) -> Any:
    """A ``c_nvmlFieldValue_t``'s value by its type (NVML_VALUE_TYPE_*)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    got = getattr(value.value, member.get(int(value.valueType), "ullVal"))
    return float(got) if isinstance(got, float) else int(got)


class TraceSource:
    """A recorded trace (:data:`TRACE_FORMAT`) answered in order, with its own timestamps: CI replays a real run.

    Samples are served one per call and the last repeats once they run out; counter checkpoints likewise,
    except that the final read (``final=True``) is always the trace's last checkpoint.
    """

    def __init__(self, trace: Mapping[str, Any], source: str = "<trace>"):
        if not isinstance(trace, Mapping) or trace.get("format") != TRACE_FORMAT:
            raise InputError(f"{source}: not a watch trace (expected format {TRACE_FORMAT!r})")
        self.trace = trace
        self.source = source
        self.gpus = [dict(g) for g in trace.get("gpus", [])]
        self.unreadable: dict[str, str] = dict(trace.get("unreadable", {}))
        self._samples = list(trace.get("samples", []))
        self._counters = list(trace.get("counters", []))
        self._events = sorted(trace.get("events", []), key=lambda e: e[0])
        if not self._samples or not self._counters:
            raise InputError(f"{source}: a watch trace needs samples and counters")
        self._s = self._c = 0
        self._t = float(self._samples[0][0])

    def cheap(self) -> tuple[float, list[list[Any]]]:
        t, rows = self._samples[min(self._s, len(self._samples) - 1)]
        self._s += 1
        self._t = float(t)
        return float(t), rows

    def counters(self, final: bool = False) -> tuple[float, list[dict[str, Any]]]:
        last = len(self._counters) - 1
        index = last if final else min(self._c, max(0, last - 1))  # the last checkpoint is the run's end
        self._c += 1
        t, rows = self._counters[index]
        return float(t), [dict(r) for r in rows]

    def events(self) -> list[list[Any]]:
        due = [e for e in self._events if e[0] <= self._t]
        self._events = [e for e in self._events if e[0] > self._t]
        return [list(e) for e in due]

    def exhausted(self) -> bool:
        return self._s >= len(self._samples)

    def close(self) -> None:
        pass


def load_trace(path: str) -> TraceSource:
    from hoststate.io import read_input

    try:
        data = json.loads(read_input(path, max_bytes=64 << 20, what="watch trace"))
    except ValueError as err:
        raise InputError(f"{path}: watch trace is not valid JSON: {err}") from err
    return TraceSource(data, path)


def open_source(*, live: bool = True, replicate: int = 1) -> tuple[Any, str]:
    """(a source, its status): the replay named by HOSTSTATE_WATCH_REPLAY, else NVML on a live host.

    Status ``ok``, or why no GPU is watched (``absent``: no driver; ``skipped``: under --root; ``error ...``).
    """
    replay = os.environ.get(REPLAY_ENV)
    if replay:
        return load_trace(replay), "ok"
    if not live:
        return None, "skipped: NVML reads the running host and cannot honour --root"
    from hoststate.collectors.gpu import DRIVER_MARKERS

    if not any(os.path.exists(p) for p in DRIVER_MARKERS):
        return None, "absent: no NVIDIA driver loaded"
    try:
        from hoststate.nvml_replay import import_pynvml

        return LiveSource(import_pynvml(), replicate), "ok"
    except ImportError as err:
        return None, f"absent: nvidia-ml-py is not installed ({err})"
    except Exception as err:  # nvmlInit or a handle failed: the run is not watched, and says so
        return None, f"error: {_error_name(err)}"


# -- host side: cgroup CPU throttling and vLLM's counters -----------------------------------------------------------


def parse_cpu_stat(text: str) -> dict[str, int]:
    """cgroup v2 ``cpu.stat`` (Documentation/admin-guide/cgroup-v2.rst): ``key value`` lines of integers."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[key] = int(value)
    return out


def cgroup_of(reader: Any, pid: int | str) -> str | None:
    """The directory under /sys/fs/cgroup holding a process's ``cpu.stat``, or None: cgroup v2's ``0::/path``
    of /proc/PID/cgroup when that has one, else v1's ``N:cpu[,cpuacct]:/path`` (``cpu/path``)."""
    text = reader.read(f"proc/{pid}/cgroup", record=False, strip=False) or ""
    candidates = []
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if line.startswith("0::"):
            candidates.insert(0, path.strip().strip("/"))
        elif "cpu" in controllers.split(","):
            candidates.append(f"{controllers}/{path.strip().strip('/')}".rstrip("/"))
    for cgroup in candidates:
        if reader.exists(f"sys/fs/cgroup/{cgroup}/cpu.stat".replace("//", "/")):
            return "/" + cgroup
    return None


def read_cpu_stat(reader: Any, cgroup: str) -> dict[str, int] | None:
    """A cgroup's ``cpu.stat``; v1's ``throttled_time`` (ns) as v2's ``throttled_usec``."""
    text = reader.read(f"sys/fs/cgroup/{cgroup.strip('/')}/cpu.stat".replace("//", "/"), record=False, strip=False)
    if not text:
        return None
    stat = parse_cpu_stat(text)
    if "throttled_time" in stat and "throttled_usec" not in stat:
        stat["throttled_usec"] = stat.pop("throttled_time") // 1000
    return stat


#: A Prometheus text-format sample line: name, optional {labels}, value.
_PROM_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_PROM_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_vllm_counters(text: str) -> dict[str, float]:
    """:data:`VLLM_COUNTERS` from Prometheus text: each summed over its label sets (engines, models)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = None if line.startswith("#") else _PROM_SAMPLE.match(line)
        if not m:
            continue
        name = m.group(1).removesuffix("_total")
        labels = dict(_PROM_LABEL.findall(m.group(2) or ""))
        for key, (metric, want) in VLLM_COUNTERS.items():
            if name == metric and (want is None or labels.get(want[0]) == want[1]):
                with contextlib.suppress(ValueError):
                    out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def scrape_vllm(url: str) -> tuple[dict[str, float] | None, str | None]:
    """(counters, error) from ``URL/metrics``; never raises."""
    from hoststate.collectors.vllm.http import _get

    status, body, err = _get(url, "/metrics")
    if err or status != 200:
        return None, err or f"HTTP {status}"
    return parse_vllm_counters(body or ""), None


# -- the sampler ------------------------------------------------------------------------------------------------


@dataclass
class _GpuAcc:
    """Running totals of one GPU's samples (no sample list is kept unless a trace is recorded)."""

    samples: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    reasons_read: int = 0
    sm_min: int | None = None
    sm_max: int | None = None
    sm_sum: int = 0
    sm_n: int = 0
    power_max: int | None = None
    power_sum: int = 0
    power_n: int = 0
    temp_max: int | None = None
    pstates: dict[str, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    max_procs: int = 0

    def add(self, row: Sequence[Any]) -> None:
        reasons, sm, power, temp, pstate, pids = (list(row) + [None] * 6)[:6]
        self.samples += 1
        if reasons is not None:
            self.reasons_read += 1
            for bit, name in REASON_BITS:
                if int(reasons) & bit:
                    self.reasons[name] = self.reasons.get(name, 0) + 1
        if sm is not None:
            self.sm_min = sm if self.sm_min is None else min(self.sm_min, sm)
            self.sm_max = sm if self.sm_max is None else max(self.sm_max, sm)
            self.sm_sum, self.sm_n = self.sm_sum + sm, self.sm_n + 1
        if power is not None:
            self.power_max = power if self.power_max is None else max(self.power_max, power)
            self.power_sum, self.power_n = self.power_sum + power, self.power_n + 1
        if temp is not None:
            self.temp_max = temp if self.temp_max is None else max(self.temp_max, temp)
        if pstate is not None:
            key = f"P{pstate}"
            self.pstates[key] = self.pstates.get(key, 0) + 1
        if pids is not None:
            self.pids.update(int(p) for p in pids)
            self.max_procs = max(self.max_procs, len(pids))


class Sampler:
    """The watch itself: :meth:`start` before the command, :meth:`stop` after it; :meth:`summary` then.

    ``source`` is a :class:`LiveSource` or :class:`TraceSource`; ``None`` watches no GPU (the host side still runs).
    ``cgroup_pid`` names the process whose cgroup's CPU throttling is read (the server; guard's own by default),
    ``vllm_url`` a server whose /metrics counters are read. ``record`` keeps every sample for :meth:`trace`.
    """

    def __init__(self, source: Any = None, *, interval: float = DEFAULT_INTERVAL,
                 checkpoint: float = DEFAULT_CHECKPOINT, root: str = "/", cgroup_pid: int | None = None,
                 vllm_url: str | None = None, gpu_status: str = "ok", record: bool = False,
                 own_pids: Callable[[], Iterable[int]] | None = None):
        if not (isinstance(interval, int | float) and math.isfinite(interval) and interval > 0):
            raise InputError(f"--watch-interval {interval!r}: must be a finite number of seconds greater than 0")
        self.source = source
        self.interval = float(interval)
        self.checkpoint = max(float(checkpoint), self.interval)
        self.root = root
        self.cgroup_pid = cgroup_pid if cgroup_pid is not None else os.getpid()
        self.vllm_url = vllm_url
        self.gpu_status = gpu_status if source is not None else (gpu_status if gpu_status != "ok" else "absent")
        self.record = record
        self.own_pids = own_pids
        self.accs = [_GpuAcc() for _ in (source.gpus if source is not None else [])]
        self.samples: list[list[Any]] = []
        self.checkpoints: list[list[Any]] = []
        self.event_list: list[list[Any]] = []
        self.missed = 0
        self.errors: list[str] = []
        self.cpu_s = 0.0
        self.t0 = self.t1 = 0.0
        self.wall0 = self.wall1 = 0.0
        self.host: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._foreign: dict[int, list[int]] = {}
        self._first_pids: set[int] | None = None

    # -- lifecycle
    def start(self) -> Sampler:
        self.wall0 = time.time()
        self.host["cgroup_start"], self.host["cgroup"] = self._cpu_stat()
        if self.vllm_url:
            self.host["vllm_start"], err = scrape_vllm(self.vllm_url)
            if err:
                self.errors.append(f"vllm /metrics at start: {err}")
        if self.source is None:
            self.t0 = _now()
            return self
        self._take_counters(final=False)
        self.t0 = self.checkpoints[0][0] if self.checkpoints else _now()
        with self._guarded("first sample"):
            self._sample()
        self._thread = threading.Thread(target=self._run, name="hoststate-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sampler:
        self._stop.set()
        hung = False
        if self._thread is not None:
            # a sample is microseconds; a thread still busy after this is stuck in a driver call that never
            # returns: it is left behind (a daemon thread) and the run ends without its final reads
            self._thread.join(timeout=STOP_TIMEOUT)
            hung = self._thread.is_alive()
            if hung:
                self.errors.append(f"the sampler did not stop within {STOP_TIMEOUT:g} s (an NVML call hung); "
                                   "no final sample or counters")
        if self.source is not None and not hung:
            with self._guarded("final sample"):
                self._sample()
                while isinstance(self.source, TraceSource) and not self.source.exhausted():
                    self._sample()  # a replay is judged whole, however long the command ran
            self._take_counters(final=True)
            self.source.close()
        self.t1 = self.checkpoints[-1][0] if self.checkpoints and not hung else _now()
        self.wall1 = time.time()
        self.host["cgroup_end"], _ = self._cpu_stat()
        if self.vllm_url:
            self.host["vllm_end"], err = scrape_vllm(self.vllm_url)
            if err:
                self.errors.append(f"vllm /metrics at end: {err}")
        return self

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *_exc: Any) -> None:
        self.stop()

    # -- the thread
    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # lowest priority for this thread alone
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        start = time.monotonic()
        cpu0 = time.thread_time()
        next_checkpoint = start + self.checkpoint
        k = 1
        while True:
            due = start + k * self.interval
            if self._stop.wait(max(0.0, due - time.monotonic())):
                break
            now = time.monotonic()
            if now - due > self.interval:  # the thread was starved: count the samples it skipped
                skipped = int((now - due) // self.interval)
                self.missed += skipped
                k += skipped
            k += 1
            with self._guarded("sample"):
                self._sample()
            if now >= next_checkpoint:
                next_checkpoint = now + self.checkpoint
                self._take_counters(final=False)
        self.cpu_s += time.thread_time() - cpu0

    @contextlib.contextmanager
    def _guarded(self, what: str) -> Any:
        try:
            yield
        except Exception as err:  # a sampler never raises into the run it watches
            if len(self.errors) < 20:
                self.errors.append(f"{what}: {type(err).__name__}: {err}")

    def _sample(self) -> None:
        t, rows = self.source.cheap()
        for acc, row in zip(self.accs, rows, strict=False):
            acc.add(row)
        if self.record:
            self.samples.append([round(t, 4), rows])
        self.event_list.extend(self.source.events())
        self._note_foreign(rows)

    def _take_counters(self, *, final: bool) -> None:
        with self._guarded("counters"):
            if isinstance(self.source, TraceSource):
                t, rows = self.source.counters(final=final)
            else:
                t, rows = self.source.counters()
            self.checkpoints.append([round(t, 4), rows])

    def _note_foreign(self, rows: Sequence[Sequence[Any]]) -> None:
        """Pids on a GPU that are neither the watched command's processes nor known at the start."""
        if self.own_pids is None:
            return
        seen = {int(p) for row in rows if len(row) > 5 and row[5] for p in row[5]}
        if self._first_pids is None:  # processes already on the GPUs when the run started are not the run's doing
            self._first_pids = seen
        new = seen - set(self._foreign) - self._first_pids
        if not new:
            return
        own = set(self.own_pids())
        for pid in new:
            if pid not in own:
                self._foreign[pid] = [i for i, row in enumerate(rows) if len(row) > 5 and row[5] and pid in row[5]]

    def _cpu_stat(self) -> tuple[dict[str, int] | None, str | None]:
        from hoststate.io import Reader

        try:
            reader = Reader(self.root)
            cgroup = cgroup_of(reader, self.cgroup_pid)
            return (read_cpu_stat(reader, cgroup), cgroup) if cgroup else (None, None)
        except Exception as err:
            self.errors.append(f"cgroup cpu.stat: {type(err).__name__}")
            return None, None

    # -- results
    def trace(self, description: str = "") -> dict[str, Any]:
        """The recorded run in :data:`TRACE_FORMAT` (needs ``record=True``)."""
        return {
            "format": TRACE_FORMAT,
            "description": description,
            "interval_s": self.interval,
            "gpus": self.source.gpus if self.source is not None else [],
            "samples": self.samples,
            "counters": self.checkpoints,
            "events": self.event_list,
            "unreadable": dict(getattr(self.source, "unreadable", {})),
        }

    def summary(self) -> dict[str, Any]:
        """What happened during the run (docs/watch.md): per-GPU shares, counter deltas, events, host side."""
        return summarize(self)


# -- summary ----------------------------------------------------------------------------------------------------


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 6)


def _gpu_summary(i: int, info: Mapping[str, Any], acc: _GpuAcc, first: Mapping[str, Any], last: Mapping[str, Any],
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


def summarize(s: Sampler) -> dict[str, Any]:
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
        out["foreign_processes"] = [{"pid": pid, "gpus": idx} for pid, idx in sorted(s._foreign.items())]
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
    out["gpus_lost"] = len({k.split("/", 1)[0] for k, v in summary.get("unreadable", {}).items() if v == "GpuIsLost"})
    return out


# -- the verdict ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One threshold: ``metric`` above ``limit`` (above the baseline run's value plus ``limit`` when ``baseline``)
    makes the run ``verdict``. ``needs_baseline``: judged only against a baseline run (a normal state on some
    hosts, like a power cap under load)."""

    metric: str
    verdict: str
    limit: float
    reason: str
    baseline: bool = False
    needs_baseline: bool = False


#: The shipped thresholds, one per metric (docs/watch.md says why each).
RULES: tuple[Rule, ...] = (
    Rule("host_invalidating", "invalid", 0, "the host's configuration changed during the run"),
    Rule("xid_events", "invalid", 0, "a GPU reported an XID error during the run"),
    Rule("gpus_lost", "invalid", 0, "a GPU fell off the bus during the run (NVML: GpuIsLost)"),
    Rule("error_events", "invalid", 0, "a GPU reported an uncorrectable-error, retirement or recovery event"),
    Rule("ecc_dbe_volatile", "invalid", 0, "uncorrectable (double-bit) ECC errors during the run"),
    Rule("remapped_uncorrectable", "invalid", 0, "rows remapped for uncorrectable errors during the run"),
    Rule("remapped_failure", "invalid", 0, "a row remapping failed during the run"),
    Rule("share.hw_thermal_slowdown", "degraded", 0.01, "clocks held down by hardware thermal slowdown", True),
    Rule("share.sw_thermal_slowdown", "degraded", 0.01, "clocks held down by software thermal slowdown", True),
    Rule("share.hw_power_brake_slowdown", "degraded", 0.01, "clocks held down by the power brake", True),
    Rule("share.hw_slowdown", "degraded", 0.01, "clocks held down by hardware slowdown", True),
    Rule("share.sw_power_cap", "degraded", 0.10, "clocks held down by the power cap more than in the baseline",
         True, True),
    Rule("foreign_processes", "degraded", 0, "another process used a watched GPU during the run"),
    Rule("remapped_pending", "degraded", 0, "row remappings pending (applied at the next GPU reset)"),
    Rule("pcie_replays", "degraded", 100, "PCIe replays during the run", True),
    Rule("nvlink_errors", "degraded", 0, "NVLink errors during the run", True),
    Rule("cpu_throttled_share", "degraded", 0.01, "the server's cgroup was CPU-throttled", True),
    Rule("vllm_preemptions", "degraded", 0, "vLLM preempted requests", True),
    Rule("vllm_aborted_requests", "degraded", 0, "vLLM aborted requests"),
    Rule("vllm_failed_requests", "degraded", 0, "vLLM requests failed"),
    Rule("host_warning", "degraded", 0, "the host's state changed during the run (warning-level findings)"),
    Rule("sampler_errors", "degraded", 0, "the watch could not read everything it samples"),
)


def load_rules(path: str | None, base: Sequence[Rule] = RULES) -> tuple[Rule, ...]:
    """``base`` with the ``[[rule]]`` tables of a TOML file replacing (or adding) rules by metric."""
    if not path:
        return tuple(base)
    from hoststate.io import read_input
    from hoststate.snapshot import toml_loads

    try:
        data = toml_loads(read_input(path, max_bytes=1 << 20, what="watch rules").decode("utf-8"))
    except InputError:
        raise
    except Exception as err:
        raise InputError(f"{path}: watch rules are not valid TOML: {err}") from err
    rules = {r.metric: r for r in base}
    for i, entry in enumerate(data.get("rule", [])):
        try:
            rule = Rule(metric=str(entry["metric"]), verdict=str(entry["verdict"]), limit=float(entry["limit"]),
                        reason=str(entry.get("reason", entry["metric"])), baseline=bool(entry.get("baseline", False)),
                        needs_baseline=bool(entry.get("needs_baseline", False)))
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{path}: rule {i + 1}: needs metric, verdict and a numeric limit ({err})") from err
        if rule.verdict not in VERDICTS or not math.isfinite(rule.limit):
            raise InputError(f"{path}: rule {i + 1}: verdict must be one of {', '.join(VERDICTS)}; limit finite")
        rules[rule.metric] = rule
    return tuple(rules.values())


def _shown(metric: str, value: float) -> str:
    if metric.startswith("share.") or metric.endswith("_share"):
        return f"{value * 100:.1f} %"
    return f"{_num(value)}"


def judge(metrics_now: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
          rules: Sequence[Rule] = RULES) -> tuple[str, list[dict[str, Any]]]:
    """(verdict, reasons): the worst verdict of the rules that fire, each reason naming the metric, its value
    and the baseline's. Metrics absent from the run are not judged; ``baseline`` is the baseline run's metrics."""
    reasons: list[dict[str, Any]] = []
    for rule in rules:
        value = metrics_now.get(rule.metric)
        if value is None or rule.verdict == "clean":
            continue
        base = baseline.get(rule.metric) if (baseline and rule.baseline) else None
        if rule.needs_baseline and base is None:
            continue
        allowed = (base or 0) + rule.limit
        if value > allowed:
            text = f"{rule.reason}: {_shown(rule.metric, value)}"
            text += f", baseline {_shown(rule.metric, base)}" if base is not None else ""
            reasons.append({"verdict": rule.verdict, "metric": rule.metric, "value": value, "text": text,
                            **({"baseline": base} if base is not None else {})})
    reasons.sort(key=lambda r: -VERDICTS.index(r["verdict"]))
    verdict = reasons[0]["verdict"] if reasons else "clean"
    return verdict, reasons


# -- a watched run: guard, sample, snap again, judge, attach -------------------------------------------------------

RECORD_FORMAT = "hoststate-run/1"
#: Exit status of ``guard --watch --fail-on LEVEL`` when the command exited 0 and the run was judged LEVEL or worse.
FAIL_ON_EXIT = 4


@dataclass
class WatchedRun:
    """A finished watched run: the command's status, the run verdict with its reasons, and what it is based on."""

    returncode: int
    verdict: str
    reasons: list[dict[str, Any]]
    summary: dict[str, Any]
    record: dict[str, Any]
    drift: list[dict[str, Any]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    def exit_status(self, fail_on: str | None = None) -> int:
        """The command's status; :data:`FAIL_ON_EXIT` instead of 0 when the verdict reaches ``fail_on``."""
        if self.returncode == 0 and fail_on and VERDICTS.index(self.verdict) >= VERDICTS.index(fail_on):
            return FAIL_ON_EXIT
        return self.returncode


def baseline_metrics(snap: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The metrics of a baseline taken with ``--watch`` (its ``[guard.watch]`` table), or None."""
    table = (snap or {}).get("guard", {})
    watch = table.get("watch") if isinstance(table, Mapping) else None
    found = watch.get("metrics") if isinstance(watch, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else None


def _descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them (one pass over /proc/*/stat), for telling the run's own GPU
    processes from another user's. Read only when a new pid shows up on a GPU."""
    from hoststate.io import Reader

    reader = Reader("/")
    parent: dict[int, int] = {}
    for name in reader.listdir("proc", record=False) or ():
        if name.isdigit():
            stat = reader.read(f"proc/{name}/stat", record=False) or ""
            with contextlib.suppress(ValueError, IndexError):
                parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = set(roots)
    grew = True
    while grew:
        new = {pid for pid, ppid in parent.items() if ppid in found and pid not in found}
        found |= new
        grew = bool(new)
    return found


def metadata_env(guard_result: Any, sidecar: str | None) -> dict[str, str]:
    """Variables for the command: ``HOSTSTATE_METADATA`` is ready for ``vllm bench serve --metadata``."""
    digest = str(guard_result.current.get("hoststate", {}).get("digest", ""))
    env = {
        "HOSTSTATE_WATCH": "1",
        "HOSTSTATE_METADATA": " ".join([f"hoststate_guard_verdict={guard_result.verdict}",
                                        f"hoststate_baseline_digest={guard_result.baseline_digest}",
                                        f"hoststate_current_digest={digest}"]),
    }
    if sidecar:
        env["HOSTSTATE_SIDECAR"] = os.path.abspath(sidecar)
    return env


def sidecar_path(result: str) -> str:
    """``DIR/NAME.hoststate.json`` beside a result ``DIR/NAME.json`` (``run=3.json`` -> ``run=3.hoststate.json``)."""
    stem = result[: -len(".json")] if result.endswith(".json") else result
    return stem + ".hoststate.json"


def _drift(before: Mapping[str, Any], after: Mapping[str, Any], policy: Any) -> list[dict[str, Any]]:
    from hoststate.diff import compare
    from hoststate.guard import _host_state

    result = compare(_host_state(before), _host_state(after), policy)
    # a value unreadable alike before and after (a collector not selected) did not change during the run
    return [f.to_dict() for f in result.findings
            if f.severity in ("invalidating", "warning") and not (f.change in ("unreadable", "coverage")
                                                                  and f.old == f.new)]


def build_record(guard_result: Any, summary: Mapping[str, Any], drift: Sequence[Mapping[str, Any]],
                 verdict: str, reasons: Sequence[Mapping[str, Any]], returncode: int,
                 after: Mapping[str, Any] | None, command: Sequence[str] = ()) -> dict[str, Any]:
    """The ``hoststate`` object attached to a result (docs/watch.md): JSON-ready, secrets redacted."""
    from hoststate.redact import redact_argv
    from hoststate.snapshot import jsonable

    meta = guard_result.current.get("hoststate", {})
    return jsonable({
        "format": RECORD_FORMAT,
        "verdict": verdict,
        "reasons": list(reasons),
        "command_status": returncode,
        "command": redact_argv(list(command)),
        "host": {"hostname": meta.get("hostname", ""), "digest": meta.get("digest", ""),
                 "digest_after": (after or {}).get("hoststate", {}).get("digest", "")},
        "guard": {"verdict": guard_result.verdict, "baseline": str(guard_result.baseline),
                  "baseline_digest": guard_result.baseline_digest,
                  "accepted": [f.to_dict() for f in guard_result.accepted]},
        "drift": list(drift),
        "watch": dict(summary),
    })


def _dump(obj: Any, indent: int | None) -> str:
    return json.dumps(obj, indent=indent, allow_nan=True) + ("\n" if indent else "")


def attach(result: str, record: Mapping[str, Any], *, protect: Sequence[str] = ()) -> str:
    """Merge ``record`` atomically into the JSON result file under ``hoststate``; the file's own keys are kept.

    A ``vllm bench serve --save-result`` file is one object (``json.dump``, no indent; ``vllm bench sweep``
    rewrites it with indent 4, kept as found); with ``--append-result`` it holds one object a line, and the
    last one (this run's) gets the record. Returns what was done, or raises InputError when it is no JSON object.
    """
    from hoststate.io import read_input
    from hoststate.output import write_output

    text = read_input(result, max_bytes=256 << 20, what="result").decode("utf-8")
    decoder = json.JSONDecoder()
    objects: list[Any] = []
    pos = 0
    try:
        while pos < len(text.rstrip()):
            while text[pos].isspace():
                pos += 1
            obj, pos = decoder.raw_decode(text, pos)
            objects.append(obj)
    except ValueError as err:
        raise InputError(f"{result}: not a JSON result ({err})") from err
    if not objects or not isinstance(objects[-1], dict):
        raise InputError(f"{result}: holds no JSON object to attach to")
    objects[-1]["hoststate"] = dict(record)
    indent = 4 if text.lstrip().startswith("{\n") else None
    # one object as vLLM wrote it; appended results stay one object a line
    new = _dump(objects[0], indent) if len(objects) == 1 else "\n".join(json.dumps(o) for o in objects)
    write_output(result, new, force=True, protect=protect, what="an input")
    return f"attached to {result}" + (f" (object {len(objects)} of {len(objects)})" if len(objects) > 1 else "")


def write_sidecar(path: str, record: Mapping[str, Any], snapshot: Mapping[str, Any], *,
                  protect: Sequence[str] = ()) -> None:
    """``RESULT.hoststate.json``: the record plus the snapshot taken before the run (TOML text), so that
    ``hoststate results`` can name what differs between the hosts of a sweep's cells."""
    from hoststate.output import write_output
    from hoststate.snapshot import to_toml

    write_output(path, _dump({**record, "snapshot": to_toml(snapshot)}, 1), force=True, protect=protect,
                 what="an input")


def run_watched(guard_result: Any, command: Sequence[str], *, root: str = "/", snap_options: Mapping[str, Any],
                policy: Any = None, interval: float = DEFAULT_INTERVAL, checkpoint: float = DEFAULT_CHECKPOINT,
                rules: Sequence[Rule] = RULES, attach_to: str | None = None, trace_to: str | None = None,
                trace_force: bool = False,
                baseline_snapshot: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                protect: Sequence[str] = ()) -> WatchedRun:
    """Run ``command`` (guard already said it may run) under the watch, snap the host again, judge and attach.

    ``snap_options`` are :func:`hoststate.guard.snap_host`'s (for the snapshot after the run). With
    ``attach_to`` the record is merged into that JSON result and written beside it as ``RESULT.hoststate.json``
    (the sidecar alone when the command left no JSON object there: the record says why).
    """
    from hoststate.guard import command_env, run_command, snap_host
    from hoststate.policy import load_policy

    gpu_before = guard_result.current.get("collectors", {}).get("gpu", {}).get("status")
    if gpu_before == "timeout" and not os.environ.get(REPLAY_ENV):
        # NVML hung for the snapshot already: opening it again here could hang before the command starts
        source, status = None, "skipped: NVML timed out in the snapshot before the run"
    else:
        source, status = open_source(live=os.path.abspath(root) == "/")
    vllm_pid = snap_options.get("vllm_pid")
    me = os.getpid()
    sampler = Sampler(source, interval=interval, checkpoint=checkpoint, root=root, cgroup_pid=vllm_pid,
                      vllm_url=snap_options.get("vllm_url"), gpu_status=status, record=bool(trace_to),
                      own_pids=lambda: _descendants([me] + ([int(vllm_pid)] if vllm_pid else [])))
    sidecar = sidecar_path(attach_to) if attach_to else None
    full_env = {**command_env(guard_result, base=env), **metadata_env(guard_result, sidecar)}
    sampler.start()
    try:
        returncode = run_command(command, env=full_env)
    finally:
        sampler.stop()
    summary = sampler.summary()
    after = snap_host(root=root, **snap_options)
    drift = _drift(guard_result.current, after, policy or load_policy(()))
    values = dict(summary["metrics"])
    values["host_invalidating"] = sum(1 for f in drift if f["severity"] == "invalidating")
    values["host_warning"] = sum(1 for f in drift if f["severity"] == "warning")
    summary["metrics"] = values
    verdict, reasons = judge(values, baseline_metrics(baseline_snapshot), rules)
    record = build_record(guard_result, summary, drift, verdict, reasons, returncode, after, command)
    run = WatchedRun(returncode, verdict, reasons, summary, record, drift)
    if attach_to:
        _attach_both(run, attach_to, sidecar or "", guard_result.current, protect)
    if trace_to:  # last: a trace that cannot be written costs the trace, not the attached verdict
        from hoststate.output import write_output

        try:
            write_output(trace_to, _dump(sampler.trace("recorded by hoststate guard --watch"), 1),
                         force=trace_force, protect=protect)
            run.written.append(f"wrote {trace_to}")
        except HoststateError as err:
            run.written.append(f"trace not written: {err}")
    return run


def _attach_both(run: WatchedRun, result: str, sidecar: str, snapshot: Mapping[str, Any],
                 protect: Sequence[str]) -> None:
    """The result and its sidecar; one that cannot be written (a link, a FIFO, not JSON) costs that file only,
    never the other, and is said in ``run.written`` (the command has already run: nothing is raised)."""
    record = dict(run.record, sidecar=os.path.basename(sidecar))
    try:
        run.written.append(attach(result, record, protect=protect))
    except HoststateError as err:
        record["attach_error"] = str(err)
        run.written.append(f"not attached: {err}")
    run.record = record
    try:
        write_sidecar(sidecar, record, snapshot, protect=protect)
        run.written.append(f"wrote {sidecar}")
    except HoststateError as err:
        run.written.append(f"sidecar not written: {err}")


def guard_and_watch(baseline: Any, command: Sequence[str], *, attach_to: str | None = None,
                    interval: float = DEFAULT_INTERVAL, checkpoint: float = DEFAULT_CHECKPOINT,
                    rules: Sequence[Rule] = RULES, policy_files: Sequence[str] = (), accept: Iterable[str] = (),
                    allow_unreadable: bool = False, root: str = "/", **snap_options: Any) -> WatchedRun:
    """``hoststate guard --baseline B --watch [--attach RESULT] -- CMD`` as one call, for harnesses.

    Raises :class:`hoststate.errors.GuardRefused` (the command is not started) as
    :func:`hoststate.guard.check_baseline` does; otherwise returns the finished :class:`WatchedRun`.
    ``snap_options``: ``only``, ``skip``, ``timeout``, ``vllm_pid``, ``vllm_cmd``, ``vllm_log``, ``vllm_url``,
    ``vllm_version``, ``label``, as for :func:`hoststate.guard.snap_host`.
    """
    from hoststate.guard import check_baseline
    from hoststate.policy import load_policy

    policy = load_policy(tuple(policy_files))
    result = check_baseline(baseline, root=root, policy=policy, policy_files=policy_files, accept=accept,
                            allow_unreadable=allow_unreadable, **snap_options)
    base = baseline if isinstance(baseline, Mapping) else getattr(result, "baseline_snapshot", None)
    if base is None:
        from hoststate.guard import read_baseline

        base = read_baseline(baseline)[0]
    return run_watched(result, command, root=root, snap_options=snap_options, policy=policy, interval=interval,
                       checkpoint=checkpoint, rules=rules, attach_to=attach_to, baseline_snapshot=base)
