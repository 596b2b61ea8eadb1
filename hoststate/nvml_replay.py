"""A fake NVML that replays a recorded host: an object standing in for the ``pynvml`` module.

The gpu collector takes it through ``Context.nvml`` (tests) or the ``HOSTSTATE_NVML_REPLAY``
environment variable (the CLI and benchmarks). Constants, structures and the ``NVMLError``
classes are the real ``pynvml`` ones, so the collector's error handling is exercised as on a
real host; only the ``nvml*`` functions are answered from the replay file.

Replay file (JSON, ``"format": "hoststate-nvml-replay/1"``)::

    {"format": "hoststate-nvml-replay/1", "description": "...", "bindings_version": "13.610.43",
     "nvlink_max_links": 18,                      # NVML_NVLINK_MAX_LINKS of the recorded bindings
     "missing": "NotSupported",                   # what a call absent from the file raises
     "init": {"error": "DriverNotLoaded"},         # optional: nvmlInit fails, or {"hang": 5.0}
     "system": {"nvmlSystemGetDriverVersion": "580.159.04", ...},
     "device_defaults": {<calls shared by every device>},
     "devices": [{"handle_error": "GpuIsLost"} | {"calls": {<name>: <entry>}, "mig_devices": [...]}],
     "pairs": {"nvmlDeviceGetTopologyCommonAncestor": {"0,1": 20, "*": 50},
               "nvmlDeviceGetP2PStatus": {"0,1,2": 0, "*": 0}}}

An entry is a value (dicts become attribute objects, as ctypes structures are), an error
``{"error": "NoPermission"}`` (raised as ``pynvml.NVMLError_NoPermission``), a stall
``{"hang": seconds}``, or ``{"by_arg": {"1": ..., "*": ...}}`` keyed by the call's arguments after
the handle joined with ``","`` (``nvmlDeviceGetClockInfo(h, 1)`` looks up ``"1"``).

``python -m hoststate.nvml_replay hgx --gpus 8 [--link-down GPU:LINK] [--lost GPU] -o FILE`` writes a
synthetic HGX H100 replay (NVSwitch systems, 18 NVLinks per GPU) for tests and benchmarks.
"""

from __future__ import annotations

import json
import threading
import types
from typing import Any

from hoststate.nvml import import_pynvml

FORMAT = "hoststate-nvml-replay/1"
ENV = "HOSTSTATE_NVML_REPLAY"


class ReplayError(ValueError):
    """Raised when a replay file cannot be read or is not a replay."""


class _Handle:
    """A device handle: the replayed calls of one GPU (or one MIG device)."""

    __slots__ = ("index", "calls", "handle_error", "mig")

    def __init__(self, index: int, calls: dict[str, Any], handle_error: str | None, mig: list[_Handle]):
        self.index = index
        self.calls = calls
        self.handle_error = handle_error
        self.mig = mig

    def __repr__(self) -> str:
        return f"<replay device {self.index}>"


#: Calls whose binding takes a structure to fill (besides the fabric call above): the entry gives its fields.
OUT_STRUCTS = frozenset({"nvmlDeviceWorkloadPowerProfileGetCurrentProfiles"})


def _fill(target: Any, value: Any) -> None:
    """Set a ctypes structure's fields from a replayed entry (nested structures and arrays too)."""
    for key, val in vars(value).items():
        if isinstance(val, types.SimpleNamespace):
            _fill(getattr(target, key), val)
        elif isinstance(val, list):
            array = getattr(target, key)
            for i, item in enumerate(val):
                array[i] = item
        else:
            setattr(target, key, val)


def _struct(value: Any) -> Any:
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _struct(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_struct(v) for v in value]
    return value


