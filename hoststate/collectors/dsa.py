"""Intel DSA/IAA (idxd driver): devices, work queues, groups and engines from /sys/bus/dsa.

Everything is read through the root prefix, attribute by attribute, keyed exactly as the kernel
names it: the WQ configuration that moved the seed sweep lives in these files, and nothing else on
the host records it (reference/dsa-idxd.md).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import stat
from typing import Any

from hoststate.collectors import Context, Section
from hoststate.coverage import source
from hoststate.io import Reader

# ---- type rules: one table each; an attribute in none of them is an int when it reads as one -----

#: Printed with %#x / %#llx: kept as the kernel's string so 0x100 stays 0x100 (and cmd_status 0 stays "0").
HEX_ATTRS = frozenset({"version", "gen_cap", "cmd_status", "iaa_cap", "evl_cap"})
#: Capability and error bitmaps: comma-separated 32-bit words (>= 6.3) or four %#llx words (older).
BITMAP_ATTRS = frozenset({"op_cap", "op_config", "errors"})
#: Space-separated lists; 0 bytes when empty (drivers/dma/idxd/sysfs.c group_*_show).
LIST_ATTRS = frozenset({"engines", "work_queues"})
#: Words, never numbers even when they look like one (a WQ may be named "1").
STRING_ATTRS = frozenset({"state", "mode", "type", "name", "driver_name", "sync_mode"})
#: Deprecated aliases of the read-buffer attributes: reading one logs a kernel warning, so never.
DEPRECATED_ATTRS = frozenset({"max_tokens", "token_limit", "tokens_allowed", "tokens_reserved", "use_token_limit"})
#: Reads the kernel refuses by design on healthy hosts (reference/dsa-idxd.md): cdev_minor without a char
#: device, occupancy without hardware support, enqcmds_retries on dedicated WQs. They are still recorded under
#: `unreadable`, but alone they do not make the collector `partial`, or every real host would be.
EXPECTED_REFUSALS = frozenset({("cdev_minor", "ENXIO"), ("occupancy", "EOPNOTSUPP"), ("enqcmds_retries", "EOPNOTSUPP")})
#: Files in a device directory that are not settings.
SKIP_FILES = frozenset({"uevent", "modalias"})
#: Attributes of the iaa_crypto driver (drivers/crypto/intel/iaa/iaa_crypto_main.c).
CRYPTO_DRIVER_ATTRS = ("sync_mode", "verify_compress")

#: PCI device ids of DSA and IAA functions (vendor 8086): SPR/EMR, then newer platforms.
PCI_IDS: dict[int, str] = {0x0B25: "dsa", 0x0CFE: "iax", 0x11FB: "dsa", 0x1212: "dsa", 0x1216: "iax", 0xB02D: "iax"}
INTEL = 0x8086

_DEVICE = re.compile(r"^(dsa|iax)\d+$")
_CHILD = re.compile(r"^(wq|group|engine)\d+\.\d+$")
_INT = re.compile(r"^-?\d+$")
_CHILD_TABLE = {"wq": "wqs", "group": "groups", "engine": "engines"}


_DEV = r"sys/bus/(?:dsa|iax)/devices/(?P<d>[^/]+)"


def _child_sources(prefix: str, table: str) -> tuple:
    """A WQ/group/engine directory, its driver link and its attributes (the refusals the kernel makes by design
    on healthy hosts are observed absences)."""
    child = rf"{_DEV}/(?P<c>{prefix}[^/]*)"
    return (
        source(child, f"devices.{{d}}.{table}.{{c}}.**"),
        source(rf"{child}/driver", f"devices.{{d}}.{table}.{{c}}.driver", absent=("ENOENT",)),  # unbound
        source(rf"{child}/(?P<a>state|type)", f"devices.{{d}}.{table}.{{c}}.{{a}}",
               f"devices.{{d}}.{table}.{{c}}.enabled_no_later_than"),  # read only for an enabled user WQ
        source(rf"{child}/(?P<a>cdev_minor)", f"devices.{{d}}.{table}.{{c}}.{{a}}", absent=("ENXIO",)),
        source(rf"{child}/(?P<a>occupancy|enqcmds_retries)", f"devices.{{d}}.{table}.{{c}}.{{a}}",
               absent=("EOPNOTSUPP",)),
        source(rf"{child}/(?P<a>[^/]+)", f"devices.{{d}}.{table}.{{c}}.{{a}}"),
    )


#: What this collector reads (root-relative paths) -> where it lands in the ``dsa`` table; first match names it.
SOURCES = (
    source(r"sys/bus/(?:dsa|iax)(?:/devices)?", "**", absent=("ENOENT",)),  # no idxd bus: an observed absence
    source(r"sys/module/idxd(?:/parameters)?", "module.**", absent=("ENOENT",)),  # built in, or no parameters
    source(r"sys/module/idxd/parameters/(?P<p>[^/]+)", "module.{p}"),
    source(r"sys/bus/(?:dsa|iax)/drivers", "drivers", "crypto.**", absent=("ENOENT",)),
    source(r"sys/bus/dsa/drivers/crypto/(?P<a>[^/]+)", "crypto.{a}"),
    *_child_sources("wq", "wqs"),
    *_child_sources("group", "groups"),
    *_child_sources("engine", "engines"),
    source(_DEV, "devices.{d}.**"),
    source(rf"{_DEV}/driver", "devices.{d}.driver", absent=("ENOENT",)),  # no driver link: unbound
    source(rf"{_DEV}/(?P<a>[^/]+)", "devices.{d}.{a}"),
    source(r"dev/(?:dsa|iax)", "cdevs", absent=("ENOENT",)),  # created with the first enabled user WQ
    source(r"dev/(?:dsa|iax)/(?P<c>wq[^/]+)", "devices.*.wqs.{c}.enabled_no_later_than"),
    source(r"sys/bus/pci/devices", "pci.**", absent=("ENOENT",)),  # a tree without PCI devices
    source(r"sys/bus/pci/devices/[^/]+/vendor", "pci.**"),  # a function not known to be DSA's or not
    source(r"sys/bus/pci/devices/(?P<b>[^/]+)", "pci.{b}.dev", absent=("ENOENT",)),  # listed for its dsaN child
    source(r"sys/bus/pci/devices/(?P<b>[^/]+)/driver", "pci.{b}.driver", absent=("ENOENT",)),  # unbound
    source(r"sys/bus/pci/devices/(?P<b>[^/]+)/.*", "pci.{b}.**"),
)


def parse_attr(name: str, text: str) -> Any:
    """One sysfs attribute (trailing newline already stripped) as its snapshot type."""
    if name in LIST_ATTRS:
        return text.split()
    if name in HEX_ATTRS or name in BITMAP_ATTRS or name in STRING_ATTRS:
        return text
    if _INT.match(text):
        return int(text)
    return text


def parse_module_param(text: str) -> Any:
    """A module parameter: bool params print Y/N (kernel/params.c param_get_bool)."""
    if text in ("Y", "N"):
        return text == "Y"
    return int(text) if _INT.match(text) else text


def _scan(reader: Reader, rel: str) -> list[tuple[str, int]] | None:
    """Directory entries as (name, mode), links not followed; None with the reason recorded under ``rel``."""
    return reader.scan(rel)


def _driver(reader: Reader, rel: str) -> str:
    """The bound driver's name, "" when unbound (no ``driver`` link is the kernel's way to say so)."""
    target = reader.readlink(f"{rel}/driver", record=False)
    if target is None:
        if reader.lexists(f"{rel}/driver"):
            reader.readlink(f"{rel}/driver")  # present but unreadable: record why
        return ""
    return os.path.basename(target.rstrip("/"))


def read_attrs(reader: Reader, rel: str, entries: list[tuple[str, int]]) -> dict[str, Any]:
    """Every readable attribute file among ``entries``; failures go to ``unreadable``."""
    out: dict[str, Any] = {}
    for name, mode in entries:
        if name in SKIP_FILES or name in DEPRECATED_ATTRS:
            continue
        if stat.S_ISLNK(mode):
            # Links (driver, subsystem, device) are not settings; one that cannot be followed (a loop, a
            # dangling target, one leading outside the root) is recorded, never silently dropped.
            reader.stat(f"{rel}/{name}")
            continue
        if stat.S_ISDIR(mode):
            continue
        # A regular file, or something no sysfs attribute is (a FIFO, a socket): read() records the latter.
        text = reader.read(f"{rel}/{name}")
        if text is not None:
            out[name] = parse_attr(name, text)
    return out


def read_node(reader: Reader, rel: str) -> tuple[dict[str, Any], list[str]]:
    """A device/WQ/group/engine directory: its attributes (plus ``driver``) and child directory names."""
    entries = _scan(reader, rel)
    if entries is None:
        return {}, []
    data = read_attrs(reader, rel, entries)
    children = []
    for name, mode in entries:
        if not _CHILD.match(name):
            continue
        if stat.S_ISDIR(mode):
            children.append(name)
        elif stat.S_ISLNK(mode):
            # a symlink loop (ELOOP), a dangling link or one leading outside the root in place of a WQ/group
            target = reader.stat(f"{rel}/{name}")
            if target is not None and not stat.S_ISDIR(target.st_mode):
                reader.note(f"{rel}/{name}", "not a directory")
        else:
            reader.note(f"{rel}/{name}", "not a directory")
    return data, children


def enabled_no_later_than(reader: Reader, devnode: str) -> dt.datetime | None:
    """Upper bound on when a user WQ was enabled: the mtime of its /dev node, created at enable.

    Rounded up to the second so it stays an upper bound. Sysfs attribute mtimes are never used:
    kernfs stamps them when the inode is first instantiated, not when the WQ is written.
    """
    st = reader.stat(devnode)
    if st is None:
        return None
    return dt.datetime.fromtimestamp(math.ceil(st.st_mtime), tz=dt.timezone.utc)


def read_device(reader: Reader, bus: str, name: str) -> dict[str, Any]:
    rel = f"sys/bus/{bus}/devices/{name}"
    data, children = read_node(reader, rel)
    data["driver"] = _driver(reader, rel)
    data["bus"] = bus
    tables: dict[str, dict[str, Any]] = {"wqs": {}, "groups": {}, "engines": {}}
    for child in children:
        crel = f"{rel}/{child}"
        cdata, _ = read_node(reader, crel)
        kind = child.split(".")[0].rstrip("0123456789")
        if kind == "wq":
            cdata["driver"] = _driver(reader, crel)
            if cdata.get("state") == "enabled" and cdata.get("type") == "user":
                when = enabled_no_later_than(reader, f"dev/{name.rstrip('0123456789')}/{child}")
                if when is not None:
                    cdata["enabled_no_later_than"] = when
        tables[_CHILD_TABLE[kind]][child] = cdata
    data.update(tables)
    return data


def pci_functions_sysfs(reader: Reader, ids: dict[int, str] = PCI_IDS, vendor: int = INTEL) -> dict[str, dict]:
    """DSA/IAA PCI functions from /sys/bus/pci/devices (the fallback when libudev is missing)."""
    out: dict[str, dict] = {}
    names = reader.listdir("sys/bus/pci/devices", record=False) or []
    for bdf in names:
        rel = f"sys/bus/pci/devices/{bdf}"
        ven = reader.read(f"{rel}/vendor")  # listed, so it should be there: any failure is recorded
        if ven is None or _hex(ven) != vendor:
            continue
        dev = reader.read(f"{rel}/device")
        if dev is None or _hex(dev) not in ids:
            continue
        out[bdf] = {"vendor": f"0x{vendor:04x}", "device": f"0x{_hex(dev):04x}", "driver": _driver(reader, rel)}
    return out


def pci_functions_udev(ids: dict[int, str] = PCI_IDS, vendor: int = INTEL) -> dict[str, dict]:
    """The same through pyudev (libudev); raises ImportError/OSError when libudev is unusable."""
    import pyudev

    context = pyudev.Context()
    enum = context.list_devices(subsystem="pci")
    for dev_id in ids:
        enum = enum.match_property("PCI_ID", f"{vendor:04X}:{dev_id:04X}")
    out: dict[str, dict] = {}
    for device in enum:
        pci_id = device.properties.get("PCI_ID", "")
        ven, _, did = pci_id.partition(":")
        if _hex(ven) != vendor or _hex(did) not in ids:
            continue
        out[device.sys_name] = {"vendor": f"0x{vendor:04x}", "device": f"0x{_hex(did):04x}",
                                "driver": device.driver or ""}
    return out


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def pci_functions(ctx: Context, reader: Reader) -> dict[str, dict]:
    """pyudev on the live host; the sysfs walk under a root prefix or without libudev."""
    found: dict[str, dict] | None = None
    if ctx.live:
        try:
            found = pci_functions_udev()
        except Exception:  # ImportError, or libudev.so missing (pyudev raises ImportError/OSError)
            found = None
    if found is None:
        found = pci_functions_sysfs(reader)
    for bdf, info in found.items():
        names = reader.listdir(f"sys/bus/pci/devices/{bdf}", record=False) or []
        devs = [n for n in names if _DEVICE.match(n)]
        if devs:
            info["dev"] = devs[0]
    return found


def char_devices(reader: Reader) -> list[str]:
    """Nodes under /dev/dsa and /dev/iax, as "dsa/wq0.0" (present only while a user WQ is enabled)."""
    out = []
    for kind in ("dsa", "iax"):
        for name in reader.listdir(f"dev/{kind}", record=False) or []:
            out.append(f"{kind}/{name}")
    return out


def collect(ctx: Context) -> Section:
    section = Section()
    reader = Reader(ctx.root, section.unreadable)
    # Kernels ~5.11-5.14 put IAA on a bus of its own.
    buses = [b for b in ("dsa", "iax") if reader.isdir(f"sys/bus/{b}/devices")]
    if not buses:
        section.status = "absent"
        section.reason = "no /sys/bus/dsa: idxd driver not loaded or no DSA/IAA device"
        return section
    data: dict[str, Any] = {}
    params = reader.listdir("sys/module/idxd/parameters", record=reader.isdir("sys/module/idxd")) or []
    data["module"] = {}
    for param in params:
        text = reader.read(f"sys/module/idxd/parameters/{param}")
        if text is not None:
            data["module"][param] = parse_module_param(text)
    drivers: list[str] = []
    for bus in buses:
        drivers += reader.listdir(f"sys/bus/{bus}/drivers", record=False) or []
    data["drivers"] = sorted(set(drivers))
    if "crypto" in drivers:
        crypto = {}
        for attr in CRYPTO_DRIVER_ATTRS:
            rel = f"sys/bus/dsa/drivers/crypto/{attr}"
            if reader.exists(rel):
                text = reader.read(rel)
                if text is not None:
                    crypto[attr] = parse_attr(attr, text)
        data["crypto"] = crypto
    devices: dict[str, Any] = {}
    for bus in buses:
        for name in reader.listdir(f"sys/bus/{bus}/devices") or []:
            # dsa!wqN.M (char devices) and fileK (open fds, >= 6.4) are not devices.
            if _DEVICE.match(name):
                devices[name] = read_device(reader, bus, name)
    data["devices"] = devices
    data["pci"] = pci_functions(ctx, reader)
    data["cdevs"] = char_devices(reader)
    section.data = data
    if not devices:
        section.notes.append("DSA bus present, no DSA/IAA device")
    section.settle()
    if section.status == "partial" and all(
        (path.rsplit("/", 1)[-1], reason) in EXPECTED_REFUSALS for path, reason in section.unreadable.items()
    ):
        section.status = "ok"
    return section
