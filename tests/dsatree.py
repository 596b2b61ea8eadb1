"""Build DSA/IAA sysfs trees laid out as the idxd driver lays them, for fixtures, tests and benchmarks.

Device directories live under ``sys/devices/pci<domain>:<bus>/<bdf>/<dsaN>`` with ``wqN.M``,
``groupN.M`` and ``engineN.M`` children; ``sys/bus/dsa/devices`` and ``sys/bus/dsa/drivers/<drv>``
hold relative symlinks to them, as the kernel's driver core creates them (drivers/base/bus.c), so
the same tree can be copied over a tmpfs ``/sys`` and read by the real ``accel-config``.

``python -m tests.dsatree`` rewrites the DSA parts of the committed trees in fixtures/hosts/ (and
only those parts: other collectors' files in the same trees are left alone).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field

#: The fixed mtime (UTC 2026-06-08 10:15:00) tests give /dev nodes: git stores no mtimes.
DEV_NODE_MTIME = 1780913700

#: Sapphire Rapids DSA 1.0 op_cap, as kernels >= 6.3 print it (8 words, most significant first).
OP_CAP_DSA = "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00fb03ff"
OP_CAP_IAA = "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00070000"
ZERO_BITMAP = ",".join(["00000000"] * 8)


@dataclass
class WQ:
    """One work queue; the defaults are what the kernel shows for a disabled WQ (reset on disable)."""

    index: int
    state: str = "disabled"
    mode: str = "shared"
    type: str = "none"
    size: int = 0
    priority: int = 0
    threshold: int = 0
    group_id: int = -1
    name: str = ""
    driver_name: str = ""
    clients: int = 0
    block_on_fault: int = 0
    max_transfer_size: int = 2097152
    max_batch_size: int = 32
    cdev_minor: int | None = None


@dataclass
class Device:
    name: str  # dsa0, iax1
    bdf: str  # 0000:6a:01.0
    numa_node: int = 0
    state: str = "disabled"
    wqs: list[WQ] = field(default_factory=list)
    #: engine index -> group id (-1 unassigned)
    engines: dict[int, int] = field(default_factory=dict)
    groups: int = 4
    cdev_major: int = 236
    old: bool = False  # a ~5.12 kernel: compat driver, token names only, old formats
    #: Write cdev_minor for WQs without a char device too. The kernel fails that read with ENXIO, which
    #: a tmpfs cannot do: trees without this flag leave the file out, trees with it need the fault injected.
    enxio_files: bool = False

    @property
    def kind(self) -> str:
        return self.name.rstrip("0123456789")

    @property
    def num(self) -> int:
        return int(self.name[len(self.kind) :])


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _link(path: str, target_abs: str) -> None:
    """A symlink at ``path`` pointing relatively at ``target_abs`` (both inside the tree)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(os.path.relpath(target_abs, os.path.dirname(path)), path)


def device_attrs(dev: Device) -> dict[str, str]:
    """Device attributes as sysfs prints them (drivers/dma/idxd/sysfs.c)."""
    iaa = dev.kind == "iax"
    clients = sum(w.clients for w in dev.wqs)
    attrs = {
        "version": "0x100",
        "max_groups": str(dev.groups),
        "max_work_queues": str(len(dev.wqs)),
        "max_work_queues_size": "128",
        "max_engines": str(len(dev.engines)),
        "numa_node": str(dev.numa_node),
        "max_transfer_size": "2097152" if iaa else "2147483648",
        "gen_cap": "0x71f10901f0105" if iaa else "0x40915f0107",
        "configurable": "1",
        "pasid_enabled": "1",
        "state": dev.state,
        "clients": str(clients),
        "cdev_major": str(dev.cdev_major),
    }
    if dev.old:
        # ~5.12: op_cap/errors as four %#llx words, least significant first; no cmd_status.
        attrs["op_cap"] = ("0x70000" if iaa else "0xfb03ff") + " 0x0 0x0 0x0"
        attrs["errors"] = " ".join(["0x0000000000000000"] * 4)
        if not iaa:
            attrs.update(max_batch_size="1024", max_tokens="96", token_limit="0")
    else:
        attrs["op_cap"] = OP_CAP_IAA if iaa else OP_CAP_DSA
        attrs["errors"] = ZERO_BITMAP
        attrs["cmd_status"] = "0"
        if not iaa:
            # The deprecated aliases sit beside the new names; hoststate never reads them.
            attrs.update(max_batch_size="1024", max_read_buffers="96", read_buffer_limit="0",
                         max_tokens="96", token_limit="0")
    return attrs


