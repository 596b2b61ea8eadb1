"""The dsa collector on fixture trees laid out as the kernel lays them, read through the snapshot."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import shutil
from unittest import mock

import pytest

from hoststate import capture, io, snapshot
from hoststate.collectors import Context, dsa
from hoststate.coverage import failures
from hoststate.io import Reader, reason_of
from hoststate.paths import get, leaves, split_path
from tests import dsatree, faults
from tests.conftest import HOSTS, require

SEED_CONFIG = {"state": "enabled", "mode": "shared", "type": "user", "size": 32, "priority": 10, "threshold": 32,
               "clients": 0, "driver": "user", "driver_name": "user"}


def at(snap: dict, path: str):
    """The value at a design.md path, or a KeyError naming it."""
    sentinel = object()
    value = get(snap, split_path(path), sentinel)
    if value is sentinel:
        raise KeyError(path)
    return value


def copy_host(name: str, tmp_path) -> str:
    root = str(tmp_path / name)
    shutil.copytree(HOSTS / name, root, symlinks=True)
    return root


def snap_of(root: str) -> dict:
    """Collect dsa + accel_config and go through TOML and back, as a user's snapshot file would."""
    data = capture.collect(Context(root=root), names=("dsa", "accel_config"))
    return snapshot.loads(snapshot.to_toml(data))


# ---- pure parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("version", "0x100", "0x100"),
        ("cmd_status", "0", "0"),
        ("gen_cap", "0x40915f0107", "0x40915f0107"),
        ("op_cap", dsatree.OP_CAP_DSA, dsatree.OP_CAP_DSA),
        ("errors", "0x0000000000000000 0x0000000000000000", "0x0000000000000000 0x0000000000000000"),
        ("work_queues", "wq0.0 wq0.1", ["wq0.0", "wq0.1"]),
        ("engines", "", []),
        ("numa_node", "-1", -1),
        ("group_id", "-1", -1),
        ("max_transfer_size", "2147483648", 2147483648),
        ("name", "1", "1"),
        ("name", "", ""),
        ("state", "enabled", "enabled"),
        ("some_future_attr", "7", 7),
        ("some_future_attr", "fast", "fast"),
    ],
)
def test_parse_attr_types(name, text, value):
    assert dsa.parse_attr(name, text) == value
    assert type(dsa.parse_attr(name, text)) is type(value)


@pytest.mark.parametrize(("text", "value"), [("Y", True), ("N", False), ("3", 3), ("auto", "auto")])
def test_parse_module_param(text, value):
    assert dsa.parse_module_param(text) == value


# ---- fixtures at design.md's paths ------------------------------------------------------------------


def test_seed_baseline_all_wqs_disabled():
    snap = snap_of(str(HOSTS / "seed-baseline"))
    assert at(snap, "collectors.dsa.status") == "ok"
    assert sorted(at(snap, "dsa.devices")) == ["dsa0", "dsa2", "iax1", "iax3"]
    wqs = [(d, w) for d, dev in snap["dsa"]["devices"].items() for w in dev["wqs"]]
    assert len(wqs) == 32
    for d, w in wqs:
        wq = snap["dsa"]["devices"][d]["wqs"][w]
        assert (wq["state"], wq["type"], wq["driver"], wq["group_id"]) == ("disabled", "none", "", -1)
        assert "enabled_no_later_than" not in wq
    assert at(snap, "dsa.devices.dsa0.state") == "disabled"
    assert at(snap, "dsa.devices.dsa0.driver") == ""
    assert at(snap, "dsa.devices.dsa0.groups.\"group0.0\".work_queues") == []
    assert at(snap, "dsa.cdevs") == []
    assert at(snap, "dsa.module") == {"sva": True, "tc_override": False}


