"""``--root DIR`` never reads outside DIR: every path the collectors read, list, stat or readlink is resolved
inside the root (absolute links re-anchored at it, ``..`` stopped at it), with openat2 or, where the kernel
lacks it, the pure-Python resolver. A crafted tree whose links point at the host's files gets the host's
content nowhere into the snapshot, and each escaping path it reads is recorded as unreadable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from hoststate import capture, io, snapshot
from hoststate.collectors import Context, dsa, system
from hoststate.collectors import accel_config as accel
from hoststate.coverage import failures
from hoststate.io import ESCAPES, Reader
from tests.conftest import HOSTS, PYTHONPATH

MARKER = "HOSTMARKER7c1d"
#: The subprocess's own timeout only detects a hang; nothing asserts wall-clock time.
HANG = 120
DSA = "sys/bus/dsa/devices"


@pytest.fixture(params=["openat2", "resolver"])
def mode(request, monkeypatch):
    """Each test runs with the kernel's openat2 and with the pure-Python fallback."""
    if request.param == "resolver":
        monkeypatch.setattr(io, "_openat2_usable", False)
    else:
        monkeypatch.setattr(io, "_openat2_usable", None)
        assert io._has_openat2(os.open("/", os.O_PATH)), "openat2 is not available on this kernel"
    return request.param


def _host_files(outside) -> dict[str, str]:
    """Files outside the tree, each holding the marker: the 'host' a crafted tree tries to read."""
    outside.mkdir()
    (outside / "secret").write_text(f"{MARKER} secret\n")
    (outside / "thp").mkdir()
    (outside / "thp" / "enabled").write_text(f"always [{MARKER}] never\n")
    (outside / "thp" / "defrag").write_text(f"[{MARKER}]\n")
    (outside / "hugepages" / f"hugepages-{MARKER}").mkdir(parents=True)
    (outside / "hugepages" / f"hugepages-{MARKER}" / "nr_hugepages").write_text("7\n")
    dev = outside / "dsa-device"
    shutil.copytree(HOSTS / "seed-experiment" / DSA / "dsa0", dev, symlinks=False, ignore_dangling_symlinks=True)
    (dev / "state").write_text(f"{MARKER}\n")
    (outside / "cdevs").mkdir()
    (outside / "cdevs" / f"wq{MARKER}").write_text("")
    return {"secret": str(outside / "secret"), "thp": str(outside / "thp"), "hugepages": str(outside / "hugepages"),
            "device": str(dev), "cdevs": str(outside / "cdevs")}


def crafted_tree(tmp_path) -> tuple[str, dict[str, str]]:
    """seed-experiment with one escape of each kind; returns (root, {path read: kind of escape})."""
    host = _host_files(tmp_path / "host")
    root = tmp_path / "tree"
    shutil.copytree(HOSTS / "seed-experiment", root, symlinks=True)

    def link(rel: str, target: str) -> None:
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)

    depth = "../" * 12  # far more than the tree is deep: climbs to / on the host without confinement
    link("proc/sys/kernel/osrelease", host["secret"])  # absolute link to a host file
    link("proc/cmdline", depth + host["secret"].lstrip("/"))  # ../../.. chain
    link("proc/meminfo", "/proc/self/environ")  # the snapshotting process's own environment
    link("proc/cpuinfo", "../sys/pivot/cpuinfo")  # a link to a link that escapes
    link("sys/pivot", "/proc/self")
    link("sys/kernel/mm/transparent_hugepage", host["thp"])  # a directory on the way
    link("sys/kernel/mm/hugepages", depth + host["hugepages"].lstrip("/"))  # a listed directory
    link(f"{DSA}/dsa0/wq0.0", host["device"])  # a WQ directory
    link(f"{DSA}/dsa0/wq0.1/driver", host["device"])  # a driver link (readlink)
    link(f"{DSA}/dsa2", host["device"])  # a whole device
    link("dev/dsa", host["cdevs"])  # char devices listed by name
    escapes = {
        "proc/sys/kernel/osrelease": "system",
        "proc/cmdline": "system",
        "proc/meminfo": "system",
        "proc/cpuinfo": "system",
        "sys/kernel/mm/transparent_hugepage/enabled": "system",
        "sys/kernel/mm/transparent_hugepage/defrag": "system",
        f"{DSA}/dsa0/wq0.0": "dsa",
        f"{DSA}/dsa2": "dsa",
    }
    return str(root), escapes


