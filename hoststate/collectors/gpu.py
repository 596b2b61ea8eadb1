"""gpu: NVIDIA GPUs, NVLink, fabric and topology through NVML (nvidia-ml-py's ``pynvml``).

One ``nvmlInit`` per snapshot and ``nvmlShutdown`` in ``finally``. Every call that fails is left
out of the data and recorded in ``unreadable`` as ``"<uuid>/<field>" = "<NVML error name>"``
(``NotSupported``, ``NoPermission``, ``FunctionNotFound``, ``GpuIsLost``, ...). ``NotSupported``
describes the hardware (NVLink on a passthrough GPU, MIG on a consumer card) and leaves the
status ``ok``; any other error makes it ``partial``. Keys, units and the replay format are in
docs/gpu.md.

``pynvml`` is imported here, lazily, never at module import: ``hoststate show`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from hoststate.collectors import Context, Section, gpu_occupancy
from hoststate.coverage import source
from hoststate.io import Reader
from hoststate.nvml import DRIVER_MARKERS, EVENT_REASONS, HARDWARE_REASONS, NVML_REPLAY_ENV, SETTING_REASONS

REPLAY_ENV = NVML_REPLAY_ENV

#: Errors that describe the hardware rather than a failed read: recorded, status stays ``ok``.
_U = r"(?P<u>GPU-[^/]+)"
#: What this collector reads (NVML calls, named as failures are recorded: ``<uuid>/<field>``) -> where it lands in
#: the ``gpu`` table; first match names it. A GPU whose handle or UUID could not be read is named by position.
SOURCES = (
    source(r"system/count", "count", "devices.**", "fabric.**", "topology.**", "p2p.**"),  # no GPU is known
    source(r"system/(?P<f>[^/]+)", "{f}"),
    source(r"devices/(?P<i>\d+)(?:/uuid)?", "devices.GPU{i}.**", "devices.{i}.**", "fabric.GPU{i}.**"),
    source(rf"{_U}/nvlink(?:/.*)?", "devices.{u}.nvlink.**"),
    source(rf"{_U}/mig_devices(?:/.*)?", "devices.{u}.mig_devices.**"),
    source(rf"{_U}/fabric", "fabric.{u}.**"),
    source(rf"{_U}/observed(?:/.*)?", "devices.{u}.observed.**"),
    source(rf"{_U}/occupancy(?:/.*)?", "devices.{u}.occupancy.**"),
    source(rf"{_U}/power_min_max_limit_mw", "devices.{u}.power_min_limit_mw", "devices.{u}.power_max_limit_mw"),
    source(rf"{_U}/pci_bus_id", "devices.{u}.pci_*"),
    source(rf"{_U}/gsp_firmware_mode", "devices.{u}.gsp_firmware_mode", "devices.{u}.gsp_firmware_default_mode"),
    source(rf"{_U}/(?P<f>ecc_mode|mig_mode)", "devices.{u}.{f}_*", "devices.{u}.mig_devices"),
    source(rf"{_U}/cpu_affinity", "devices.{u}.cpu_affinity", "devices.{u}.numa_node"),
    source(rf"{_U}/health/remapped_rows", "devices.{u}.health.remapped_rows_*"),
    source(rf"{_U}/health/(?P<f>[^/]+)", "devices.{u}.health.{f}"),
    source(rf"{_U}/workload_power_profiles", "devices.{u}.workload_power_profiles.**"),
    source(rf"{_U}/(?P<f>[^/]+)", "devices.{u}.{f}"),
    source(r"topology/(?P<a>[^/]+)/(?P<b>[^/]+)", "topology.{a}.{b}", "topology.{b}.{a}", "devices.*.nvlink.peers"),
    source(r"p2p/(?P<c>[^/]+)/(?P<a>[^/]+)/(?P<b>[^/]+)", "p2p.{c}.{a}.{b}"),
    source(r"sys/bus/pci/devices/[^/]+/local_cpulist", "devices.*.cpu_affinity"),
    source(r"sys/bus/pci/devices/[^/]+/numa_node", "devices.*.memory_affinity"),
    source(r"sys/devices/system/node/online", "devices.*.memory_affinity"),
)

BENIGN = frozenset({"NotSupported"})
#: nvmlInit errors that mean "no NVIDIA driver here": status ``absent``.
ABSENT_INIT = frozenset({"LibraryNotFound", "DriverNotLoaded"})
#: Any of these exists where the NVIDIA driver is loaded (bare metal, containers, WSL2); checked
#: before importing pynvml (30-90 ms) so a host without a driver is ``absent`` in microseconds.

CLOCKS = (("graphics", 0), ("sm", 1), ("mem", 2), ("video", 3))  # NVML_CLOCK_*
APP_CLOCKS = CLOCKS[:3]  # applications clocks exist for graphics, SM and memory
ARCHITECTURES = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
    9: "Hopper", 10: "Blackwell", 13: "Rubin",
}  # fmt: skip
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
VIRTUALIZATION_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
LINK_DEVICE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 0xFF: "unknown"}
#: NVML_NVLINK_CAP_* worth diffing (SLI bridge and "valid" say nothing about a benchmark).
LINK_CAPS = (("p2p_supported", 0), ("sysmem_access", 1), ("p2p_atomics", 2), ("sysmem_atomics", 3))
#: NVML_P2P_CAPS_INDEX_* as plain ints: the binding's NVML_P2P_CAPS_INDEX_READ is the tuple (0,).
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3))
P2P_STATUS = {
    0: "ok", 1: "chipset_not_supported", 2: "gpu_not_supported", 3: "ioh_topology_not_supported",
    4: "disabled_by_regkey", 5: "not_supported", 6: "unknown",
}  # fmt: skip
#: nvmlDeviceGetTopologyCommonAncestor levels as ``nvidia-smi topo -m`` prints them.
TOPOLOGY = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
#: Affinity masks are read as this many 64-bit words (up to 1024 CPUs / NUMA nodes).
AFFINITY_WORDS = 16


class _Lost(Exception):
    """A device answered GpuIsLost: stop reading it, keep the others."""


def error_name(err: BaseException) -> str:
    """An exception as the name recorded in ``unreadable``: ``NVMLError_NoPermission`` -> ``NoPermission``."""
    name = type(err).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_") :]
    if name == "NVMLError":
        return f"NVMLError {getattr(err, 'value', '?')}"
    return name


def cpulist(words: Any) -> str:
    """A bitmask (sequence of 64-bit words) as a kernel-style list, ``0-15,32``."""
    bits = [w * 64 + b for w, word in enumerate(words) for b in range(64) if (int(word) >> b) & 1]
    ranges: list[str] = []
    start = prev = None
    for bit in bits + [None]:
        if start is not None and (bit is None or bit != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if bit is not None and start is None:
            start = bit
        prev = bit
    return ",".join(ranges)


def event_reasons(mask: int) -> list[str]:
    """Clock-event reason bits as names; unknown bits as hex (``0x200``)."""
    names = [name for bit, name in EVENT_REASONS if mask & bit]
    known = sum(bit for bit, _ in EVENT_REASONS)
    rest = mask & ~known
    names += [hex(1 << b) for b in range(64) if (rest >> b) & 1]
    return names


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
    return str(value).strip()


def _bus_id(value: Any) -> str:
    return _text(value).upper()


def _bindings_version(nvml: Any) -> str | None:
    """nvidia-ml-py's version: the replay's, else the dist-info beside the module (cheaper than
    importlib.metadata's scan of every distribution), else importlib.metadata."""
    if not isinstance(nvml, type(os)):
        return getattr(nvml, "bindings_version", None)
    here = os.path.dirname(getattr(nvml, "__file__", "") or ".")
    try:
        for entry in os.listdir(here):
            if entry.startswith("nvidia_ml_py-") and entry.endswith(".dist-info"):
                return entry[len("nvidia_ml_py-") : -len(".dist-info")]
    except OSError:
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("nvidia-ml-py")
    except (ImportError, PackageNotFoundError):
        return None


class _Reader:
    """Calls into NVML, recording every failure as ``unreadable[key] = error name``."""

    def __init__(self, nvml: Any, unreadable: dict[str, str]):
        self.nvml = nvml
        self.unreadable = unreadable

    def call(self, key: str, names: str | tuple[str, ...], *args: Any) -> Any:
        """The first of ``names`` that the bindings and driver have, called with ``args``; None on
        failure with the reason recorded. A later name is tried only when the earlier one is
        missing from the bindings or the driver (FunctionNotFound)."""
        reason = "NotInBindings"
        for name in (names,) if isinstance(names, str) else names:
            fn = getattr(self.nvml, name, None)
            if fn is None:
                continue
            try:
                return fn(*args)
            except Exception as err:  # NVMLError subclasses, and ctypes/binding mismatches
                reason = error_name(err)
                if reason == "GpuIsLost":
                    self.unreadable[key] = reason
                    raise _Lost(key) from err
                if reason != "FunctionNotFound":
                    break
        self.unreadable[key] = reason
        return None

    def put(
        self,
        out: dict[str, Any],
        field: str,
        prefix: str,
        names: str | tuple[str, ...],
        *args: Any,
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        value = self.call(f"{prefix}/{field}", names, *args)
        if value is not None:
            out[field] = convert(value) if convert else value
        return value


def _resolve(ctx: Context) -> tuple[Any, Section | None]:
    """The NVML module to use, or the Section that ends the collection (absent/skipped/error)."""
    if ctx.nvml is not None:
        return ctx.nvml, None
    replay = os.environ.get(REPLAY_ENV)
    if replay:
        from hoststate.nvml_replay import ReplayError, load

        try:
            return load(replay), None
        except ReplayError as err:
            return None, Section(status="error", reason=str(err))
    if not ctx.live:
        return None, Section(
            status="skipped",
            reason=f"NVML reads the running host and cannot honour --root (set {REPLAY_ENV} to replay one)",
        )
    if not any(os.path.exists(p) for p in DRIVER_MARKERS):
        return None, Section(status="absent", reason="no NVIDIA driver loaded (no /dev/nvidiactl, /proc/driver/nvidia)")
    try:
        from hoststate.nvml import import_pynvml

        nvml = import_pynvml()
    except ImportError as err:
        return None, Section(status="absent", reason=f"nvidia-ml-py is not installed ({err})")
    if not hasattr(nvml, "nvmlInitWithFlags"):
        return None, Section(
            status="error",
            reason=f"the pynvml module at {getattr(nvml, '__file__', '?')} is the old 'pynvml' package's, "
            "shadowing nvidia-ml-py; uninstall pynvml",
        )
    return nvml, None


def collect(ctx: Context) -> Section:
    nvml, early = _resolve(ctx)
    if early is not None:
        return early
    try:
        nvml.nvmlInit()
    except Exception as err:
        name = error_name(err)
        if name in ABSENT_INIT:
            return Section(status="absent", reason=f"nvmlInit: {name}")
        return Section(status="denied" if name == "NoPermission" else "error", reason=f"nvmlInit: {name}")
    try:
        live_module = ctx.live and isinstance(nvml, type(os))
        return _collect(nvml, Reader("/") if live_module else None, server_pid=ctx.vllm_pid)
    finally:
        with contextlib.suppress(Exception):  # a failing shutdown must not cost the snapshot
            nvml.nvmlShutdown()


def _collect(nvml: Any, sysfs: Reader | None = None, server_pid: int | None = None) -> Section:
    """Read everything; ``sysfs`` (live hosts with the real pynvml only) serves the CPU affinity and the parents
    of GPU processes (which of them descend from the server ``server_pid``)."""
    unreadable: dict[str, str] = {}
    r = _Reader(nvml, unreadable)
    data: dict[str, Any] = {}
    r.put(data, "driver_version", "system", "nvmlSystemGetDriverVersion", convert=_text)
    r.put(
        data,
        "cuda_driver_version",
        "system",
        ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
        convert=lambda v: f"{v // 1000}.{v % 1000 // 10}",
    )
    r.put(data, "nvml_version", "system", "nvmlSystemGetNVMLVersion", convert=_text)
    bindings = _bindings_version(nvml)
    if bindings:
        data["bindings_version"] = bindings
    _system_modes(r, data)
    count = r.put(data, "count", "system", "nvmlDeviceGetCount") or 0

    devices: dict[str, dict[str, Any]] = {}
    handles: list[tuple[int, Any, str, dict[str, Any]]] = []  # (index, handle, uuid, device)
    lost: list[str] = []
    fabric: dict[str, dict[str, Any]] = {}
    for index in range(count):
        try:
            handle = r.call(f"devices/{index}", "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                lost.append(f"GPU {index}: {unreadable[f'devices/{index}']}")
                continue
            uid = r.call(f"devices/{index}/uuid", "nvmlDeviceGetUUID", handle)
            if uid is None:
                lost.append(f"GPU {index}: {unreadable[f'devices/{index}/uuid']}")
                continue
            uid = _text(uid)
            dev = _device(nvml, r, handle, index, uid, sysfs)
            fab = _fabric(nvml, r, handle, uid)
        except _Lost as err:
            lost.append(f"GPU {index}: GpuIsLost ({err})")
            continue
        devices[uid] = dev
        if fab:
            fabric[uid] = fab
        handles.append((index, handle, uid, dev))
    if devices:
        data["devices"] = devices
    if fabric:
        data["fabric"] = fabric
    _topology(nvml, r, handles, data)
    for _index, handle, uid, dev in handles:
        try:
            dev["observed"] = _observed(nvml, r, handle, uid)
            _held_by_setting(r, uid, dev)
            occupied = _occupancy(r, handle, uid, dev["observed"], server_pid, sysfs)
            if occupied:
                dev["occupancy"] = occupied
        except _Lost as err:
            lost.append(f"{uid}: GpuIsLost ({err})")

    section = Section(data=data, unreadable=unreadable)
    failed = sorted({v for v in unreadable.values() if v not in BENIGN})
    if failed:
        section.status = "partial"
        parts = [f"{sum(1 for v in unreadable.values() if v not in BENIGN)} NVML reads failed ({', '.join(failed)})"]
        if lost:
            parts.append("; ".join(lost))
        section.reason = "; ".join(parts)
    names = sorted({d.get("name", "?") for d in devices.values()})
    section.notes.append(
        f"{len(devices)} of {count} GPU(s) read: {', '.join(names) or 'none'}; driver {data.get('driver_version', '?')}"
    )
    return section


def _sysfs_bdf(bus_id: str | None) -> str | None:
    """NVML's bus id (``00000000:00:06.0``) as sysfs names the PCI device (``0000:00:06.0``), or None."""
    if not bus_id or bus_id.count(":") != 2:
        return None
    domain, rest = bus_id.split(":", 1)
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return None


def _sysfs_cpulist(sysfs: Reader, bus_id: str | None) -> str | None:
    """The device's ``local_cpulist`` from sysfs: the mask nvmlDeviceGetCpuAffinity computes, read in
    microseconds instead of its 11-15 ms on an H200 (probe); None when unreadable."""
    bdf = _sysfs_bdf(bus_id)
    text = sysfs.read(f"sys/bus/pci/devices/{bdf}/local_cpulist", record=False) if bdf else None
    return text or None


def _sysfs_nodes(sysfs: Reader, bus_id: str | None) -> str | None:
    """The NUMA node nvmlDeviceGetMemoryAffinity names, from the device's ``numa_node`` in sysfs: its node, or node
    0 where the firmware gives none (-1) and node 0 is the only node online (what NVML answered on an H100 host,
    benchmarks/results/nvml-memaff-h100.txt). Read in microseconds instead of NVML's 8-10 ms (its first affinity
    query); None where the answer is not that plain, and NVML is asked."""
    bdf = _sysfs_bdf(bus_id)
    text = sysfs.read(f"sys/bus/pci/devices/{bdf}/numa_node", record=False) if bdf else None
    node = text.strip() if text else ""
    if node.isdigit():
        return str(int(node))
    if node == "-1" and (sysfs.read("sys/devices/system/node/online", record=False) or "").strip() == "0":
        return "0"
    return None


def _device(nvml: Any, r: _Reader, h: Any, index: int, uid: str, sysfs: Reader | None = None) -> dict[str, Any]:
    p = uid
    dev: dict[str, Any] = {"index": index, "uuid": uid}
    pci = r.call(f"{p}/pci_bus_id", "nvmlDeviceGetPciInfo", h)
    if pci is not None:
        dev["pci_bus_id"] = _bus_id(pci.busId)
        dev["pci_device_id"] = f"0x{int(pci.pciDeviceId) & 0xFFFFFFFF:08X}"
        dev["pci_subsystem_id"] = f"0x{int(pci.pciSubSystemId) & 0xFFFFFFFF:08X}"
    r.put(dev, "name", p, "nvmlDeviceGetName", h, convert=_text)
    r.put(dev, "serial", p, "nvmlDeviceGetSerial", h, convert=_text)
    r.put(dev, "board_part_number", p, "nvmlDeviceGetBoardPartNumber", h, convert=_text)
    r.put(dev, "module_id", p, "nvmlDeviceGetModuleId", h)
    r.put(dev, "vbios_version", p, "nvmlDeviceGetVbiosVersion", h, convert=_text)
    r.put(dev, "inforom_image_version", p, "nvmlDeviceGetInforomImageVersion", h, convert=_text)
    gsp = r.call(f"{p}/gsp_firmware_mode", "nvmlDeviceGetGspFirmwareMode", h)
    if gsp is not None:
        dev["gsp_firmware_mode"] = bool(gsp[0])
        dev["gsp_firmware_default_mode"] = bool(gsp[1])
    r.put(dev, "gsp_firmware_version", p, "nvmlDeviceGetGspFirmwareVersion", h, convert=_text)
    arch = r.call(f"{p}/architecture", "nvmlDeviceGetArchitecture", h)
    if arch is not None:
        dev["architecture"] = ARCHITECTURES.get(arch, f"unknown({arch})")
    r.put(dev, "compute_capability", p, "nvmlDeviceGetCudaComputeCapability", h, convert=lambda v: f"{v[0]}.{v[1]}")
    r.put(dev, "memory_total_bytes", p, "nvmlDeviceGetMemoryInfo", h, convert=lambda v: int(v.total))
    r.put(dev, "persistence_mode", p, "nvmlDeviceGetPersistenceMode", h, convert=bool)
    r.put(dev, "compute_mode", p, "nvmlDeviceGetComputeMode", h, convert=lambda v: COMPUTE_MODES.get(v, str(v)))
    ecc = r.call(f"{p}/ecc_mode", "nvmlDeviceGetEccMode", h)
    if ecc is not None:
        dev["ecc_mode_current"], dev["ecc_mode_pending"] = bool(ecc[0]), bool(ecc[1])
    mig = r.call(f"{p}/mig_mode", "nvmlDeviceGetMigMode", h)
    if mig is not None:
        dev["mig_mode_current"], dev["mig_mode_pending"] = bool(mig[0]), bool(mig[1])
        if mig[0]:
            dev["mig_devices"] = _mig_devices(r, h, p)
    r.put(dev, "power_limit_mw", p, "nvmlDeviceGetPowerManagementLimit", h)
    r.put(dev, "power_default_limit_mw", p, "nvmlDeviceGetPowerManagementDefaultLimit", h)
    r.put(dev, "power_enforced_limit_mw", p, "nvmlDeviceGetEnforcedPowerLimit", h)
    limits = r.call(f"{p}/power_min_max_limit_mw", "nvmlDeviceGetPowerManagementLimitConstraints", h)
    if limits is not None:
        dev["power_min_limit_mw"], dev["power_max_limit_mw"] = int(limits[0]), int(limits[1])
    for name, clock in APP_CLOCKS:
        r.put(dev, f"clocks_applications_{name}_mhz", p, "nvmlDeviceGetApplicationsClock", h, clock)
        r.put(dev, f"clocks_default_applications_{name}_mhz", p, "nvmlDeviceGetDefaultApplicationsClock", h, clock)
    for name, clock in CLOCKS:
        r.put(dev, f"clocks_max_{name}_mhz", p, "nvmlDeviceGetMaxClockInfo", h, clock)
    r.put(dev, "pcie_max_link_gen", p, "nvmlDeviceGetMaxPcieLinkGeneration", h)
    r.put(dev, "pcie_max_link_width", p, "nvmlDeviceGetMaxPcieLinkWidth", h)
    r.put(dev, "pcie_gpu_max_link_gen", p, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
    local = _sysfs_cpulist(sysfs, dev.get("pci_bus_id")) if sysfs is not None else None
    if local is not None:
        dev["cpu_affinity"] = local
    else:
        r.put(dev, "cpu_affinity", p, "nvmlDeviceGetCpuAffinity", h, AFFINITY_WORDS, convert=cpulist)
    nodes = _sysfs_nodes(sysfs, dev.get("pci_bus_id")) if sysfs is not None else None
    if nodes is not None:
        dev["memory_affinity"] = nodes
    else:
        r.put(dev, "memory_affinity", p, "nvmlDeviceGetMemoryAffinity", h, AFFINITY_WORDS, 0, convert=cpulist)
    r.put(
        dev,
        "clocks_event_reasons_supported",
        p,
        ("nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons"),
        h,
        convert=event_reasons,
    )
    r.put(
        dev,
        "virtualization_mode",
        p,
        "nvmlDeviceGetVirtualizationMode",
        h,
        convert=lambda v: VIRTUALIZATION_MODES.get(v, str(v)),
    )
    _modes(nvml, r, h, p, dev)
    health = _health(r, h, p)
    if health:
        dev["health"] = health
    dev["nvlink"] = _nvlink(nvml, r, h, p)
    return dev


#: nvmlConfComputeSystemState_t.environment.
CC_ENVIRONMENTS = {0: "unavailable", 1: "simulation", 2: "production"}
#: NVML_MEMORY_ERROR_TYPE_{CORRECTED,UNCORRECTED} x NVML_{VOLATILE,AGGREGATE}_ECC.
ECC_COUNTERS = (("corrected", 0), ("uncorrected", 1))
ECC_SCOPES = (("volatile", 0), ("aggregate", 1))
#: NVML_PAGE_RETIREMENT_CAUSE_*: pages retired after repeated single-bit errors, after a double-bit error.
RETIRE_CAUSES = (("sbe", 0), ("dbe", 1))


def _system_modes(r: _Reader, data: dict[str, Any]) -> None:
    """Modes set for the whole system: Confidential Computing (every host-device copy goes through encrypted
    bounce buffers when on) and the NVLink bandwidth mode (a reduced-bandwidth power mode)."""
    cc = r.call("system/conf_compute", "nvmlSystemGetConfComputeState")
    if cc is not None:
        env = int(cc.environment)
        data["conf_compute"] = {"environment": CC_ENVIRONMENTS.get(env, str(env)), "enabled": bool(cc.ccFeature),
                                "dev_tools_mode": bool(cc.devToolsMode)}
    r.put(data, "nvlink_bw_mode", "system", "nvmlSystemGetNvlinkBwMode")


def _modes(nvml: Any, r: _Reader, h: Any, p: str, dev: dict[str, Any]) -> None:
    """Clock offsets (over- or under-clocking set with nvidia-smi or NVML) and the workload power profiles
    requested and enforced (Blackwell and later: a profile trades clocks for power)."""
    r.put(dev, "clock_offset_gpc_mhz", p, "nvmlDeviceGetGpcClkVfOffset", h)
    r.put(dev, "clock_offset_mem_mhz", p, "nvmlDeviceGetMemClkVfOffset", h)
    cls = getattr(nvml, "c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t", None)
    fn = getattr(nvml, "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles", None)
    if cls is None or fn is None:
        r.unreadable[f"{p}/workload_power_profiles"] = "NotInBindings"
        return
    import ctypes  # lazy: only hosts with a GPU pay its import

    info = cls()
    info.version = getattr(nvml, "nvmlWorkloadPowerProfileCurrentProfiles_v1", 0)
    try:
        fn(h, ctypes.byref(info))
    except Exception as err:
        name = error_name(err)
        r.unreadable[f"{p}/workload_power_profiles"] = name
        if name == "GpuIsLost":
            raise _Lost(f"{p}/workload_power_profiles") from err
        return
    dev["workload_power_profiles"] = {key: _mask_bits(getattr(info, f"{key}ProfilesMask"))
                                      for key in ("requested", "enforced")}


def _mask_bits(mask: Any) -> list[int]:
    """The bits set in an nvmlMask255_t (eight 32-bit words) as profile ids."""
    words = list(getattr(mask, "mask", []))
    return [w * 32 + b for w, word in enumerate(words) for b in range(32) if (int(word) >> b) & 1]


def _health(r: _Reader, h: Any, p: str) -> dict[str, Any]:
    """Memory health: ECC error counts (volatile since the driver loaded, aggregate over the board's life),
    row remapping (Ampere and later: remapped rows, a remap pending until the next GPU reset, a failed remap)
    and page retirement (older GPUs). NotSupported where the GPU uses the other mechanism."""
    out: dict[str, Any] = {}
    q = f"{p}/health"
    for kind, etype in ECC_COUNTERS:
        for scope, counter in ECC_SCOPES:
            r.put(out, f"ecc_errors_{kind}_{scope}", q, "nvmlDeviceGetTotalEccErrors", h, etype, counter, convert=int)
    rows = r.call(f"{q}/remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        corr, unc, pending, failure = (int(v) for v in rows)
        out.update(remapped_rows_corrected=corr, remapped_rows_uncorrected=unc,
                   remapped_rows_pending=bool(pending), remapped_rows_failure=bool(failure))
    for cause, cause_id in RETIRE_CAUSES:
        r.put(out, f"retired_pages_{cause}", q, "nvmlDeviceGetRetiredPages", h, cause_id, convert=len)
    r.put(out, "retired_pages_pending", q, "nvmlDeviceGetRetiredPagesPendingStatus", h, convert=bool)
    return out


def _mig_devices(r: _Reader, h: Any, p: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    slots = r.call(f"{p}/mig_devices", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
    for slot in range(slots):
        fn = getattr(r.nvml, "nvmlDeviceGetMigDeviceHandleByIndex", None)
        try:
            mh = fn(h, slot) if fn else None
        except Exception as err:
            if error_name(err) != "NotFound":  # NotFound: an empty slot
                r.unreadable[f"{p}/mig_devices/{slot}"] = error_name(err)
            continue
        if mh is None:
            r.unreadable[f"{p}/mig_devices"] = "NotInBindings"
            break
        mid = r.call(f"{p}/mig_devices/{slot}/uuid", "nvmlDeviceGetUUID", mh)
        if mid is None:
            continue
        mid = _text(mid)
        mdev: dict[str, Any] = {"slot": slot}
        mp = f"{p}/mig_devices/{mid}"
        r.put(mdev, "name", mp, "nvmlDeviceGetName", mh, convert=_text)
        r.put(mdev, "gpu_instance_id", mp, "nvmlDeviceGetGpuInstanceId", mh)
        r.put(mdev, "compute_instance_id", mp, "nvmlDeviceGetComputeInstanceId", mh)
        r.put(mdev, "memory_total_bytes", mp, "nvmlDeviceGetMemoryInfo", mh, convert=lambda v: int(v.total))
        out[mid] = mdev
    return out


def _nvlink(nvml: Any, r: _Reader, h: Any, p: str) -> dict[str, Any]:
    """Per-link state and, for active links, version, remote end and capabilities.

    A link whose state is NotSupported/InvalidArgument does not exist on this GPU (the bindings'
    NVML_NVLINK_MAX_LINKS is 36 from 13.615 while Hopper has 18); a GPU with none has no NVLink,
    recorded once as ``<uuid>/nvlink = NotSupported`` with zero totals.
    """
    links: dict[str, dict[str, Any]] = {}
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    fn = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    first_error = "NotInBindings" if fn is None else None
    for link in range(max_links if fn else 0):
        try:
            state = fn(h, link)
        except Exception as err:
            name = error_name(err)
            if name == "GpuIsLost":
                r.unreadable[f"{p}/nvlink"] = name
                raise _Lost(f"{p}/nvlink") from err
            if name in ("NotSupported", "InvalidArgument"):
                first_error = first_error or name
                continue
            r.unreadable[f"{p}/nvlink/links/{link}/state"] = name
            continue
        lp = f"{p}/nvlink/links/{link}"
        entry: dict[str, Any] = {"state": "active" if state == 1 else "inactive"}
        if state == 1:
            r.put(entry, "version", lp, "nvmlDeviceGetNvLinkVersion", h, link)
            r.put(
                entry,
                "remote_pci_bus_id",
                lp,
                "nvmlDeviceGetNvLinkRemotePciInfo",
                h,
                link,
                convert=lambda v: _bus_id(v.busId),
            )
            r.put(
                entry,
                "remote_device_type",
                lp,
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                h,
                link,
                convert=lambda v: LINK_DEVICE_TYPES.get(v, str(v)),
            )
            for cap, cap_id in LINK_CAPS:
                r.put(entry, cap, lp, "nvmlDeviceGetNvLinkCapability", h, link, cap_id, convert=bool)
        links[str(link)] = entry
    if not links and first_error and not any(k.startswith(f"{p}/nvlink/") for k in r.unreadable):
        r.unreadable[f"{p}/nvlink"] = "NotSupported" if first_error == "InvalidArgument" else first_error
    out: dict[str, Any] = {
        "links_total": len(links),
        "links_active": sum(1 for e in links.values() if e["state"] == "active"),
    }
    if links:
        out["links"] = links
    return out


def _fabric(nvml: Any, r: _Reader, h: Any, p: str) -> dict[str, Any] | None:
    """nvmlDeviceGetGpuFabricInfoV: success with state NOT_SUPPORTED (0) on a GPU without a
    fabric is a value, not an error; status, clique and cluster are meaningful only when
    the state is COMPLETED (3)."""
    cls = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    fn = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if cls is None or fn is None:
        r.unreadable[f"{p}/fabric"] = "NotInBindings"
        return None
    import ctypes  # lazy: only hosts with a GPU pay its import

    info = cls()
    try:
        fn(h, ctypes.byref(info))
    except Exception as err:
        name = error_name(err)
        r.unreadable[f"{p}/fabric"] = name
        if name == "GpuIsLost":
            raise _Lost(f"{p}/fabric") from err
        return None
    state = int(info.state)
    out: dict[str, Any] = {"state": FABRIC_STATES.get(state, str(state))}
    if state == 3:
        status = int(info.status)
        out["status"] = "Success" if status == 0 else error_name(nvml.NVMLError(status))
        out["clique_id"] = int(info.cliqueId)
        out["cluster_uuid"] = _uuid_text(bytes(bytearray(info.clusterUuid)))
        out["health_mask"] = int(getattr(info, "healthMask", 0))
    return out


def _uuid_text(raw: bytes) -> str:
    """16 bytes as ``str(uuid.UUID(bytes=raw))`` writes them, without importing uuid (it loads libuuid: 5-9 ms of
    every snap's start); ValueError on another length, as uuid.UUID."""
    if len(raw) != 16:
        raise ValueError("bytes is not a 16-char string")
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _topology(nvml: Any, r: _Reader, handles: list[tuple[int, Any, str, dict[str, Any]]], data: dict[str, Any]) -> None:
    """``gpu.topology`` as ``nvidia-smi topo -m`` shows it, the P2P matrix, and NVLink peers.

    NV# = active links whose remote end is the peer, plus, on NVSwitch systems, the smaller of the
    two GPUs' active switch links (NV18 between every pair of an HGX H100). Pairs without NVLink
    get the PCIe relation of nvmlDeviceGetTopologyCommonAncestor.
    """
    if len(handles) < 2:
        for *_rest, dev in handles:
            dev["nvlink"]["peers"] = 0
        return
    direct: dict[str, dict[str, int]] = {}
    switch: dict[str, int] = {}
    for *_rest, uid, dev in handles:
        links = dev["nvlink"].get("links", {})
        active = [e for e in links.values() if e["state"] == "active"]
        switch[uid] = sum(1 for e in active if e.get("remote_device_type") == "switch")
        peers: dict[str, int] = {}
        for e in active:
            if e.get("remote_device_type") == "gpu" and "remote_pci_bus_id" in e:
                peers[e["remote_pci_bus_id"]] = peers.get(e["remote_pci_bus_id"], 0) + 1
        direct[uid] = peers
    topo: dict[str, dict[str, str]] = {}
    p2p: dict[str, dict[str, dict[str, str]]] = {name: {} for name, _ in P2P_CAPS}
    peer_count = {uid: 0 for _, _, uid, _ in handles}
    for a, ha, ua, _da in handles:
        ga = f"GPU{a}"
        for b, hb, ub, db in handles:
            if a == b:
                continue
            gb = f"GPU{b}"
            for cap, cap_id in P2P_CAPS:
                status = r.call(f"p2p/{cap}/{ga}/{gb}", "nvmlDeviceGetP2PStatus", ha, hb, cap_id)
                if status is not None:
                    p2p[cap].setdefault(ga, {})[gb] = P2P_STATUS.get(int(status), str(status))
            if b < a:
                continue
            nv = direct[ua].get(db.get("pci_bus_id", "?"), 0)
            if switch[ua] and switch[ub]:
                nv += min(switch[ua], switch[ub])
            if nv:
                rel = f"NV{nv}"
                peer_count[ua] += 1
                peer_count[ub] += 1
            else:
                level = r.call(f"topology/{ga}/{gb}", "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
                if level is None:
                    continue
                rel = TOPOLOGY.get(int(level), str(level))
            topo.setdefault(ga, {})[gb] = rel
            topo.setdefault(gb, {})[ga] = rel
    for *_rest, uid, dev in handles:
        dev["nvlink"]["peers"] = peer_count[uid]
    if topo:
        data["topology"] = topo
    p2p = {k: v for k, v in p2p.items() if v}
    if p2p:
        data["p2p"] = p2p


def _occupancy(r: _Reader, h: Any, uid: str, observed: dict[str, Any], server_pid: int | None,
               sysfs: Reader | None) -> dict[str, Any]:
    """Memory in use and compute processes that are not the benchmark's (hoststate.collectors.gpu_occupancy)."""
    p = f"{uid}/occupancy"
    if "processes" not in observed:  # the process list failed: who occupies the GPU is not known
        r.unreadable[p] = r.unreadable.get(f"{uid}/observed/processes", "unreadable")
        return {}
    memory = r.call(f"{p}/memory_used_bytes", "nvmlDeviceGetMemoryInfo", h)
    from hoststate.filetrust import run_by_invoker

    parent_of = gpu_occupancy.parent_reader(sysfs.read) if sysfs is not None else (lambda _pid: None)
    owner_of = gpu_occupancy.owner_reader(sysfs.read) if sysfs is not None else (lambda _pid: (None, None))
    table, unattributed = gpu_occupancy.occupancy(
        None if memory is None else int(memory.used), observed["processes"],
        lambda pid, name: gpu_occupancy.is_own(pid, name, server_pid, parent_of, owner_of, run_by_invoker))
    if unattributed:
        r.unreadable[f"{p}/memory_used_bytes"] = unattributed
    return table


def _held_by_setting(r: _Reader, uid: str, dev: dict[str, Any]) -> None:
    """The clock-event reasons that are settings (SETTING_REASONS: applications clocks, a clock lock, display
    clocks), kept beside the settings: NVML has no query for a lock set with ``nvidia-smi -lgc``, and this bit of
    the volatile mask is how it shows. The reasons that are the hardware holding the clocks down (HARDWARE_REASONS:
    HW slowdown, HW thermal and power-brake slowdown, SW thermal slowdown) as ``clocks_held_by_hardware``, written
    only when there is one (a healthy GPU's snapshot reads as before it was recorded); the rest of the mask wobbles
    between idle and load (gpu_idle, sw_power_cap) and stays a volatile reading."""
    reasons = dev["observed"].get("clocks_event_reasons")
    if isinstance(reasons, list):
        dev["clocks_held_by_setting"] = [x for x in reasons if x in SETTING_REASONS]
        hardware = [x for x in reasons if x in HARDWARE_REASONS]
        if hardware:
            dev["clocks_held_by_hardware"] = hardware
    elif (why := r.unreadable.get(f"{uid}/observed/clocks_event_reasons")) is not None:
        r.unreadable[f"{uid}/clocks_held_by_setting"] = why


def _observed(nvml: Any, r: _Reader, h: Any, uid: str) -> dict[str, Any]:
    """Volatile readings: they differ between any two snapshots and are never configuration."""
    p = f"{uid}/observed"
    obs: dict[str, Any] = {}
    for name, clock in CLOCKS:
        r.put(obs, f"clocks_{name}_mhz", p, "nvmlDeviceGetClockInfo", h, clock)
    r.put(obs, "temperature_gpu_c", p, ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), h, 0)
    r.put(obs, "power_draw_mw", p, "nvmlDeviceGetPowerUsage", h)
    r.put(obs, "pstate", p, "nvmlDeviceGetPerformanceState", h, convert=lambda v: "unknown" if v == 32 else f"P{v}")
    r.put(
        obs,
        "clocks_event_reasons",
        p,
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        h,
        convert=event_reasons,
    )
    r.put(obs, "pcie_link_gen", p, "nvmlDeviceGetCurrPcieLinkGeneration", h)
    r.put(obs, "pcie_link_width", p, "nvmlDeviceGetCurrPcieLinkWidth", h)
    procs = r.call(f"{p}/processes", "nvmlDeviceGetComputeRunningProcesses", h)
    if procs is not None:
        rows = []
        for proc in procs:
            row: dict[str, Any] = {"pid": int(proc.pid)}
            used = getattr(proc, "usedGpuMemory", None)
            if used is not None:
                row["used_memory_bytes"] = int(used)
            r.put(row, "name", f"{p}/processes/{proc.pid}", "nvmlSystemGetProcessName", int(proc.pid), convert=_text)
            rows.append(row)
        obs["processes"] = rows
    return obs