def wq_attrs(dev: Device, wq: WQ) -> dict[str, str]:
    iaa = dev.kind == "iax"
    attrs = {
        "state": wq.state,
        "clients": str(wq.clients),
        "mode": wq.mode,
        "type": wq.type,
        "size": str(wq.size),
        "group_id": str(wq.group_id),
        "priority": str(wq.priority),
        "threshold": str(wq.threshold),
        "name": wq.name,
        "block_on_fault": str(wq.block_on_fault),
        "max_transfer_size": str(wq.max_transfer_size),
    }
    if wq.cdev_minor is not None:
        attrs["cdev_minor"] = str(wq.cdev_minor)
    elif dev.enxio_files:
        attrs["cdev_minor"] = ""
    if not iaa:
        attrs["max_batch_size"] = str(wq.max_batch_size)
    if not dev.old:
        attrs.update(
            driver_name=wq.driver_name,
            ats_disable="0",
            prs_disable="0",
            occupancy="0",
            enqcmds_retries="32",
            op_config=OP_CAP_IAA if iaa else OP_CAP_DSA,
        )
    return attrs


def group_attrs(dev: Device, gid: int) -> dict[str, str]:
    wqs = [f"wq{dev.num}.{w.index}" for w in dev.wqs if w.group_id == gid]
    engines = [f"engine{dev.num}.{e}" for e, g in sorted(dev.engines.items()) if g == gid]
    # Empty lists are 0 bytes with no newline (sysfs.c: the trailing space is replaced by "\n" only
    # when something was printed).
    attrs = {
        "work_queues": (" ".join(wqs) + "\n") if wqs else "",
        "engines": (" ".join(engines) + "\n") if engines else "",
        "traffic_class_a": "1",
        "traffic_class_b": "1",
    }
    if dev.kind == "dsa":
        if dev.old:
            attrs.update(tokens_reserved="0", tokens_allowed="96", use_token_limit="0")
        else:
            attrs.update(read_buffers_reserved="0", read_buffers_allowed="96", use_read_buffer_limit="0",
                         tokens_reserved="0", tokens_allowed="96", use_token_limit="0")
    return attrs


def _attrs(directory: str, attrs: dict[str, str]) -> None:
    os.makedirs(directory, exist_ok=True)
    for key, value in attrs.items():
        text = value if key in ("work_queues", "engines") else value + "\n"
        if value == "" and key == "cdev_minor":
            text = ""  # stands for a file whose read fails with ENXIO: tests inject that fault
        _write(os.path.join(directory, key), text)


def _driver_dir(sysdir: str, bus: str, driver: str) -> str:
    ddir = os.path.join(sysdir, "bus", bus, "drivers", driver)
    os.makedirs(ddir, exist_ok=True)
    for f in ("bind", "unbind", "uevent"):
        path = os.path.join(ddir, f)
        if not os.path.exists(path):
            _write(path, "")
    return ddir