def test_seed_experiment_eight_enabled_shared_user_wqs():
    snap = snap_of(str(HOSTS / "seed-experiment"))
    assert at(snap, "collectors.dsa.status") == "ok"
    enabled = []
    for dev in ("dsa0", "dsa2"):
        n = dev[3:]
        assert at(snap, f"dsa.devices.{dev}.state") == "enabled"
        assert at(snap, f"dsa.devices.{dev}.driver") == "idxd"
        assert at(snap, f"dsa.devices.{dev}.max_work_queues_size") == 128
        assert at(snap, f"dsa.devices.{dev}.clients") == 0
        for i in range(8):
            wq = at(snap, f'dsa.devices.{dev}.wqs."wq{n}.{i}"')
            if i < 4:
                enabled.append(f"wq{n}.{i}")
                assert {k: wq[k] for k in SEED_CONFIG} == SEED_CONFIG
                assert wq["group_id"] == i
                assert at(snap, f'dsa.devices.{dev}.groups."group{n}.{i}".work_queues') == [f"wq{n}.{i}"]
                assert at(snap, f'dsa.devices.{dev}.groups."group{n}.{i}".engines') == [f"engine{n}.{i}"]
                assert at(snap, f'dsa.devices.{dev}.engines."engine{n}.{i}".group_id') == i
            else:
                assert (wq["state"], wq["size"], wq["priority"], wq["threshold"]) == ("disabled", 0, 0, 0)
    assert len(enabled) == 8
    assert at(snap, 'dsa.devices.dsa0.wqs."wq0.0".cdev_minor') == 0
    assert at(snap, 'dsa.devices.dsa2.wqs."wq2.3".cdev_minor') == 7
    assert at(snap, "dsa.devices.iax1.state") == "disabled"
    assert at(snap, "dsa.cdevs") == [f"dsa/{w}" for w in sorted(enabled)]
    assert at(snap, 'dsa.pci."0000:6a:01.0"') == {"vendor": "0x8086", "device": "0x0b25", "driver": "idxd",
                                                 "dev": "dsa0"}
    assert at(snap, 'dsa.pci."0000:e7:02.0".device') == "0x0cfe"


def test_values_keep_kernel_names_and_types():
    snap = snap_of(str(HOSTS / "seed-experiment"))
    dev = at(snap, "dsa.devices.dsa0")
    assert dev["version"] == "0x100" and dev["gen_cap"] == "0x40915f0107" and dev["cmd_status"] == "0"
    assert dev["op_cap"] == dsatree.OP_CAP_DSA
    assert isinstance(dev["max_transfer_size"], int) and dev["numa_node"] == 0
    assert dev["max_read_buffers"] == 96 and dev["read_buffer_limit"] == 0
    wq = dev["wqs"]["wq0.0"]
    assert wq["op_config"] == dsatree.OP_CAP_DSA and wq["occupancy"] == 0 and wq["enqcmds_retries"] == 32
    for path, value in leaves(snap["dsa"]):
        assert isinstance(value, str | int | list | dt.datetime), path
        if len(path) >= 2 and path[0] == "devices":
            assert re.match(r"^[a-z][a-z0-9_]*$", path[-1]) or path[-2] in ("wqs", "groups", "engines"), path


def test_every_attribute_of_a_wq_is_collected():
    """Whatever the kernel exposes (here, as the fixture lays it) is collected, deprecated aliases aside."""
    root = HOSTS / "seed-experiment"
    wq_dir = root / "sys/bus/dsa/devices/dsa0/wq0.0"
    files = {p.name for p in wq_dir.iterdir() if p.is_file() and not p.is_symlink()}
    data = dsa.collect(Context(root=str(root))).data
    assert files - {"uevent"} == set(data["devices"]["dsa0"]["wqs"]["wq0.0"]) - {"driver", "enabled_no_later_than"}
    dev_files = {p.name for p in (root / "sys/bus/dsa/devices/dsa0").iterdir() if p.is_file() and not p.is_symlink()}
    assert dev_files - {"uevent"} - dsa.DEPRECATED_ATTRS == set(data["devices"]["dsa0"]) - {
        "driver", "bus", "wqs", "groups", "engines"}


def test_iaa_with_iaa_crypto_kernel_wq():
    snap = snap_of(str(HOSTS / "iaa"))
    wq = at(snap, 'dsa.devices.iax1.wqs."wq1.0"')
    assert (wq["state"], wq["mode"], wq["type"], wq["driver"], wq["name"], wq["size"]) == (
        "enabled", "dedicated", "kernel", "crypto", "iaa_crypto", 128)
    assert "enabled_no_later_than" not in wq  # a kernel WQ has no char device
    assert "max_batch_size" not in wq
    iax = at(snap, "dsa.devices.iax1")
    assert iax["driver"] == "idxd" and iax["state"] == "enabled"
    for absent in ("max_batch_size", "max_read_buffers", "read_buffer_limit"):
        assert absent not in iax
    assert at(snap, 'dsa.devices.iax1.groups."group1.0".engines') == [f"engine1.{e}" for e in range(8)]
    assert "read_buffers_allowed" not in at(snap, 'dsa.devices.iax1.groups."group1.0"')
    assert at(snap, "dsa.drivers") == ["crypto", "dmaengine", "idxd", "user"]
    assert at(snap, "dsa.crypto") == {"sync_mode": "sync", "verify_compress": 1}
    assert at(snap, "dsa.cdevs") == []