class ReplayNvml:
    """Module-like replay of one host. Counts ``init_calls``/``shutdown_calls``/``calls`` for tests."""

    def __init__(self, data: dict[str, Any], source: str = "<replay>"):
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReplayError(f"{source}: not an NVML replay (expected format {FORMAT!r})")
        self._real = import_pynvml()
        self.source = source
        self.description = data.get("description", "")
        self.bindings_version = data.get("bindings_version")
        self.missing = data.get("missing", "NotSupported")
        self._init = data.get("init")
        self._system: dict[str, Any] = dict(data.get("system", {}))
        self._pairs: dict[str, dict[str, Any]] = dict(data.get("pairs", {}))
        defaults = dict(data.get("device_defaults", {}))
        self._devices: list[_Handle] = []
        for i, dev in enumerate(data.get("devices", [])):
            calls = {**defaults, **dev.get("calls", {})}
            mig = [
                _Handle(j, dict(m.get("calls", {})), m.get("handle_error"), [])
                for j, m in enumerate(dev.get("mig_devices", []))
            ]
            self._devices.append(_Handle(i, calls, dev.get("handle_error"), mig))
        self._system.setdefault("nvmlDeviceGetCount", len(self._devices))
        if "nvlink_max_links" in data:
            self.NVML_NVLINK_MAX_LINKS = int(data["nvlink_max_links"])
        self._absent = set(data.get("absent_functions", []))
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls = 0
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set on the instance: nvml* functions come from the replay,
        # everything else (constants, NVMLError classes, ctypes structures) from real pynvml.
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._absent:
            raise AttributeError(f"replayed bindings have no {name}")
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: self._device_call(name, handle, args)
        if name.startswith("nvmlSystem"):
            return lambda *args: self._answer(name, self._lookup(self._system, name, args))
        return getattr(self._real, name)

    def _raise(self, error: str) -> None:
        cls = getattr(self._real, f"NVMLError_{error}", None)
        if cls is None:
            raise ReplayError(f"{self.source}: unknown NVML error name {error!r}")
        raise cls()

    def _lookup(self, table: dict[str, Any], name: str, args: tuple[Any, ...]) -> Any:
        entry = table.get(name, {"error": self.missing})
        if isinstance(entry, dict) and "by_arg" in entry:
            by_arg = entry["by_arg"]
            key = ",".join(str(a) for a in args)
            entry = by_arg.get(key, by_arg.get("*", {"error": self.missing}))
        return entry

    def _answer(self, name: str, entry: Any) -> Any:
        with self._lock:
            self.calls += 1
        if isinstance(entry, dict) and "hang" in entry:
            threading.Event().wait(float(entry["hang"]))
            self._raise("Timeout")
        if isinstance(entry, dict) and "error" in entry:
            self._raise(entry["error"])
        if name == "nvmlDeviceGetGspFirmwareVersion" and isinstance(entry, str):
            return entry.encode()  # the real binding returns bytes here
        return _struct(entry)

    def _device_call(self, name: str, handle: Any, args: tuple[Any, ...]) -> Any:
        if not isinstance(handle, _Handle):
            self._raise("InvalidArgument")
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            self._answer(name, self._lookup(handle.calls, "nvmlDeviceGetMaxMigDeviceCount", ()))
            index = int(args[0])
            if index >= len(handle.mig):
                self._raise("NotFound")
            mig = handle.mig[index]
            if mig.handle_error:
                self._raise(mig.handle_error)
            return mig
        if name in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"):
            other = args[0]
            if not isinstance(other, _Handle):
                self._raise("InvalidArgument")
            table = self._pairs.get(name, {})
            rest = "".join(f",{a}" for a in args[1:])
            entry = table.get(f"{handle.index},{other.index}{rest}")
            if entry is None and name == "nvmlDeviceGetTopologyCommonAncestor":
                entry = table.get(f"{other.index},{handle.index}")
            if entry is None:
                entry = table.get("*", {"error": self.missing})
            return self._answer(name, entry)
        if name in ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"):
            value = self._answer(name, self._lookup(handle.calls, "nvmlDeviceGetGpuFabricInfoV", ()))
            target = getattr(args[0], "_obj", args[0])  # ctypes.byref(x) keeps x as _obj
            for key, val in vars(value).items():
                if key == "clusterUuid":
                    for i, b in enumerate(val):
                        target.clusterUuid[i] = b
                else:
                    setattr(target, key, val)
            return self._real.NVML_SUCCESS
        if name in OUT_STRUCTS:  # the binding fills the caller's structure and returns NVML_SUCCESS
            _fill(getattr(args[0], "_obj", args[0]), self._answer(name, self._lookup(handle.calls, name, ())))
            return self._real.NVML_SUCCESS
        return self._answer(name, self._lookup(handle.calls, name, args))

    # -- calls with behaviour of their own -------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        with self._lock:
            self.init_calls += 1
        if self._init:
            self._answer("nvmlInit", self._init)

    def nvmlShutdown(self) -> None:
        with self._lock:
            self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return self._answer("nvmlDeviceGetCount", self._lookup(self._system, "nvmlDeviceGetCount", ()))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        with self._lock:
            self.calls += 1
        if not 0 <= index < len(self._devices):
            self._raise("InvalidArgument")
        dev = self._devices[index]
        if dev.handle_error:
            self._raise(dev.handle_error)
        return dev


