"""GPUs compare by position, not by identity: the one place that re-keys a snapshot's GPU tables for comparing.

A snapshot keys each GPU by its UUID (``gpu.devices."GPU-<uuid>"``, ``gpu.fabric."GPU-<uuid>"``) and MIG devices by
their MIG UUID, as NVML names them. UUIDs and serials are the identity of a board, so two identical nodes share
none of them; compared by key, every GPU would be "removed" on one side and "added" on the other. ``diff``,
``digest`` and ``fleet`` therefore compare a canonical form in which:

- a GPU is keyed by its PCI bus id (``gpu.devices."00000000:18:00.0"``) when every GPU of both snapshots has a
  distinct one and the two sets of bus ids are equal; otherwise by NVML's index (``gpu.devices.GPU3``), the
  order ``nvidia-smi`` and ``gpu.topology`` use. The digest, which sees one snapshot, keys by bus id whenever every
  GPU has a distinct one, so equal digests imply equal bus-id sets, the case ``diff`` also keys by bus id;
- a MIG device is keyed by its slot (``mig_devices.slot0``), its UUID kept as the leaf ``uuid``;
- ``gpu.topology`` and ``gpu.p2p`` (keyed ``GPU<index>``) and ``collectors.gpu.unreadable`` entries
  (``<uuid>/<field>``, ``topology/GPUi/GPUj``, ``devices/<index>``) use the same keys, so unreadable values still
  map to their findings.

The UUID and serial stay as leaves (``gpu.devices.<position>.uuid``, rated info), so a swapped board is visible
without invalidating anything. Snapshots on disk are never changed. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hoststate.paths import format_path, split_path

BUS = "bus"
INDEX = "index"


def _devices(snap: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]] | None:
    gpu = snap.get("gpu")
    devices = gpu.get("devices") if isinstance(gpu, Mapping) else None
    if not isinstance(devices, Mapping) or not all(isinstance(d, Mapping) for d in devices.values()):
        return None
    return devices


def _distinct(values: list[Any], kind: type) -> bool:
    return all(type(v) is kind for v in values) and len(set(values)) == len(values)


def bus_ids(snap: Mapping[str, Any]) -> frozenset[str] | None:
    """The GPUs' PCI bus ids when every GPU has a distinct one (None otherwise, and for no GPU at all)."""
    devices = _devices(snap)
    if not devices:
        return None
    ids = [d.get("pci_bus_id") for d in devices.values()]
    return frozenset(ids) if _distinct(ids, str) and all(ids) else None