def test_old_kernel_layout():
    snap = snap_of(str(HOSTS / "old-kernel"))
    assert at(snap, "collectors.dsa.status") == "ok"
    assert at(snap, "dsa.drivers") == ["dsa", "iax"]
    assert at(snap, "dsa.devices.dsa0.driver") == "dsa"  # the compat driver binds devices and WQs
    assert at(snap, 'dsa.devices.dsa0.wqs."wq0.0".driver') == "dsa"
    assert at(snap, 'dsa.devices.dsa0.wqs."wq0.0".state') == "enabled"
    assert at(snap, "dsa.devices.iax1.bus") == "iax"  # /sys/bus/iax, kernels ~5.11-5.14
    assert at(snap, "dsa.devices.dsa0.op_cap") == "0xfb03ff 0x0 0x0 0x0"
    assert at(snap, "dsa.devices.dsa0.errors") == " ".join(["0x0000000000000000"] * 4)
    dev = at(snap, "dsa.devices.dsa0")
    for absent in ("max_read_buffers", "read_buffer_limit", "max_tokens", "token_limit", "cmd_status"):
        assert absent not in dev
    group = at(snap, 'dsa.devices.dsa0.groups."group0.0"')
    assert group == {"engines": ["engine0.0"], "work_queues": ["wq0.0"], "traffic_class_a": 1, "traffic_class_b": 1}
    assert "driver_name" not in at(snap, 'dsa.devices.dsa0.wqs."wq0.0"')


def test_no_dsa_bus_is_absent(tmp_path):
    (tmp_path / "sys/bus/pci").mkdir(parents=True)
    sec = dsa.collect(Context(root=str(tmp_path)))
    assert sec.status == "absent"
    assert "idxd" in sec.reason
    assert sec.data == {} and sec.unreadable == {}