def build(root: str, devices: list[Device], *, module: dict[str, str] | None = None,
          crypto: dict[str, str] | None = None, iax_bus: bool = False) -> None:
    """Lay ``devices`` out under ``root`` (a host root: ``root/sys``, ``root/dev``)."""
    sysdir = os.path.join(root, "sys")
    old = any(d.old for d in devices)
    os.makedirs(os.path.join(sysdir, "bus", "dsa", "devices"), exist_ok=True)
    drivers = ["dsa"] if old else ["idxd", "dmaengine", "user"] + (["crypto"] if crypto is not None else [])
    for drv in drivers:
        _driver_dir(sysdir, "dsa", drv)
    if crypto:
        for key, value in crypto.items():
            _write(os.path.join(sysdir, "bus", "dsa", "drivers", "crypto", key), value + "\n")
    for key, value in (module if module is not None else {"sva": "Y", "tc_override": "N"}).items():
        _write(os.path.join(sysdir, "module", "idxd", "parameters", key), value + "\n")
    for dev in devices:
        bus = "iax" if (iax_bus and dev.kind == "iax") else "dsa"
        if bus == "iax":
            _driver_dir(sysdir, "iax", "iax")
        dom, busno = dev.bdf.split(":")[:2]
        pci = os.path.join(sysdir, "devices", f"pci{dom}:{busno}", dev.bdf)
        _attrs(pci, {"vendor": "0x8086", "device": "0x0cfe" if dev.kind == "iax" else "0x0b25",
                     "class": "0x088000", "numa_node": str(dev.numa_node)})
        pci_id = "8086:0CFE" if dev.kind == "iax" else "8086:0B25"
        _write(os.path.join(pci, "uevent"), f"DRIVER=idxd\nPCI_CLASS=88000\nPCI_ID={pci_id}\n"
               f"PCI_SUBSYS_ID=8086:0000\nPCI_SLOT_NAME={dev.bdf}\n")
        _link(os.path.join(pci, "subsystem"), os.path.join(sysdir, "bus", "pci"))
        _link(os.path.join(sysdir, "bus", "pci", "devices", dev.bdf), pci)
        _driver_dir(sysdir, "pci", "idxd")
        _link(os.path.join(sysdir, "bus", "pci", "drivers", "idxd", dev.bdf), pci)
        _link(os.path.join(pci, "driver"), os.path.join(sysdir, "bus", "pci", "drivers", "idxd"))
        ddir = os.path.join(pci, dev.name)
        _attrs(ddir, device_attrs(dev))
        _write(os.path.join(ddir, "uevent"), f"DEVTYPE={dev.kind}\n")
        _link(os.path.join(ddir, "subsystem"), os.path.join(sysdir, "bus", bus))
        _link(os.path.join(sysdir, "bus", bus, "devices", dev.name), ddir)
        if dev.state == "enabled":
            drv = "dsa" if old else "idxd"
            drv = "iax" if bus == "iax" else drv
            _link(os.path.join(ddir, "driver"), os.path.join(sysdir, "bus", bus, "drivers", drv))
            _link(os.path.join(sysdir, "bus", bus, "drivers", drv, dev.name), ddir)
        for gid in range(dev.groups):
            gdir = os.path.join(ddir, f"group{dev.num}.{gid}")
            _attrs(gdir, group_attrs(dev, gid))
            _link(os.path.join(sysdir, "bus", bus, "devices", f"group{dev.num}.{gid}"), gdir)
        for eid, gid in sorted(dev.engines.items()):
            edir = os.path.join(ddir, f"engine{dev.num}.{eid}")
            _attrs(edir, {"group_id": str(gid)})
            _link(os.path.join(sysdir, "bus", bus, "devices", f"engine{dev.num}.{eid}"), edir)
        for wq in dev.wqs:
            wname = f"wq{dev.num}.{wq.index}"
            wdir = os.path.join(ddir, wname)
            _attrs(wdir, wq_attrs(dev, wq))
            _link(os.path.join(sysdir, "bus", bus, "devices", wname), wdir)
            if wq.state != "enabled":
                continue
            if old:
                drv = "iax" if bus == "iax" else "dsa"
            else:
                drv = {"user": "user", "kernel": "crypto" if dev.kind == "iax" else "dmaengine"}[wq.type]
            _link(os.path.join(wdir, "driver"), os.path.join(sysdir, "bus", bus, "drivers", drv))
            _link(os.path.join(sysdir, "bus", bus, "drivers", drv, wname), wdir)
            if wq.type == "user":
                cname = f"{dev.kind}!{wname}"
                cdir = os.path.join(wdir, cname)
                _attrs(cdir, {"dev": f"{dev.cdev_major}:{wq.cdev_minor}"})
                _write(os.path.join(cdir, "uevent"),
                       f"MAJOR={dev.cdev_major}\nMINOR={wq.cdev_minor}\nDEVNAME={dev.kind}/{wname}\n")
                if not old:
                    _link(os.path.join(sysdir, "bus", bus, "devices", cname), cdir)
                # git cannot hold a char device: an empty regular file stands in for the node.
                _write(os.path.join(root, "dev", dev.kind, wname), "")