def _check(snap: dict, text: str, escapes: dict[str, str]) -> None:
    assert MARKER not in text
    for rel, collector in escapes.items():
        unread = failures(snap["collectors"][collector]["unreadable"])
        assert unread.get(rel) == ESCAPES, (rel, snap["collectors"][collector])
    devices = snap["dsa"]["devices"]
    assert "wq0.0" not in devices["dsa0"]["wqs"]
    # dsa2 is listed by the tree, but nothing of it is read: no guessed value, an unknown device
    assert "dsa2" not in devices
    assert snap["collectors"]["dsa"]["unreadable"]["devices.dsa2.**"].startswith(f"error: {ESCAPES} [")
    assert devices["dsa0"]["wqs"]["wq0.2"]["state"] == "enabled"  # the rest of the tree still reads
    assert "hugepages" not in snap["system"] and "thp" not in snap["system"]


def test_escaping_links_in_process(tmp_path, mode, monkeypatch) -> None:
    root, escapes = crafted_tree(tmp_path)
    monkeypatch.setenv("HOSTSTATE_TEST_SECRET", MARKER)  # what /proc/self/environ would give away
    snap = capture.collect(Context(root=root), ("system", "dsa", "accel_config"))
    text = snapshot.to_toml(snap)
    _check(snapshot.loads(text), text, escapes)


@pytest.mark.parametrize("resolver", [False, True], ids=["openat2", "resolver"])
def test_escaping_links_through_the_cli(tmp_path, resolver) -> None:
    root, escapes = crafted_tree(tmp_path)
    out = tmp_path / "snap.toml"
    prelude = "import hoststate.io as io\nio._openat2_usable = False\n" if resolver else ""
    code = "import sys\n" + prelude + "from hoststate.cli import main\nmain(sys.argv[1:])\n"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_TEST_SECRET": MARKER}
    proc = subprocess.run([sys.executable, "-c", code, "snap", "--root", root, "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=HANG, check=False)
    assert proc.returncode == 0, proc.stderr
    assert MARKER not in proc.stderr
    text = out.read_text()
    _check(snapshot.loads(text), text, escapes)


def test_absolute_link_reads_the_trees_own_file(tmp_path, mode) -> None:
    """RESOLVE_IN_ROOT: an absolute link names the tree's file, as it would on the captured host."""
    (tmp_path / "outside").write_text(f"{MARKER}\n")
    root = tmp_path / "tree"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "shadow").write_text("tree's own\n")
    os.symlink("/etc/shadow", root / "etc" / "link")
    os.symlink("../../../../../../etc/shadow", root / "etc" / "climb")
    os.symlink(str(tmp_path / "outside"), root / "etc" / "gone")
    r = Reader(str(root))
    assert r.read("etc/link") == "tree's own"
    assert r.read("etc/climb") == "tree's own"
    assert r.read("etc/gone") is None
    assert r.readlink("etc/gone") == str(tmp_path / "outside")  # the link's own text is the tree's
    assert r.stat("etc/gone", record=False) is None and r.lexists("etc/gone") and not r.exists("etc/gone")
    assert r.listdir("etc") == ["climb", "gone", "link", "shadow"]
    assert r.unreadable == {"etc/gone": ESCAPES}


def test_loops_and_dangling_links_keep_their_reasons(tmp_path, mode) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    os.symlink("nothing", root / "dangling")
    (root / "d").mkdir()
    r = Reader(str(root))
    assert r.read("a") is None and r.listdir("b") is None and r.read("dangling") is None
    assert r.read("d/../../../a") is None  # '..' stops at the root: this is the tree's a
    assert r.unreadable == {"a": "ELOOP", "b": "ELOOP", "dangling": "ENOENT", "d/../../../a": ESCAPES}


def _strip(section) -> tuple:
    return section.status, section.data, dict(section.unreadable)


@pytest.mark.parametrize("host", sorted(p.name for p in HOSTS.iterdir() if p.is_dir()))
def test_fixture_trees_read_as_by_plain_path(host, monkeypatch) -> None:
    """The fixture trees (sysfs's own relative links, all inside the root) read the same confined, with either
    resolver, as opened by name through the kernel's ordinary resolution (the oracle)."""
    ctx = Context(root=str(HOSTS / host))
    results = {}
    for name in ("plain", "openat2", "resolver"):
        with monkeypatch.context() as m:
            if name == "plain":
                m.setattr(Reader, "open", lambda self, rel, flags: os.open(self.path(rel), flags | os.O_CLOEXEC))
            m.setattr(io, "_openat2_usable", False if name == "resolver" else None)
            results[name] = [_strip(mod.collect(ctx)) for mod in (system, dsa, accel)]
    assert results["openat2"] == results["plain"]
    assert results["resolver"] == results["plain"]
    assert any(r[1] for r in results["plain"])  # something was read at all


def test_live_host_is_read_by_name() -> None:
    """Under / there is nothing to escape from: paths are opened as given (no per-read root descriptor)."""
    r = Reader("/")
    assert r.live and r.read("proc/self/stat") is not None
    text = textwrap.dedent(r.read("proc/self/status") or "")
    assert "Pid:" in text
