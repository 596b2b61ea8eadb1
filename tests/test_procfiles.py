"""Another user's process is never executed, and its files are read only as it could read them.

Real child processes whose argv reads ``vllm serve ...``: a venv whose ``bin/python`` would leave a
marker if anything ran it, a server running as ``nobody`` naming a root-only ``--config``, relative
config paths resolved in the server's working directory, a FIFO and /dev/zero as ``--config``, and
bytes that are not UTF-8 in argv and environ. Everything goes through ``hoststate snap``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate import procfiles, snapshot
from hoststate.collectors import packages
from hoststate.coverage import failures
from tests.conftest import PYTHONPATH

SERVE = "import sys, time\nprint('ready', flush=True)\ntime.sleep(120)\n"
SYSTEM_PYTHON = "/usr/bin/python3"  # reachable for the nobody user (the test venv may live under /root)


def _snap(tmp: Path, *args: str, cwd: Path | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp / f"snap-{len(list(tmp.glob('snap-*')))}.toml"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    done = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-o", str(out), "--only", "vllm", *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd or tmp, env=env)
    assert done.returncode in (0, 1), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    return snapshot.loads(out.read_text()), done


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []

    def start(argv: list, **kw) -> subprocess.Popen:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
        started.append(child)
        line = child.stdout.readline()
        assert line.strip() == b"ready", child.stderr.read()
        return child

    try:
        yield start
    finally:
        for child in started:
            child.kill()
            child.wait(timeout=30)


def _status(snap: dict) -> dict:
    return snap["collectors"]["vllm"]


def _unreadable(snap: dict, mention: str) -> str:
    """Every ``unreadable`` entry (key and reason) of the vllm collector that mentions ``mention``, as one text."""
    found = [f"{k} {v}" for k, v in failures(_status(snap).get("unreadable", {})).items() if mention in f"{k} {v}"]
    assert found, (mention, _status(snap))
    return " | ".join(found)


def _server_script(directory: Path) -> None:
    """``serve`` in ``directory``: argv ``vllm serve M ...`` run by Python starts this file."""
    (directory / "serve").write_text(SERVE)
    (directory / "serve").chmod(0o644)


# ---------------------------------------------------------------------------------------------
# No execution


def _fake_venv(tmp: Path, marker: Path) -> Path:
    venv = tmp / "venv"
    xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (venv / "bin").mkdir(parents=True)
    # Records who ran it: other hoststate runs on this host may discover this server too.
    trap = f"#!/bin/sh\ntr '\\0' ' ' < /proc/$PPID/cmdline >> {marker}; echo >> {marker}\n"
    for name in ("python", "python3", f"python{xy}"):
        (venv / "bin" / name).write_text(trap)
        (venv / "bin" / name).chmod(0o755)
    (venv / "bin" / "vllm").write_text(SERVE)
    home = os.path.dirname(os.path.realpath(sys.executable))
    (venv / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n"
                                     f"version = {sys.version.split()[0]}\n")
    site = venv / "lib" / f"python{xy}" / "site-packages"
    for entry, meta in (
        ("vllm-0.12.0.dist-info", "Name: vllm\nVersion: 0.12.0\n"),
        ("torch-2.9.0+cu129.dist-info", "Name: torch\nVersion: 2.9.0+cu129\n"),
        ("flashinfer_python.dist-info", "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.5.2\n\nbody\n"),
        ("Unrelated_Thing-1.0.dist-info", "Name: unrelated-thing\nVersion: 1.0\n"),
    ):
        (site / entry).mkdir(parents=True)
        (site / entry / "METADATA").write_text(meta)
    (site / "triton.egg-info").write_text("Metadata-Version: 1.0\nName: triton\nVersion: 3.5.0\n")
    return venv


def test_a_server_is_never_executed_and_its_packages_come_from_its_files(tmp_path, children):
    marker = tmp_path / "MARKER"
    venv = _fake_venv(tmp_path, marker)
    # sitecustomize on the server's PYTHONPATH marks any interpreter started with it but the server.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('I_AM_THE_SERVER') != '1':\n"
        f"    open({str(marker)!r}, 'a').write(open(f'/proc/{{os.getppid()}}/cmdline').read() + '\\n')\n")
    child = children([str(venv / "bin" / "python3"), str(venv / "bin" / "vllm"), "serve", "m", "-tp", "2"],
                     executable=os.path.realpath(sys.executable), cwd=tmp_path,
                     env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(hooks), "I_AM_THE_SERVER": "1"})
    for args in (["--vllm-pid", str(child.pid)], []):
        snap, _ = _snap(tmp_path, *args)
        vllm = snap["vllm"]
        if "servers" in vllm:  # discovery found other servers too
            vllm = next(s for s in vllm["servers"].values() if s.get("pid") == child.pid)
        assert vllm["packages"] == {"vllm": "0.12.0", "torch": "2.9.0+cu129", "flashinfer-python": "0.5.2",
                                    "triton": "3.5.0"}
        assert vllm["packages_from"] == (f"server interpreter {venv / 'bin' / 'python3'} (pid {child.pid}), "
                                         "read from its files")
        assert vllm["version"] == "0.12.0" and vllm["args"]["tensor_parallel_size"] == 2
    ran_by_us = [line for line in (marker.read_text().splitlines() if marker.exists() else []) if str(tmp_path) in line]
    assert ran_by_us == []


def test_server_python_follows_pyvenv_cfg_pythonpath_flags_and_user_site(tmp_path, children):
    venv = _fake_venv(tmp_path, tmp_path / "MARKER")
    extra = tmp_path / "extra"
    (extra / "vllm-9.0.0.dist-info").mkdir(parents=True)  # PYTHONPATH comes before site-packages
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "extra", "HOME": str(tmp_path)}
    child = children([str(venv / "bin" / "python3"), str(venv / "bin" / "vllm"), "serve", "m"],
                     executable=os.path.realpath(sys.executable), cwd=tmp_path, env=env)
    argv = [str(venv / "bin" / "python3"), str(venv / "bin" / "vllm"), "serve", "m"]
    with procfiles.ProcView(child.pid) as view:
        py = packages.server_python(view, argv, env)
        xy = f"{sys.version_info[0]}.{sys.version_info[1]}"
        assert py.venv == str(venv) and py.version == xy
        assert py.path == ["./extra", f"{venv}/lib/python{xy}/site-packages"]  # relative: the server's cwd
        found = packages.scan(py.path, lambda p: view.listdir(p)[0], lambda p: view.read_text(p)[0])
        assert found["vllm"] == "9.0.0"
        isolated = packages.server_python(view, [argv[0], "-I", *argv[1:]], env)
        assert isolated.path == [f"{venv}/lib/python{xy}/site-packages"]
        base = packages.server_python(view, [os.path.realpath(sys.executable), "-m", "vllm.x"], env)
        assert base.venv is None and f"{tmp_path}/.local/lib/python{xy}/site-packages" in base.path
        assert base.path[0] == "."  # -m puts the working directory first


# ---------------------------------------------------------------------------------------------
# Files named by the process


def _config_server(children, directory: Path, config: str, user: int | None = None, **kw) -> subprocess.Popen:
    _server_script(directory)
    extra = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    return children(["vllm", "serve", "m", "--config", config], executable=SYSTEM_PYTHON, cwd=directory,
                    env={"PATH": "/usr/bin:/bin"}, **extra, **kw)


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_root_only_config_of_a_nobody_server_is_not_read(tmp_path, shared_dir, children, mode):
    secret = "sk-rootonly0123456789abcdef"
    cfg = shared_dir / "cfg.yaml"
    cfg.write_text(f"tensor-parallel-size: 4\nserved-model-name: {secret}\n")
    cfg.chmod(mode)
    assert cfg.stat().st_uid == 0
    child = _config_server(children, shared_dir, "cfg.yaml", user=65534)
    snap, _ = _snap(tmp_path, "--vllm-pid", str(child.pid))
    text = (tmp_path / "snap-0.toml").read_text()
    if mode == 0o600:
        assert "tensor_parallel_size" not in snap["vllm"].get("args", {})
        assert secret not in text
        assert _status(snap)["status"] == "partial"
        assert "not readable by the process's user (uid 65534)" in _unreadable(snap, "--config cfg.yaml")
        # what the unread file decides is unknown, not an error of the arguments (collectors/vllm SOURCES)
        assert "args_error" not in snap["vllm"]
    else:  # the same file readable to the server's user is read: the check above can fail
        assert snap["vllm"]["args"]["tensor_parallel_size"] == 4


def test_a_relative_config_is_resolved_in_the_process_cwd(tmp_path, shared_dir, children):
    mine = tmp_path / "here"
    mine.mkdir()
    (mine / "cfg.yaml").write_text("tensor-parallel-size: 2\n")
    (shared_dir / "cfg.yaml").write_text("tensor-parallel-size: 4\n")
    child = _config_server(children, shared_dir, "./cfg.yaml")
    snap, _ = _snap(tmp_path, "--vllm-pid", str(child.pid), cwd=mine)
    assert snap["vllm"]["args"]["tensor_parallel_size"] == 4


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "/proc/self/environ", "link-to-shadow", "dir"])
def test_a_config_that_is_not_a_regular_readable_file_is_refused_at_once(tmp_path, shared_dir, children, target):
    # every name ends in .yaml: vLLM reads no other config file, and neither does hoststate
    name = f"{target.strip('/').replace('/', '-')}.yaml"
    if target == "fifo":
        os.mkfifo(shared_dir / name)
    elif target == "link-to-shadow":
        os.symlink("../../../../../../etc/shadow", shared_dir / name)
    elif target == "dir":
        (shared_dir / name).mkdir()
    else:
        os.symlink(target, shared_dir / name)
    child = _config_server(children, shared_dir, name, user=65534)
    snap, _ = _snap(tmp_path, "--vllm-pid", str(child.pid))  # a hang would time the run out
    reason = _unreadable(snap, f"--config {name}")
    expected = {
        "/dev/zero": "not a regular file", "fifo": "not a regular file", "dir": "not a regular file",
        "/proc/self/environ": "a kernel pseudo-file, not a regular file",
        "link-to-shadow": "not readable by the process's user (uid 65534)",
    }[target]
    assert expected in reason
    assert "root:" not in (tmp_path / "snap-0.toml").read_text()


def _fake_proc(tmp: Path, uid: int = 1000) -> tuple[Path, Path]:
    """A /proc/PID lookalike whose root is a directory tree (for resolution inside a root)."""
    tree = tmp / "tree"
    (tree / "home" / "u" / "sub").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "etc" / "passwd").write_text("inside: true\n")
    pid = tmp / "proc" / "42"
    pid.mkdir(parents=True)
    (pid / "root").symlink_to(tree)
    (pid / "cwd").symlink_to(tree / "home" / "u" / "sub")
    (pid / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                "Groups:\t\n")
    for path in (tree, tree / "home", tree / "home" / "u", tree / "home" / "u" / "sub", tree / "etc"):
        path.chmod(0o755)
    (tree / "etc" / "passwd").chmod(0o644)
    return tmp / "proc", tree


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("/etc/passwd", b"inside: true\n"),  # absolute: the process's root, not the host's
        ("../../../../../../../etc/passwd", b"inside: true\n"),  # .. stops at the root
        ("/proc/self/../../etc/passwd", None),  # no /proc inside this root
    ],
)
def test_links_never_leave_the_process_root(tmp_path, link, expected):
    proc, tree = _fake_proc(tmp_path)
    os.symlink(link, tree / "home" / "u" / "sub" / "cfg")
    with procfiles.ProcView(42, proc=str(proc)) as view:
        assert view.error is None
        data, err = view.read("cfg")
        assert data == expected, err
        assert view.read("../../../etc/passwd")[0] == b"inside: true\n"
        assert view.locate("cfg")[0] in ("/etc/passwd", None)


def test_mode_bits_and_groups_decide_like_the_kernel(tmp_path):
    proc, tree = _fake_proc(tmp_path)
    f = tree / "home" / "u" / "sub" / "f"
    f.write_text("x")
    os.chown(f, 0, 1000)
    with procfiles.ProcView(42, proc=str(proc)) as view:
        for mode, ok in ((0o600, False), (0o640, True), (0o604, False), (0o644, True)):
            f.chmod(mode)
            assert (view.read("f")[0] is not None) is ok, oct(mode)
        f.chmod(0o644)
        (tree / "home" / "u").chmod(0o700)  # owned by root: the path is no longer searchable
        assert "not searchable" in view.read("/home/u/sub/f")[1]
    assert stat.S_IMODE(f.stat().st_mode) == 0o644


def test_a_large_config_is_capped(tmp_path):
    proc, tree = _fake_proc(tmp_path)
    (tree / "big").write_bytes(b"a: 1\n" * (procfiles.MAX_FILE_BYTES // 4))
    (tree / "big").chmod(0o644)
    with procfiles.ProcView(42, proc=str(proc)) as view:
        assert view.read("/big") == (None, f"larger than {procfiles.MAX_FILE_BYTES} bytes")


# ---------------------------------------------------------------------------------------------
# Bytes that are not UTF-8


def test_non_utf8_argv_and_environ_are_recorded_with_escapes(tmp_path, children):
    _server_script(tmp_path)
    child = children([b"vllm", b"serve", b"m\xff", b"--served-model-name", b"caf\xe9"],
                     executable=SYSTEM_PYTHON, cwd=tmp_path,
                     env={b"PATH": b"/usr/bin:/bin", b"VLLM_NOTE": b"\xfe\xff", b"NCCL_\xff": b"1"})
    snap, done = _snap(tmp_path, "--vllm-pid", str(child.pid))
    vllm = snap["vllm"]
    assert done.returncode == 0
    assert vllm["args"]["model"] == "m\\xff" and vllm["args"]["served_model_name"] == ["caf\\xe9"]
    assert vllm["env"]["VLLM_NOTE"] == "\\xfe\\xff"
    assert any("argv" in n for n in vllm["decode_notes"]) and any("environment" in n for n in vllm["decode_notes"])


def test_decode_block_marks_lossy_blocks():
    assert procfiles.decode_block(b"a\0b\0") == (["a", "b"], False)
    assert procfiles.decode_block(b"caf\xc3\xa9\0\xff\0") == (["caf\u00e9", "\\xff"], True)