def test_char_device_entries_and_open_files_are_not_devices(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    bus = os.path.join(root, "sys/bus/dsa/devices")
    os.symlink("../../../devices/pci0000:6a/0000:6a:01.0/dsa0/wq0.0", os.path.join(bus, "file0"))
    assert os.path.lexists(os.path.join(bus, "dsa!wq0.0"))
    data = dsa.collect(Context(root=root)).data
    assert sorted(data["devices"]) == ["dsa0", "dsa2", "iax1", "iax3"]
    assert sorted(data["devices"]["dsa0"]["wqs"]) == [f"wq0.{i}" for i in range(8)]


# ---- unreadable attributes -----------------------------------------------------------------------------


def unreadable_faults() -> dict[str, int]:
    with open(HOSTS / "dsa-unreadable" / "faults.json", encoding="utf-8") as fh:
        return {suffix: getattr(errno, name) for suffix, name in json.load(fh).items()}


def test_unreadable_fixture_records_kernel_errors():
    root = str(HOSTS / "dsa-unreadable")
    with faults.inject(unreadable_faults(), on_read=True):
        sec = dsa.collect(Context(root=root))
    assert sec.status == "partial"
    assert sec.unreadable == {
        "sys/bus/dsa/devices/dsa0/wq0.4/cdev_minor": "ENXIO",
        "sys/bus/dsa/devices/dsa0/wq0.0/occupancy": "EOPNOTSUPP",
        "sys/bus/dsa/devices/dsa2/wq2.1/priority": "EACCES",
    }
    wqs = sec.data["devices"]["dsa0"]["wqs"]
    assert "cdev_minor" not in wqs["wq0.4"] and "occupancy" not in wqs["wq0.0"]
    assert "priority" not in sec.data["devices"]["dsa2"]["wqs"]["wq2.1"]
    # everything else is still there
    assert wqs["wq0.0"]["priority"] == 10 and sec.data["devices"]["dsa2"]["wqs"]["wq2.1"]["size"] == 32


def test_refusals_by_design_are_recorded_but_keep_status_ok():
    """ENXIO on cdev_minor and EOPNOTSUPP on occupancy happen on every healthy host: recorded, still ok."""
    expected = {k: v for k, v in unreadable_faults().items() if not k.endswith("priority")}
    assert len(expected) == 2
    with faults.inject(expected, on_read=True):
        sec = dsa.collect(Context(root=str(HOSTS / "dsa-unreadable")))
    assert sec.status == "ok"
    assert sorted(sec.unreadable.values()) == ["ENXIO", "EOPNOTSUPP"]


def test_unreadable_fixture_through_snapshot_toml():
    with faults.inject(unreadable_faults(), on_read=True):
        snap = snap_of(str(HOSTS / "dsa-unreadable"))
    assert at(snap, "collectors.dsa.status") == "partial"
    assert failures(at(snap, "collectors.dsa.unreadable"))["sys/bus/dsa/devices/dsa2/wq2.1/priority"] == "EACCES"
    assert at(snap, "collectors.dsa.unreadable")['devices.dsa2.wqs."wq2.1".priority'].startswith("denied: EACCES")
    assert at(snap, 'dsa.devices.dsa2.wqs."wq2.0".priority') == 10


@pytest.mark.parametrize("err", [errno.ENXIO, errno.EOPNOTSUPP, errno.EINVAL, errno.EACCES, errno.EIO, faults.VANISH])
@pytest.mark.parametrize("on_read", [False, True])
def test_each_errno_is_recorded_not_raised(err, on_read):
    with faults.inject({"dsa0/wq0.0/size": err, "dsa0/max_groups": err}, on_read=on_read):
        sec = dsa.collect(Context(root=str(HOSTS / "seed-experiment")))
    name = reason_of(OSError(err, os.strerror(err)))
    assert name in ("ENXIO", "EOPNOTSUPP", "EINVAL", "EACCES", "EIO", "ENOENT")
    assert sec.status == "partial"
    assert sec.unreadable == {"sys/bus/dsa/devices/dsa0/wq0.0/size": name, "sys/bus/dsa/devices/dsa0/max_groups": name}
    assert "size" not in sec.data["devices"]["dsa0"]["wqs"]["wq0.0"]
    assert sec.data["devices"]["dsa0"]["wqs"]["wq0.1"]["size"] == 32


def test_file_that_vanishes_between_listing_and_reading(tmp_path, monkeypatch):
    root = copy_host("seed-experiment", tmp_path)
    real_scan = dsa._scan

    def scan_then_remove(reader, rel):
        entries = real_scan(reader, rel)
        if rel.endswith("dsa2/wq2.2"):
            os.unlink(reader.path(f"{rel}/threshold"))
        if rel.endswith("dsa2"):
            shutil.rmtree(reader.path(f"{rel}/group2.3"))
        return entries

    monkeypatch.setattr(dsa, "_scan", scan_then_remove)
    sec = dsa.collect(Context(root=root))
    assert sec.status == "partial"
    assert sec.unreadable["sys/bus/dsa/devices/dsa2/wq2.2/threshold"] == "ENOENT"
    assert sec.unreadable["sys/bus/dsa/devices/dsa2/group2.3"] == "ENOENT"
    assert "threshold" not in sec.data["devices"]["dsa2"]["wqs"]["wq2.2"]


def test_deprecated_token_aliases_are_never_opened():
    root = HOSTS / "seed-experiment"
    tokens = sorted(dsa.DEPRECATED_ATTRS)
    assert (root / "sys/bus/dsa/devices/dsa0/max_tokens").is_file()  # the trap is present in the tree
    assert (root / "sys/bus/dsa/devices/dsa0/group0.0/use_token_limit").is_file()
    opened: list[str] = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *, dir_fd=None):
        opened.append(os.fsdecode(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    # A read of any alias would be recorded as EIO if it happened at all.
    with faults.inject({name: errno.EIO for name in tokens}):
        real_in_root = io.open_in_root

        def spy_in_root(root_fd, rel, flags):
            opened.append(rel)
            return real_in_root(root_fd, rel, flags)

        # mock.patch, not monkeypatch: undone here, before inject restores the real functions
        with mock.patch.object(os, "open", spy), mock.patch.object(io, "open_in_root", spy_in_root):
            sec = dsa.collect(Context(root=str(root)))
    assert sec.status == "ok" and sec.unreadable == {}
    assert len(opened) > 100
    assert not [p for p in opened if os.path.basename(p) in tokens]


# ---- enable dating -------------------------------------------------------------------------------------


def test_enabled_no_later_than_is_the_dev_node_mtime(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    node = os.path.join(root, "dev/dsa/wq0.0")
    os.utime(node, (dsatree.DEV_NODE_MTIME, dsatree.DEV_NODE_MTIME))
    os.utime(os.path.join(root, "dev/dsa/wq2.3"), (0, dsatree.DEV_NODE_MTIME + 0.25))
    # sysfs mtimes say something else and must not be used
    state = os.path.join(root, "sys/bus/dsa/devices/dsa0/wq0.0/state")
    os.utime(state, (dsatree.DEV_NODE_MTIME + 86400 * 2, dsatree.DEV_NODE_MTIME + 86400 * 2))
    snap = snap_of(root)
    want = dt.datetime(2026, 6, 8, 10, 15, tzinfo=dt.timezone.utc)
    assert at(snap, 'dsa.devices.dsa0.wqs."wq0.0".enabled_no_later_than') == want
    # rounded up, so it stays an upper bound
    assert at(snap, 'dsa.devices.dsa2.wqs."wq2.3".enabled_no_later_than') == want + dt.timedelta(seconds=1)
    assert "enabled_no_later_than" not in at(snap, 'dsa.devices.dsa0.wqs."wq0.4"')


def test_missing_dev_node_is_recorded(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    os.unlink(os.path.join(root, "dev/dsa/wq0.1"))
    sec = dsa.collect(Context(root=root))
    assert sec.unreadable == {"dev/dsa/wq0.1": "ENOENT"}
    assert "enabled_no_later_than" not in sec.data["devices"]["dsa0"]["wqs"]["wq0.1"]
    assert "enabled_no_later_than" in sec.data["devices"]["dsa0"]["wqs"]["wq0.0"]


# ---- PCI functions ---------------------------------------------------------------------------------------


def test_pci_functions_from_sysfs_filter_by_id():
    reader = Reader(str(HOSTS / "iaa"))
    found = dsa.pci_functions_sysfs(reader)
    assert {bdf: f["device"] for bdf, f in found.items()} == {
        "0000:6a:01.0": "0x0b25", "0000:6a:02.0": "0x0cfe", "0000:e7:01.0": "0x0b25", "0000:e7:02.0": "0x0cfe"}
    assert dsa.pci_functions_sysfs(reader, ids={0x0CFE: "iax"}).keys() == {"0000:6a:02.0", "0000:e7:02.0"}


def test_pyudev_and_sysfs_fallback_agree_on_this_host():
    """The two enumerations give the same answer for whatever PCI functions this host has."""
    import pyudev

    try:
        pyudev.Context()
        usable = ""
    except Exception as err:  # no libudev on this machine
        usable = str(err)
    require(not usable, f"libudev unusable: {usable}")
    reader = Reader("/")
    names = reader.listdir("sys/bus/pci/devices", record=False) or []
    pairs = {(reader.read(f"sys/bus/pci/devices/{n}/vendor"), reader.read(f"sys/bus/pci/devices/{n}/device"))
             for n in names}
    pairs = {(int(v, 16), int(d, 16)) for v, d in pairs if v and d}
    require(bool(pairs), "no PCI functions visible on this machine")
    for vendor in {v for v, _ in pairs}:
        ids = {d: "any" for v, d in pairs if v == vendor}
        via_udev = dsa.pci_functions_udev(ids, vendor)
        assert via_udev, f"pyudev found none of {vendor:04x}:{sorted(ids)}"
        assert via_udev == dsa.pci_functions_sysfs(reader, ids, vendor)


def test_live_falls_back_to_sysfs_without_libudev(monkeypatch):
    import pyudev

    def no_libudev():
        raise ImportError("libudev.so.1: cannot open shared object file")

    monkeypatch.setattr(pyudev, "Context", no_libudev)
    reader = Reader("/")
    assert dsa.pci_functions(Context(), reader) == {
        bdf: info for bdf, info in dsa.pci_functions_sysfs(reader).items()}
    with pytest.raises(ImportError):
        dsa.pci_functions_udev()
