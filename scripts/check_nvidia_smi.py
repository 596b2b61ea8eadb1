"""Cross-check a hoststate snapshot's [gpu] table against ``nvidia-smi -q -x`` of the same host.

    python scripts/check_nvidia_smi.py SNAPSHOT.toml SMI.xml [TOPO.txt]   # exit 0 all equal, 1 a mismatch

nvidia-smi is an independent reader of the same driver: equal values mean the collector asks
NVML the right questions and converts units right. Compared per GPU (matched by PCI bus id):
name, UUID, bus id, driver and CUDA versions, VBIOS, InfoROM, serial, board part, memory total,
persistence, compute mode, ECC and MIG current/pending, the five power limits, application,
default application and max clocks, max PCIe generation and width, virtualization mode.
With TOPO.txt (``nvidia-smi topo -m``), also CPU and NUMA affinity and the GPU x GPU matrix.
Volatile readings are not compared: the two tools read them at different moments.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MIB = 1 << 20


def _text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if text in ("N/A", "Not Found", "[N/A]", "") else text


def _num(text: str | None) -> int | None:
    return None if text is None else int(text.split()[0].rstrip("x"))


def _enabled(text: str | None) -> bool | None:
    return None if text is None else text == "Enabled"


def _watts(text: str | None) -> str | None:
    return None if text is None else f"{float(text.split()[0]):.2f}"


def _mw(value: Any) -> str | None:
    return None if value is None else f"{value / 1000:.2f}"


def _mib(value: Any) -> int | None:
    return None if value is None else value // MIB


_COMPUTE = {"default": "Default", "exclusive_process": "Exclusive_Process", "prohibited": "Prohibited",
            "exclusive_thread": "Exclusive_Thread"}  # fmt: skip
_VIRT = {"none": "None", "passthrough": "Pass-Through", "vgpu": "VGPU", "host_vgpu": "Host VGPU",
         "host_vsga": "Host VSGA"}  # fmt: skip

# (label, snapshot key in the device table, nvidia-smi path, smi converter, snapshot converter)
DEVICE_FIELDS: tuple[tuple[str, str, str, Any, Any], ...] = (
    ("name", "name", "product_name", None, None),
    ("uuid", "uuid", "uuid", None, None),
    ("pci_bus_id", "pci_bus_id", "pci/pci_bus_id", str.upper, None),
    ("serial", "serial", "serial", None, None),
    ("board_part_number", "board_part_number", "board_part_number", None, None),
    ("vbios_version", "vbios_version", "vbios_version", None, None),
    ("inforom_image_version", "inforom_image_version", "inforom_version/img_version", None, None),
    ("gsp_firmware_version", "gsp_firmware_version", "gsp_firmware_version", None, None),
    ("memory_total (MiB)", "memory_total_bytes", "fb_memory_usage/total", _num, _mib),
    ("persistence_mode", "persistence_mode", "persistence_mode", _enabled, None),
    ("compute_mode", "compute_mode", "compute_mode", None, lambda v: _COMPUTE.get(v, v)),
    ("ecc_mode_current", "ecc_mode_current", "ecc_mode/current_ecc", _enabled, None),
    ("ecc_mode_pending", "ecc_mode_pending", "ecc_mode/pending_ecc", _enabled, None),
    ("mig_mode_current", "mig_mode_current", "mig_mode/current_mig", _enabled, None),
    ("mig_mode_pending", "mig_mode_pending", "mig_mode/pending_mig", _enabled, None),
    ("power_limit (W, requested)", "power_limit_mw", "gpu_power_readings/requested_power_limit", _watts, _mw),
    ("power_enforced_limit (W, current)", "power_enforced_limit_mw", "gpu_power_readings/current_power_limit",
     _watts, _mw),
    ("power_default_limit (W)", "power_default_limit_mw", "gpu_power_readings/default_power_limit", _watts, _mw),
    ("power_min_limit (W)", "power_min_limit_mw", "gpu_power_readings/min_power_limit", _watts, _mw),
    ("power_max_limit (W)", "power_max_limit_mw", "gpu_power_readings/max_power_limit", _watts, _mw),
    ("clocks_applications_graphics_mhz", "clocks_applications_graphics_mhz", "applications_clocks/graphics_clock",
     _num, None),
    ("clocks_applications_mem_mhz", "clocks_applications_mem_mhz", "applications_clocks/mem_clock", _num, None),
    ("clocks_default_applications_graphics_mhz", "clocks_default_applications_graphics_mhz",
     "default_applications_clocks/graphics_clock", _num, None),
    ("clocks_default_applications_mem_mhz", "clocks_default_applications_mem_mhz",
     "default_applications_clocks/mem_clock", _num, None),
    ("clocks_max_graphics_mhz", "clocks_max_graphics_mhz", "max_clocks/graphics_clock", _num, None),
    ("clocks_max_sm_mhz", "clocks_max_sm_mhz", "max_clocks/sm_clock", _num, None),
    ("clocks_max_mem_mhz", "clocks_max_mem_mhz", "max_clocks/mem_clock", _num, None),
    ("clocks_max_video_mhz", "clocks_max_video_mhz", "max_clocks/video_clock", _num, None),
    ("pcie_max_link_gen", "pcie_max_link_gen", "pci/pci_gpu_link_info/pcie_gen/max_link_gen", _num, None),
    ("pcie_gpu_max_link_gen", "pcie_gpu_max_link_gen", "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",
     _num, None),
    ("pcie_max_link_width", "pcie_max_link_width", "pci/pci_gpu_link_info/link_widths/max_link_width", _num, None),
    ("virtualization_mode", "virtualization_mode", "gpu_virtualization_mode/virtualization_mode", None,
     lambda v: _VIRT.get(v, v)),
)  # fmt: skip


def compare(snapshot: dict[str, Any], smi_xml: str) -> list[tuple[str, str, Any, Any, bool]]:
    """Rows ``(scope, field, ours, nvidia-smi's, equal)``; a field both sides lack (N/A in
    nvidia-smi, unreadable in the snapshot) is equal as ``None``."""
    root = ET.fromstring(smi_xml)
    gpu_table = snapshot.get("gpu", {})
    rows: list[tuple[str, str, Any, Any, bool]] = []

    def add(scope: str, field: str, ours: Any, theirs: Any) -> None:
        rows.append((scope, field, ours, theirs, ours == theirs))

    add("system", "driver_version", gpu_table.get("driver_version"), _text(root, "driver_version"))
    add("system", "cuda_driver_version", gpu_table.get("cuda_driver_version"), _text(root, "cuda_version"))
    add("system", "count", gpu_table.get("count"), _num(_text(root, "attached_gpus")))
    by_bus = {d.get("pci_bus_id", "").upper(): d for d in gpu_table.get("devices", {}).values()}
    for gpu in root.findall("gpu"):
        bus = (gpu.get("id") or "").upper()
        dev = by_bus.get(bus)
        if dev is None:
            add(bus, "present in snapshot", False, True)
            continue
        for label, key, path, smi_conv, our_conv in DEVICE_FIELDS:
            theirs = _text(gpu, path)
            if theirs is not None and smi_conv is not None:
                theirs = smi_conv(theirs)
            ours = dev.get(key)
            if ours is not None and our_conv is not None:
                ours = our_conv(ours)
            add(bus, label, ours, theirs)
    return rows


def parse_topo(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """``nvidia-smi topo -m`` as (header columns, {"GPU0": [cells]}); the header's ANSI underline
    escapes are dropped."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        clean = re.sub(r"\x1b\[[0-9;]*m", "", line)
        cells = [c.strip() for c in clean.split("\t")]
        if not header and "CPU Affinity" in cells:
            header = cells
        elif header and cells and re.fullmatch(r"GPU\d+", cells[0]):
            rows[cells[0]] = cells
    return header, rows


def compare_topo(snapshot: dict[str, Any], topo_text: str) -> list[tuple[str, str, Any, Any, bool]]:
    header, rows = parse_topo(topo_text)
    gpu_table = snapshot.get("gpu", {})
    by_index = {f"GPU{d.get('index')}": d for d in gpu_table.get("devices", {}).values()}
    out: list[tuple[str, str, Any, Any, bool]] = []
    for name, cells in rows.items():
        dev = by_index.get(name, {})
        cell = dict(zip(header, cells, strict=False))
        for label, key in (("cpu_affinity", "CPU Affinity"), ("memory_affinity", "NUMA Affinity")):
            out.append((name, label, dev.get(label), cell.get(key), dev.get(label) == cell.get(key)))
        for peer in rows:
            if peer != name and peer in cell:
                ours = gpu_table.get("topology", {}).get(name, {}).get(peer)
                out.append((name, f"topology {peer}", ours, cell[peer], ours == cell[peer]))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(args[0], "rb") as fh:
        snapshot = tomllib.load(fh)
    with open(args[1], encoding="utf-8") as fh:
        rows = compare(snapshot, fh.read())
    if len(args) == 3:
        with open(args[2], encoding="utf-8") as fh:
            rows += compare_topo(snapshot, fh.read())
    bad = 0
    for scope, field, ours, theirs, ok in rows:
        bad += not ok
        print(f"{'OK  ' if ok else 'DIFF'} {scope:17} {field:42} hoststate={ours!r:28} nvidia-smi={theirs!r}")
    print(f"{len(rows) - bad}/{len(rows)} equal" + ("" if not bad else f", {bad} differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
