"""NVML's own constants (nvml.h), named once for every reader: the gpu collector, ``check`` and the watch.

Data only, importing nothing: reading a snapshot (``check FILE``) must not load a collector to name a bit; and
the one way the live ``pynvml`` module is imported, for the collector, the child collecting ahead and the watch.
"""

from __future__ import annotations

#: Files whose presence says an NVIDIA driver is loaded (a WSL host has /dev/dxg instead of /dev/nvidiactl).
DRIVER_MARKERS = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")
#: The library pynvml loads on Linux (nvidia-ml-py's _LoadNvmlLibrary); the child collecting ahead starts NVML
#: through it before pynvml is imported (hoststate.ahead.start_nvml).
LIBRARY = "libnvidia-ml.so.1"
#: The environment variable naming recorded NVML output to replay instead of the live library (hoststate.nvml_replay).
NVML_REPLAY_ENV = "HOSTSTATE_NVML_REPLAY"


def import_pynvml() -> object:
    """The real ``pynvml`` module of nvidia-ml-py, with the deprecated ``pynvml`` package's FutureWarning silenced
    (its import hook warns on every ``import pynvml``). Here, where nothing else is imported, so that the child
    collecting the GPUs ahead (hoststate.ahead) does not import the replay's JSON reader to get it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        import pynvml
    return pynvml


#: nvmlClocksEventReason* bits, named as nvidia-smi -q -x names them (clocks_event_reason_<name>).
EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
)
#: The reasons that are settings, not events: clocks held by applications clocks or a lock (nvml.h aliases
#: nvmlClocksThrottleReasonUserDefinedClocks to the applications bit) or by display clocks.
SETTING_REASONS = ("applications_clocks_setting", "display_clocks_setting")
#: The reasons that are hardware holding the clocks down: nvml.h documents HW slowdown, HW thermal and HW power-brake
#: slowdown as "reducing the core clocks by a factor of 2 or more" (too hot, the power supply's brake, power draw over
#: Fast Trigger protection), SW thermal slowdown as clocks kept under the maximum operating temperature. Neither idle
#: (gpu_idle) nor a GPU at its power limit under load (sw_power_cap) is one of them.
HARDWARE_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
#: The reasons a watched run samples: those that hold clocks down while it runs (the two settings are not events).
SAMPLED_REASONS = tuple(r for r in EVENT_REASONS if r[1] not in SETTING_REASONS)