# ---- the trees of fixtures/hosts ----------------------------------------------------------------

SPR = (("dsa0", "0000:6a:01.0", 0), ("iax1", "0000:6a:02.0", 0), ("dsa2", "0000:e7:01.0", 1),
       ("iax3", "0000:e7:02.0", 1))


def spr_devices(enabled: bool, *, enxio_files: bool = False) -> list[Device]:
    """Two-socket SPR/EMR: dsa0, iax1, dsa2, iax3; with ``enabled``, dsa0 and dsa2 each get 4 enabled
    shared user WQs (size 32, priority 10, threshold 32, one per group) and 4 disabled, clients 0."""
    devices = []
    minor = 0
    for name, bdf, node in SPR:
        dev = Device(name, bdf, numa_node=node, wqs=[WQ(i) for i in range(8)],
                     engines={e: -1 for e in range(4 if name.startswith("dsa") else 8)}, enxio_files=enxio_files)
        if enabled and name.startswith("dsa"):
            dev.state = "enabled"
            for i in range(4):
                dev.wqs[i] = WQ(i, state="enabled", mode="shared", type="user", size=32, priority=10,
                                threshold=32, group_id=i, name=f"app{i}", driver_name="user", cdev_minor=minor)
                dev.engines[i] = i
                minor += 1
        devices.append(dev)
    return devices


def iaa_devices() -> list[Device]:
    """iax1 and iax3 enabled for iaa_crypto: one dedicated kernel WQ each (driver ``crypto``)."""
    devices = []
    for name, bdf, node in SPR:
        dev = Device(name, bdf, numa_node=node, wqs=[WQ(i) for i in range(8)],
                     engines={e: -1 for e in range(4 if name.startswith("dsa") else 8)})
        if name.startswith("iax"):
            dev.state = "enabled"
            dev.wqs[0] = WQ(0, state="enabled", mode="dedicated", type="kernel", size=128, priority=10,
                            threshold=0, group_id=0, name="iaa_crypto", driver_name="crypto", clients=1)
            for e in range(8):
                dev.engines[e] = 0
        devices.append(dev)
    return devices


def old_kernel_devices() -> list[Device]:
    """A ~5.12 host: compat ``dsa`` driver, IAA on /sys/bus/iax, token names only, old formats."""
    dsa = Device("dsa0", "0000:6a:01.0", state="enabled", wqs=[WQ(i) for i in range(8)],
                 engines={e: -1 for e in range(4)}, old=True)
    dsa.wqs[0] = WQ(0, state="enabled", mode="dedicated", type="user", size=16, priority=10, group_id=0,
                    name="app0", cdev_minor=0)
    dsa.engines[0] = 0
    iax = Device("iax1", "0000:6a:02.0", wqs=[WQ(i) for i in range(8)], engines={e: -1 for e in range(8)},
                 old=True)
    return [dsa, iax]


