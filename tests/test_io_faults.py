"""The read layer under faults a real host produces: wedged files, loops, vanishing files, odd bytes."""

from __future__ import annotations

import errno
import os
import shutil
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from hoststate.io import MAX_BYTES, Reader, run, which
from tests.faults import inject


def test_fifo_standing_in_for_a_wedged_device_never_blocks(tmp_path) -> None:
    os.makedirs(tmp_path / "sys/dev")
    os.mkfifo(tmp_path / "sys/dev/state")  # nobody writes: a blocking read would hang forever
    r = Reader(str(tmp_path))
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("v", r.read("sys/dev/state")), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert result["v"] is None
    assert r.unreadable == {"sys/dev/state": "not a regular file"}


def test_symlink_loop_is_recorded(tmp_path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    r = Reader(str(tmp_path))
    assert r.read("a") is None
    assert r.listdir("a") is None
    assert r.unreadable == {"a": "ELOOP"}


def test_non_utf8_bytes_are_kept_visibly(tmp_path) -> None:
    (tmp_path / "name").write_bytes(b"wq\xff\xfe-name\n")
    r = Reader(str(tmp_path))
    assert r.read("name") == "wq\\xff\\xfe-name"
    assert r.unreadable == {}


def test_very_large_file_is_refused_not_slurped(tmp_path) -> None:
    with open(tmp_path / "big", "wb") as fh:
        fh.truncate(MAX_BYTES * 4)  # sparse: cheap to make
    r = Reader(str(tmp_path))
    assert r.read("big") is None
    assert r.unreadable["big"] == f"larger than {MAX_BYTES} bytes"


def test_empty_file_is_distinct_from_failure(tmp_path) -> None:
    (tmp_path / "engines").write_bytes(b"")
    r = Reader(str(tmp_path))
    assert r.read("engines") == ""
    assert r.read("missing") is None
    assert r.unreadable == {"missing": "ENOENT"}


def test_errors_at_read_time_are_recorded(tmp_path) -> None:
    (tmp_path / "cdev_minor").write_text("3\n")
    (tmp_path / "occupancy").write_text("0\n")
    r = Reader(str(tmp_path))
    with inject({"cdev_minor": errno.ENXIO, "occupancy": errno.EOPNOTSUPP}, on_read=True):
        assert r.read("cdev_minor") is None
        assert r.read_int("occupancy") is None
    assert r.unreadable == {"cdev_minor": "ENXIO", "occupancy": "EOPNOTSUPP"}


def test_vanished_between_listing_and_reading(tmp_path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("1")
    r = Reader(str(tmp_path))
    names = r.listdir("d")
    os.unlink(tmp_path / "d" / "f")
    assert names == ["f"] and r.read_int("d/f") is None
    assert r.unreadable == {"d/f": "ENOENT"}


def test_not_an_integer_is_recorded(tmp_path) -> None:
    (tmp_path / "n").write_text("0x10\n")
    r = Reader(str(tmp_path))
    assert r.read_int("n") is None and r.read_int("n", base=16) == 16
    assert "not an integer" in r.unreadable["n"]


def test_run_never_raises() -> None:
    assert run(["/nonexistent/binary"]).error == "ENOENT"
    hung = run(["sleep", "30"], timeout=0.2)
    assert hung.error == "timeout after 0.2s" and not hung.ok
    killed = run(["sh", "-c", "kill -SEGV $$"])
    assert killed.returncode == -11 and killed.describe() == "killed by signal 11"
    bad = run(["sh", "-c", "echo oops >&2; exit 3"])
    assert bad.describe() == "exit 3: oops"
    assert run(["true"]).ok


#: What a PATH folder may hold under the looked-up name: an executable, a file without x, a folder, a symlink to
#: an executable, a dangling symlink, nothing.
_ENTRIES = ("exec", "plain", "dir", "link", "dangling", "none")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from(_ENTRIES)), min_size=0, max_size=5),
       st.lists(st.sampled_from(["f0", "f1", "f2", "f3", "f4", "", "missing"]), max_size=7))
def test_which_finds_what_shutil_which_finds(tmp_path_factory, entries, order) -> None:
    """io.which against shutil.which (the oracle) over folders holding each kind of entry under the name, in any
    order on PATH, repeated, empty (the working directory) or missing."""
    base = tmp_path_factory.mktemp("path")
    made: set[int] = set()
    for folder, kind in entries:
        if folder in made:
            continue
        made.add(folder)
        here = base / f"f{folder}"
        here.mkdir()
        target = here / "tool"
        if kind in ("exec", "plain"):
            target.write_text("#!/bin/sh\n")
            target.chmod(0o755 if kind == "exec" else 0o644)
        elif kind == "dir":
            target.mkdir()
        elif kind == "link":
            (here / "real").write_text("#!/bin/sh\n")
            (here / "real").chmod(0o755)
            target.symlink_to(here / "real")
        elif kind == "dangling":
            target.symlink_to(here / "gone")
    path = os.pathsep.join(str(base / p) if p else "" for p in order)
    old, cwd = os.environ.get("PATH"), os.getcwd()
    os.environ["PATH"] = path
    try:
        os.chdir(base / "f0" if (base / "f0").is_dir() else base)  # an empty folder on PATH is the working one
        assert which("tool") == shutil.which("tool"), (entries, order)
        for named in ("f1/tool", str(base / "f2" / "tool"), "./tool"):  # a name with a folder: that file
            assert which(named) == shutil.which(named), (entries, order, named)
    finally:
        os.chdir(cwd)
        if old is None:
            del os.environ["PATH"]
        else:
            os.environ["PATH"] = old


def test_which_without_path_uses_the_systems_default(monkeypatch) -> None:
    monkeypatch.delenv("PATH", raising=False)
    assert which("sh") == shutil.which("sh") and which("sh")
