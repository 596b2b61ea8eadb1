"""`hoststate snap` and `hoststate show` as a user runs them: a real subprocess, real files, exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hoststate.snapshot import loads
from tests.conftest import HOSTS, require

HOSTSTATE = [sys.executable, "-m", "hoststate"]


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=120, **kw)


def test_snap_to_stdout_with_summary_on_stderr() -> None:
    proc = run("snap", "--root", str(HOSTS / "xeon-2s"), "--only", "system")
    assert proc.returncode == 0, proc.stderr
    snap = loads(proc.stdout)
    assert snap["system"]["cpu"]["threads"] == 224
    lines = proc.stderr.splitlines()
    assert lines[0] == f"digest {snap['hoststate']['digest']}"
    assert any(line.split()[:2] == ["system", "ok"] for line in lines)
    assert any(line.split()[:2] == ["gpu", "skipped"] for line in lines)


def test_snap_live_host_without_gpu_or_dsa(tmp_path) -> None:
    out = tmp_path / "live.toml"
    proc = run("snap", "-o", str(out), "--label", "ci")
    assert proc.returncode == 0, proc.stderr
    snap = loads(out.read_bytes())
    assert snap["hoststate"]["label"] == "ci"
    assert snap["collectors"]["system"]["status"] in ("ok", "partial")
    # every collector reports a status, none crashed the snapshot
    assert set(snap["collectors"]) >= {"system", "dsa", "accel_config", "gpu", "vllm", "env", "packages"}
    assert all(c["status"] != "error" for c in snap["collectors"].values()), snap["collectors"]


def test_output_never_overwrites_without_force(tmp_path) -> None:
    out = tmp_path / "baseline.toml"
    out.write_bytes(b"the baseline\n")
    proc = run("snap", "-o", str(out), "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "exists" in proc.stderr and "--force" in proc.stderr
    assert out.read_bytes() == b"the baseline\n"
    proc = run("snap", "-o", str(out), "--force", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system")
    assert proc.returncode == 0, proc.stderr
    assert loads(out.read_bytes())["system"]["cpu"]["threads"] == 8


def _readonly_dir_cmd(tmp_path, args: list[str]) -> list[str]:
    """A command that runs snap with -o into a read-only directory (as root: a read-only tmpfs)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
        return [*HOSTSTATE, *args, "-o", str(ro / "x.toml")]
    require(shutil.which("unshare") is not None, "unshare (util-linux) is needed as root")
    inner = " ".join([*HOSTSTATE, *args, "-o", str(ro / "x.toml")])
    return ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro none {ro} && exec {inner}; echo mountfail; exit 99"]


def test_unwritable_directory_is_exit_2_and_leaves_nothing(tmp_path) -> None:
    cmd = _readonly_dir_cmd(tmp_path, ["snap", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    require(proc.returncode != 99, f"cannot mount a read-only tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 2, proc.stderr
    assert "cannot write" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert os.listdir(tmp_path / "ro") == []


def test_bad_root_and_unknown_collector_are_usage_errors(tmp_path) -> None:
    proc = run("snap", "--root", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr
    proc = run("snap", "--only", "sytem")
    assert proc.returncode == 2 and "unknown collector 'sytem'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00\x01\xff", b"[hoststate]\nschema = 99\n", b"\xef\xbb\xbf[hoststate]\n", b"[tool.x]\na=1\n",
     b'[hoststate]\nschema = "one"\n', b"[hoststate\n"],
)
def test_show_bad_files_one_line_exit_2(tmp_path, content: bytes) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    proc = run("show", str(bad))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("hoststate: ")
    assert "Traceback" not in proc.stderr


def test_show_missing_file_and_directory(tmp_path) -> None:
    proc = run("show", str(tmp_path / "missing.toml"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    proc = run("show", str(tmp_path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_show_text_and_json(tmp_path) -> None:
    out = tmp_path / "s.toml"
    assert run("snap", "-o", str(out), "--root", str(HOSTS / "epyc-amd"), "--only", "system").returncode == 0
    text = run("show", str(out))
    assert text.returncode == 0
    assert "AMD EPYC 9654" in text.stdout and "0-95: performance, 96-191: powersave" in text.stdout
    js = run("show", "--format", "json", str(out))
    import json

    data = json.loads(js.stdout)
    assert data["system"]["cpu"]["threads"] == 192
    assert data["hoststate"]["taken_at"].endswith("+00:00")


def test_show_imports_neither_deepdiff_nor_pynvml(tmp_path) -> None:
    out = tmp_path / "s.toml"
    assert run("snap", "-o", str(out), "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system").returncode == 0
    code = (
        "import sys; from hoststate.cli import main\n"
        f"sys.argv=['hoststate','show',{str(out)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in ('deepdiff','pynvml','psutil')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED []" in proc.stdout, proc.stdout + proc.stderr


def test_python_dash_m_and_help() -> None:
    proc = run("--help")
    assert proc.returncode == 0 and "snap" in proc.stdout and "show" in proc.stdout
    proc = run("snap", "--help")
    assert "--root" in proc.stdout and "--vllm-cmd" in proc.stdout and "--force" in proc.stdout