def load_data(data: dict[str, Any], source: str = "<replay>") -> ReplayNvml:
    return ReplayNvml(data, source)


def load(path: str) -> ReplayNvml:
    """A replay from a JSON file; ReplayError names the file on any defect."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as err:
        raise ReplayError(f"{path}: cannot read NVML replay: {err.strerror}") from err
    except ValueError as err:
        raise ReplayError(f"{path}: NVML replay is not valid JSON: {err}") from err
    return ReplayNvml(data, path)


# -- synthetic hosts ---------------------------------------------------------------------------

#: PCI bus ids of the eight GPUs of a DGX H100 (PCI order), NUMA node 0 for the first four.
_HGX_BUS = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")
#: Four NVSwitch chips; each GPU spreads its 18 NVLinks over them as 5/4/4/5.
_SWITCH_OF_LINK = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5


def _mask_words(cpus: list[int], words: int = 4) -> list[int]:
    out = [0] * words
    for c in cpus:
        out[c // 64] |= 1 << (c % 64)
    return out


def synthetic_hgx(
    gpus: int = 8,
    *,
    link_down: tuple[int, int] | None = None,
    lost: int | None = None,
) -> dict[str, Any]:
    """An HGX H100 SXM5 host (synthetic; values modelled on DGX H100): ``gpus`` GPUs, each with
    18 NVLink 4 links to four NVSwitches, so ``nvidia-smi topo -m`` shows NV18 between every pair.

    ``link_down=(gpu, link)`` makes one link inactive; ``lost=gpu`` makes that GPU's handle raise
    GpuIsLost while the others read.
    """
    half = max(1, gpus // 2)
    devices = []
    for i in range(gpus):
        # larger synthetic hosts: one GPU per bus, domains beyond the first
        bus = f"00000000:{_HGX_BUS[i]}:00.0" if i < len(_HGX_BUS) else f"{i // 256:08X}:{i % 256:02X}:00.0"
        node = 0 if i < half else 1
        cpus = list(range(0, 56)) + list(range(112, 168)) if node == 0 else list(range(56, 112)) + list(range(168, 224))
        uuid = f"GPU-{0x6b1a0000 + i:08x}-5c1e-4d2a-9f00-{0x2d0000000000 + i:012x}"
        states = {str(link): 1 for link in range(18)}
        if link_down and link_down[0] == i:
            states[str(link_down[1])] = 0
        switch_bus = [f"{0x100 * (i // 8):08X}:{0x05 + s:02X}:00.0" for s in range(4)]
        calls = {
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetSerial": f"{1654922000000 + i}",
            "nvmlDeviceGetPciInfo": {
                "busId": bus,
                "pciDeviceId": 0x233010DE,
                "pciSubSystemId": 0x16C110DE,
            },
            "nvmlDeviceGetModuleId": i + 1,
            "nvmlDeviceGetCpuAffinity": _mask_words(cpus),
            "nvmlDeviceGetMemoryAffinity": [1 << node],
            "nvmlDeviceGetNvLinkState": {"by_arg": {**states, "*": {"error": "NotSupported"}}},
            "nvmlDeviceGetNvLinkRemotePciInfo": {
                "by_arg": {str(link): {"busId": switch_bus[_SWITCH_OF_LINK[link]]} for link in range(18)}
            },
        }
        dev: dict[str, Any] = {"calls": calls}
        if lost == i:
            dev = {"handle_error": "GpuIsLost"}
        devices.append(dev)
    return {
        "format": FORMAT,
        "description": f"synthetic HGX H100 SXM5, {gpus} GPUs, 18 NVLinks each to 4 NVSwitches"
        + (f"; GPU {link_down[0]} link {link_down[1]} down" if link_down else "")
        + (f"; GPU {lost} lost" if lost is not None else ""),
        "bindings_version": "12.570.86",
        "nvlink_max_links": 18,
        "missing": "NotSupported",
        "system": {
            "nvmlSystemGetDriverVersion": "570.133.20",
            "nvmlSystemGetCudaDriverVersion_v2": 12080,
            "nvmlSystemGetNVMLVersion": "12.570.133.20",
            "nvmlDeviceGetCount": gpus,
            "nvmlSystemGetProcessName": {"by_arg": {"4242": "python3"}},
            "nvmlSystemGetConfComputeState": {"environment": 0, "ccFeature": 0, "devToolsMode": 0},
            "nvmlSystemGetNvlinkBwMode": 0,
        },
        "device_defaults": {
            "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetBoardPartNumber": "692-2G520-0200-000",
            "nvmlDeviceGetVbiosVersion": "96.00.99.00.01",
            "nvmlDeviceGetInforomImageVersion": "G520.0200.00.05",
            "nvmlDeviceGetGspFirmwareMode": [1, 1],
            "nvmlDeviceGetGspFirmwareVersion": "570.133.20",
            "nvmlDeviceGetArchitecture": 9,
            "nvmlDeviceGetCudaComputeCapability": [9, 0],
            "nvmlDeviceGetMemoryInfo": {"total": 85520809984, "free": 84994424832, "used": 526385152},
            "nvmlDeviceGetPersistenceMode": 1,
            "nvmlDeviceGetComputeMode": 0,
            "nvmlDeviceGetEccMode": [1, 1],
            "nvmlDeviceGetMigMode": [0, 0],
            # modes and health as a live H200 answered them (fixtures/real/h200-gpu-modes.json); page
            # retirement and workload power profiles are NotSupported on Hopper (the replay's default)
            "nvmlDeviceGetGpcClkVfOffset": 0,
            "nvmlDeviceGetMemClkVfOffset": 0,
            "nvmlDeviceGetTotalEccErrors": {"by_arg": {"*": 0}},
            "nvmlDeviceGetRemappedRows": [0, 0, 0, 0],
            "nvmlDeviceGetPowerManagementLimit": 700000,
            "nvmlDeviceGetPowerManagementDefaultLimit": 700000,
            "nvmlDeviceGetEnforcedPowerLimit": 700000,
            "nvmlDeviceGetPowerManagementLimitConstraints": [200000, 700000],
            "nvmlDeviceGetApplicationsClock": {"by_arg": {"0": 1980, "1": 1980, "2": 2619}},
            "nvmlDeviceGetDefaultApplicationsClock": {"by_arg": {"0": 1980, "1": 1980, "2": 2619}},
            "nvmlDeviceGetMaxClockInfo": {"by_arg": {"0": 1980, "1": 1980, "2": 2619, "3": 1545}},
            "nvmlDeviceGetMaxPcieLinkGeneration": 5,
            "nvmlDeviceGetMaxPcieLinkWidth": 16,
            "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5,
            "nvmlDeviceGetSupportedClocksEventReasons": 511,
            "nvmlDeviceGetVirtualizationMode": 0,
            "nvmlDeviceGetNvLinkVersion": {"by_arg": {"*": 4}},
            "nvmlDeviceGetNvLinkRemoteDeviceType": {"by_arg": {"*": 2}},
            "nvmlDeviceGetNvLinkCapability": {"by_arg": {"*": 1}},
            "nvmlDeviceGetGpuFabricInfoV": {
                "state": 3,
                "status": 0,
                "cliqueId": 0,
                "clusterUuid": [0] * 16,
                "healthMask": 0,
            },
            "nvmlDeviceGetClockInfo": {"by_arg": {"0": 345, "1": 345, "2": 2619, "3": 765}},
            "nvmlDeviceGetTemperatureV": {"by_arg": {"0": 31}},
            "nvmlDeviceGetTemperature": {"by_arg": {"0": 31}},
            "nvmlDeviceGetPowerUsage": 69800,
            "nvmlDeviceGetPerformanceState": 0,
            "nvmlDeviceGetCurrentClocksEventReasons": 1,
            "nvmlDeviceGetCurrPcieLinkGeneration": 5,
            "nvmlDeviceGetCurrPcieLinkWidth": 16,
            "nvmlDeviceGetComputeRunningProcesses": [],
        },
        "devices": devices,
        "pairs": {
            "nvmlDeviceGetP2PStatus": {"*": 0},
            "nvmlDeviceGetTopologyCommonAncestor": {"*": 50},
        },
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hoststate.nvml_replay", description="write a synthetic replay")
    parser.add_argument("kind", choices=["hgx"])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--link-down", metavar="GPU:LINK")
    parser.add_argument("--lost", type=int, metavar="GPU")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    link_down = tuple(int(x) for x in args.link_down.split(":")) if args.link_down else None
    data = synthetic_hgx(args.gpus, link_down=link_down, lost=args.lost)  # type: ignore[arg-type]
    from hoststate.output import write_output

    write_output(args.output, json.dumps(data, indent=1, sort_keys=False) + "\n", force=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
