"""Files a user names (snapshots, baselines, policies) are read only when they are regular files of bounded size:
a FIFO without writer, /dev/zero, a directory or a socket is refused at once with one line, never read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from hoststate.errors import InputError, PolicyError
from hoststate.io import POLICY_MAX_BYTES, SNAPSHOT_MAX_BYTES, read_input
from tests.conftest import FIXTURES, HOSTS

SNAP = str(FIXTURES / "snapshots" / "seed-baseline.toml")
#: The subprocess's own timeout only detects a hang; nothing asserts wall-clock time.
HANG = 60


@pytest.fixture
def specials(tmp_path):
    """name -> (path, the kind the refusal must name)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # nobody ever writes: a blocking open or read would wait forever
    sock_path = tmp_path / "sock.toml"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    (tmp_path / "dir.toml").mkdir()
    yield {
        "fifo": (str(fifo), "a FIFO"),
        "zero": ("/dev/zero", "a character device"),
        "dir": (str(tmp_path / "dir.toml"), "a directory"),
        "socket": (str(sock_path), "a socket"),
    }
    sock.close()


def _in_thread(func):
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = func()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            result["error"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG)
    assert not t.is_alive(), "reading blocked"
    return result


@pytest.mark.parametrize("name", ["fifo", "zero", "dir", "socket"])
def test_non_regular_files_are_refused_by_type(specials, name) -> None:
    path, kind = specials[name]
    result = _in_thread(lambda: read_input(path, max_bytes=SNAPSHOT_MAX_BYTES, what="snapshot"))
    err = result.get("error")
    assert isinstance(err, InputError), result
    assert str(err) == f"{path}: snapshot is {kind}, not a regular file"


def test_size_cap_is_exact(tmp_path) -> None:
    path = tmp_path / "cap.toml"
    path.write_bytes(b"x" * 100)
    assert read_input(str(path), max_bytes=100) == b"x" * 100
    with pytest.raises(InputError, match=r"file is larger than 99 bytes"):
        read_input(str(path), max_bytes=99)
    sparse = tmp_path / "huge.toml"
    with open(sparse, "wb") as fh:
        fh.truncate(SNAPSHOT_MAX_BYTES + 1)
    with pytest.raises(InputError, match=f"larger than {SNAPSHOT_MAX_BYTES} bytes"):
        read_input(str(sparse), max_bytes=SNAPSHOT_MAX_BYTES, what="snapshot")


def test_missing_and_policy_error_class(tmp_path) -> None:
    with pytest.raises(InputError, match="baseline not found"):
        read_input(str(tmp_path / "nope"), max_bytes=10, what="baseline")
    with pytest.raises(PolicyError, match="policy is a character device"):
        read_input("/dev/zero", max_bytes=POLICY_MAX_BYTES, what="policy", error=PolicyError)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True,
                          timeout=HANG, check=False)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hoststate: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _commands(bad: str, tmp_path) -> list[tuple[str, ...]]:
    return [
        ("show", bad),
        ("show", bad, "--format", "json"),
        ("digest", bad),
        ("diff", bad, SNAP),
        ("diff", SNAP, bad),
        ("diff", SNAP, SNAP, "--policy", bad),
        ("check", bad),
        ("export", "prometheus", bad),
        ("export", "nfd", SNAP, "--baseline", bad),
        ("fleet", bad),
        ("fleet", SNAP, "--reference", bad),
        ("guard", "--baseline", bad, "--root", str(HOSTS / "seed-baseline"), "--", "true"),
        ("guard", "--baseline", SNAP, "--policy", bad, "--root", str(HOSTS / "seed-baseline"), "--", "true"),
    ]


@pytest.mark.parametrize("name", ["fifo", "zero"])
def test_every_command_refuses_fifo_and_dev_zero(specials, tmp_path, name) -> None:
    path, kind = specials[name]
    for args in _commands(path, tmp_path):
        line = _one_line(_cli(*args))
        assert f"{kind}, not a regular file" in line, (args, line)
        assert path in line, (args, line)


def test_fleet_directory_skips_a_fifo_and_reads_the_rest(tmp_path) -> None:
    with open(SNAP, "rb") as src:
        (tmp_path / "good.toml").write_bytes(src.read())
    os.mkfifo(tmp_path / "wedged.toml")
    proc = _cli("fleet", str(tmp_path), "--format", "json")
    assert proc.returncode == 1, proc.stderr  # read without blocking, and a gate fails on a snapshot it could not read
    import json

    report = json.loads(proc.stdout)
    assert report["skipped"] == [{"file": str(tmp_path / "wedged.toml"),
                                  "error": "snapshot is a FIFO, not a regular file"}]
    assert report["groups"][0]["members"] == [str(tmp_path / "good.toml")]