def saved_config(devices: list[Device]) -> str:
    """What ``accel-config save-config`` writes for ``devices``: enabled devices and WQs only."""
    out = []
    for dev in devices:
        if dev.state != "enabled":
            continue
        groups = []
        for gid in range(dev.groups):
            g: dict = {"dev": f"group{dev.num}.{gid}"}
            if dev.kind == "dsa":
                g.update(read_buffers_reserved=0, use_read_buffer_limit=0, read_buffers_allowed=96)
            g.update(traffic_class_a=1, traffic_class_b=1)
            wqs = [w for w in dev.wqs if w.group_id == gid and w.state == "enabled"]
            if wqs:
                g["grouped_workqueues"] = [
                    {"dev": f"wq{dev.num}.{w.index}", "mode": w.mode, "size": w.size, "group_id": gid,
                     "priority": w.priority, "block_on_fault": w.block_on_fault,
                     "max_batch_size": w.max_batch_size, "max_transfer_size": w.max_transfer_size,
                     "type": w.type, "name": w.name, "driver_name": w.driver_name, "threshold": w.threshold,
                     "ats_disable": 0}
                    for w in wqs
                ]
            engines = [e for e, eg in sorted(dev.engines.items()) if eg == gid]
            if engines:
                g["grouped_engines"] = [{"dev": f"engine{dev.num}.{e}", "group_id": gid} for e in engines]
            groups.append(g)
        entry: dict = {"dev": dev.name}
        if dev.kind == "dsa":
            entry["read_buffer_limit"] = 0
        entry["groups"] = groups
        out.append(entry)
    return json.dumps(out, indent=2) + "\n"


def _owned(root: str) -> list[str]:
    """The DSA-owned parts of a host tree, removed before a rebuild (other collectors' files stay)."""
    owned = ["sys/bus/dsa", "sys/bus/iax", "sys/bus/pci", "sys/module/idxd", "dev/dsa", "dev/iax", "etc/accel-config",
             "faults.json"]
    devices = os.path.join(root, "sys", "devices")
    if os.path.isdir(devices):
        owned += [f"sys/devices/{d}" for d in os.listdir(devices) if d.startswith("pci")]
    return owned


#: Faults the dsa-unreadable tree stands for (path suffix -> errno name), stored beside it as faults.json:
#: what the kernel does on a real host and a tmpfs cannot reproduce.
UNREADABLE_FAULTS = {
    "dsa0/wq0.4/cdev_minor": "ENXIO",  # no char device: the WQ is disabled
    "dsa0/wq0.0/occupancy": "EOPNOTSUPP",  # no WQCAP.occupancy
    "dsa2/wq2.1/priority": "EACCES",
}

FIXTURES = {
    "seed-baseline": lambda: (spr_devices(False), {}, False),
    "seed-experiment": lambda: (spr_devices(True), {}, False),
    "seed-experiment-saved": lambda: (spr_devices(True), {"saved": True}, False),
    "iaa": lambda: (iaa_devices(), {"crypto": {"sync_mode": "sync", "verify_compress": "1"}}, False),
    "old-kernel": lambda: (old_kernel_devices(), {}, True),
    "dsa-unreadable": lambda: (spr_devices(True, enxio_files=True), {"faults": UNREADABLE_FAULTS}, False),
}


def write_fixture(hosts: str, name: str) -> str:
    root = os.path.join(hosts, name)
    os.makedirs(root, exist_ok=True)
    for rel in _owned(root):
        path = os.path.join(root, rel)
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
    devices, extra, iax_bus = FIXTURES[name]()
    build(root, devices, crypto=extra.get("crypto"), iax_bus=iax_bus)
    if extra.get("faults"):
        _write(os.path.join(root, "faults.json"), json.dumps(extra["faults"], indent=2) + "\n")
    if extra.get("saved"):
        _write(os.path.join(root, "etc/accel-config/accel-config.conf"), saved_config(devices))
    return root


def main(argv: list[str]) -> int:
    hosts = argv[0] if argv else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                              "fixtures", "hosts")
    for name in FIXTURES:
        print(write_fixture(hosts, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