def mode_for(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """How two snapshots' GPUs are paired: by bus id when both have the same distinct bus ids, else by index."""
    ids = bus_ids(baseline)
    return BUS if ids is not None and ids == bus_ids(current) else INDEX


def own_mode(snap: Mapping[str, Any]) -> str:
    """How one snapshot's GPUs are keyed for its digest."""
    return BUS if bus_ids(snap) is not None else INDEX


def _keys(devices: Mapping[str, Mapping[str, Any]], mode: str) -> dict[str, str] | None:
    """UUID key -> position key, or None when the devices cannot be keyed that way (the layout is kept)."""
    if mode == BUS and all(isinstance(d.get("pci_bus_id"), str) for d in devices.values()):
        keys = {uid: d["pci_bus_id"] for uid, d in devices.items()}
    elif all(type(d.get("index")) is int for d in devices.values()):
        keys = {uid: f"GPU{d['index']}" for uid, d in devices.items()}
    else:
        return None
    return keys if len(set(keys.values())) == len(keys) else None


def _index_names(devices: Mapping[str, Mapping[str, Any]], keys: Mapping[str, str]) -> dict[str, str]:
    """``GPU<index>`` (as topology, p2p and unreadable entries name GPUs) -> position key."""
    out = {}
    for uid, dev in devices.items():
        if type(dev.get("index")) is int:
            out[f"GPU{dev['index']}"] = keys[uid]
    return out if len(set(out.values())) == len(out) else {}


def _mig(dev: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The device with its MIG devices keyed by slot, and MIG UUID -> slot key."""
    migs = dev.get("mig_devices")
    if not isinstance(migs, Mapping) or not all(isinstance(m, Mapping) for m in migs.values()):
        return dict(dev), {}
    slots = [m.get("slot") for m in migs.values()]
    if not _distinct(slots, int):
        return dict(dev), {}
    names = {mid: f"slot{m['slot']}" for mid, m in migs.items()}
    out = dict(dev)
    out["mig_devices"] = {names[mid]: {**m, "uuid": mid} for mid, m in migs.items()}
    return out, names


def _rename(table: Any, names: Mapping[str, str]) -> Any:
    """A ``GPUi = { GPUj = ... }`` matrix with both levels renamed."""
    if not isinstance(table, Mapping):
        return table
    return {names.get(k, k): ({names.get(j, j): v for j, v in row.items()} if isinstance(row, Mapping) else row)
            for k, row in table.items()}


def _unreadable_key(key: str, keys: Mapping[str, str], migs: Mapping[str, str], index_names: Mapping[str, str],
                    mode: str) -> str:
    if "/" not in key:  # a snapshot path pattern (hoststate.coverage): rename the GPU keys in it
        try:
            path = list(split_path(key))
        except ValueError:
            return key
        if len(path) > 1 and path[0] in ("devices", "fabric") and path[1] in keys:
            path[1] = keys[path[1]]
            if len(path) > 3 and path[2] == "mig_devices" and path[3] in migs:
                path[3] = migs[path[3]]
        elif path[0] in ("topology", "p2p"):
            path = [index_names.get(p, p) for p in path]
        elif len(path) > 1 and path[0] == "devices" and path[1].isdigit() and mode == INDEX:
            path[1] = f"GPU{path[1]}"
        return format_path(tuple(path))
    parts = key.split("/")
    if parts[0] in keys:
        parts[0] = keys[parts[0]]
        if len(parts) > 2 and parts[1] == "mig_devices" and parts[2] in migs:
            parts[2] = migs[parts[2]]
    elif parts[0] in ("topology", "p2p"):
        parts = [index_names.get(p, p) for p in parts]
    elif parts[0] == "devices" and len(parts) > 1 and parts[1].isdigit() and mode == INDEX:
        parts[1] = f"GPU{parts[1]}"  # a GPU whose handle or UUID could not be read: its index is its position
    return "/".join(parts)


def by_position(snap: Mapping[str, Any], mode: str) -> Mapping[str, Any]:
    """``snap`` with its GPU tables keyed by position (``mode``: BUS or INDEX); ``snap`` itself when it has no
    GPU devices or they cannot be keyed that way. Never modifies ``snap``."""
    devices = _devices(snap)
    if not devices:
        return snap
    keys = _keys(devices, mode)
    if keys is None:
        return snap
    migs: dict[str, str] = {}
    new_devices = {}
    for uid, dev in devices.items():
        new_devices[keys[uid]], names = _mig(dev)
        migs.update(names)
    index_names = _index_names(devices, keys)
    gpu = dict(snap["gpu"])
    gpu["devices"] = new_devices
    if isinstance(gpu.get("fabric"), Mapping):
        gpu["fabric"] = {keys.get(k, k): v for k, v in gpu["fabric"].items()}
    if "topology" in gpu:
        gpu["topology"] = _rename(gpu["topology"], index_names)
    if isinstance(gpu.get("p2p"), Mapping):
        gpu["p2p"] = {cap: _rename(m, index_names) for cap, m in gpu["p2p"].items()}
    out = dict(snap)
    out["gpu"] = gpu
    collectors = snap.get("collectors")
    entry = collectors.get("gpu") if isinstance(collectors, Mapping) else None
    if isinstance(entry, Mapping) and isinstance(entry.get("unreadable"), Mapping):
        entry = dict(entry)
        entry["unreadable"] = {_unreadable_key(str(k), keys, migs, index_names, mode): v
                               for k, v in entry["unreadable"].items()}
        out["collectors"] = {**collectors, "gpu": entry}
    return out


def align(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Both snapshots keyed by the same kind of position (see mode_for), ready to compare key by key."""
    mode = mode_for(baseline, current)
    return by_position(baseline, mode), by_position(current, mode)


def canonical(snap: Mapping[str, Any]) -> Mapping[str, Any]:
    """One snapshot keyed as its digest sees it (see own_mode)."""
    return by_position(snap, own_mode(snap))
