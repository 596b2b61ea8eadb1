"""The watch's sampler: NVML read while a benchmark runs, from the live GPUs or a recorded trace.

A thread at the lowest CPU priority (nice 19) reads only NVML's cheap values (clock-event reasons, SM clock,
power, temperature, pstate, running processes: a few microseconds each) at ``DEFAULT_INTERVAL``, and polls NVML
events (XID, ECC, row remapping) without waiting. The expensive counters (violation times by reason, energy,
PCIe replays, ECC and remapped rows, NVLink errors: one batched ``nvmlDeviceGetFieldValues`` of about 5 ms a GPU)
are read at the start, at the end and every ``DEFAULT_CHECKPOINT`` seconds. The server's cgroup ``cpu.stat`` and,
when a vLLM URL is known, its ``/metrics`` counters are read at the start and the end, through the readers of the
collectors that own those facts. ``pynvml`` is imported lazily: a sampler must not cost a run start-up time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.http import scrape_vllm
from hoststate.collectors.vllm.placement import cgroup_of, read_cpu_stat
from hoststate.errors import InputError
from hoststate.nvml import SAMPLED_REASONS as REASON_BITS
from hoststate.run import DEFAULT_CHECKPOINT, DEFAULT_INTERVAL, REPLAY_ENV
from hoststate.run.summary import EVENT_TYPES

TRACE_FORMAT = "hoststate-watch-trace/1"

#: Seconds :meth:`Sampler.stop` waits for the sampling thread (one sample and one checkpoint take milliseconds).
STOP_TIMEOUT = 10.0

#: Seconds one /metrics scrape may take in all (connect, every read): the command's start never waits longer for it.
SCRAPE_DEADLINE = 2.0

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

EVENT_MASK = sum(bit for bit, _ in EVENT_TYPES)


def _now() -> float:
    return time.monotonic()


def _error_name(err: BaseException) -> str:
    name = type(err).__name__
    return name[len("NVMLError_"):] if name.startswith("NVMLError_") else name


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
        #: The recorded run's own processes (its command and server), so a replay judges foreign ones alike.
        self.own_pids = frozenset(int(p) for p in trace.get("own_pids", []) if isinstance(p, int))
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
    from hoststate.nvml import DRIVER_MARKERS

    if not any(os.path.exists(p) for p in DRIVER_MARKERS):
        return None, "absent: no NVIDIA driver loaded"
    try:
        from hoststate.nvml import import_pynvml

        return LiveSource(import_pynvml(), replicate), "ok"
    except ImportError as err:
        return None, f"absent: nvidia-ml-py is not installed ({err})"
    except Exception as err:  # nvmlInit or a handle failed: the run is not watched, and says so
        return None, f"error: {_error_name(err)}"


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
                 own_pids: Callable[[], Iterable[int]] | None = None, server_pid: int | None = None):
        if not (isinstance(interval, int | float) and math.isfinite(interval) and interval > 0):
            raise InputError(f"--watch-interval {interval!r}: must be a finite number of seconds greater than 0")
        self.source = source
        self.interval = float(interval)
        self.checkpoint = max(float(checkpoint), self.interval)
        self.root = root
        self.cgroup_pid = cgroup_pid if cgroup_pid is not None else os.getpid()
        self.vllm_url = vllm_url
        #: The process whose socket /metrics is read from (the server the snapshot described), and when it started:
        #: another process on the URL's port, or a pid given to another after the server exited, is never read.
        self.server_pid = server_pid
        self._server_start: int | None = None
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
        self.host: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._foreign: dict[int, list[int]] = {}
        self._first_pids: set[int] | None = None
        #: Pids judged the run's own, with their start times (discovery.start_time): a pid names one process only
        #: until it exits and the kernel gives the number to another.
        self._own_seen: dict[int, int | None] = {}
        self._from_start: set[int] = set()

    # -- lifecycle
    def start(self) -> Sampler:
        if self.server_pid is not None:
            from hoststate.collectors.vllm.discovery import start_time

            self._server_start = start_time(self.server_pid)
        self.host["cgroup_start"], self.host["cgroup"] = self._cpu_stat()
        if self.vllm_url:
            self.host["vllm_start"], err = self._scrape()
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
        self.host["cgroup_end"], _ = self._cpu_stat()
        if self.vllm_url:
            self.host["vllm_end"], err = self._scrape()
            if err:
                self.errors.append(f"vllm /metrics at end: {err}")
        return self

    def _scrape(self) -> tuple[dict[str, float] | None, str | None]:
        """vLLM's counters from the server's own socket, under one deadline for the whole scrape (a server answering
        a byte a second is cut off at :data:`SCRAPE_DEADLINE`, by the read's own deadline and, should a step of
        it outlast that, by the wait here: the start of the command never waits longer)."""
        box: list[tuple[dict[str, float] | None, str | None]] = []
        def scrape() -> None:
            box.append(scrape_vllm(str(self.vllm_url), expect_pid=self.server_pid, expect_start=self._server_start,
                                   timeout=SCRAPE_DEADLINE))

        worker = threading.Thread(target=scrape, name="hoststate-scrape", daemon=True)
        worker.start()
        worker.join(SCRAPE_DEADLINE + 1.0)  # the read's own deadline ends it first; this wait bounds it regardless
        if not box:
            return None, f"no whole answer within {SCRAPE_DEADLINE:g} s"
        return box[0]

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
        """Pids computing on a GPU that are not the watched command's processes (nor the server's). One already
        there at the first sample is foreign all the same (``from_start``): it shares the GPU for the whole run."""
        if self.own_pids is None:
            return
        seen = {int(p) for row in rows if len(row) > 5 and row[5] for p in row[5]}
        first = self._first_pids is None
        if first:
            self._first_pids = seen
        from hoststate.collectors.vllm.discovery import start_time

        for pid in seen & self._own_seen.keys():  # reused since (another start time): judged again
            now = start_time(pid)
            if now is not None and now != self._own_seen[pid]:
                del self._own_seen[pid]
        new = seen - set(self._foreign) - self._own_seen.keys()
        if not new:
            return
        own = set(self.own_pids()) | set(getattr(self.source, "own_pids", ()))
        self._own_seen.update((pid, start_time(pid)) for pid in new & own)
        for pid in new - own:
            self._foreign[pid] = [i for i, row in enumerate(rows) if len(row) > 5 and row[5] and pid in row[5]]
            if first:
                self._from_start.add(pid)

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
            "own_pids": sorted(self._own_seen),
            "interval_s": self.interval,
            "gpus": self.source.gpus if self.source is not None else [],
            "samples": self.samples,
            "counters": self.checkpoints,
            "events": self.event_list,
            "unreadable": dict(getattr(self.source, "unreadable", {})),
        }

    def summary(self) -> dict[str, Any]:
        """What happened during the run (docs/watch.md): per-GPU shares, counter deltas, events, host side."""
        from hoststate.run.summary import summarize

        return summarize(self)


def descendants(roots: Iterable[int]) -> set[int]:
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
