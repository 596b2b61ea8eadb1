"""The env and packages collectors: allow-list, redaction, importlib.metadata only."""

from __future__ import annotations

import subprocess
import sys

from hoststate import snapshot
from hoststate.collectors import Context, packages
from hoststate.collectors import env as env_collector


def test_env_keeps_the_allow_list_and_redacts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("VLLM_API_KEY", "sk-abcdefghijklmnop1234")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrst")
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("HOME_SOMETHING", "x")
    sec = env_collector.collect(Context(root="/nonexistent"))  # read from this process also under --root
    assert sec.data["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert sec.data["NCCL_P2P_DISABLE"] == "1"
    assert sec.data["TOKENIZERS_PARALLELISM"] == "false"
    assert sec.data["VLLM_API_KEY"] == "<redacted>"
    assert "HF_TOKEN" not in sec.data and "HOME_SOMETHING" not in sec.data
    text = snapshot.to_toml({"env": sec.data})
    assert "sk-abcdefghijklmnop1234" not in text and "hf_abcdef" not in text


def test_packages_reads_metadata_of_this_interpreter():
    sec = packages.collect(Context())
    # hoststate itself is installed in the test environment and is part of the recorded stack.
    from importlib import metadata

    assert sec.data.get("hoststate") == metadata.version("hoststate")
    assert all(isinstance(v, str) for v in sec.data.values())
    assert "torch" not in sys.modules  # never imported to learn its version


def test_packages_of_another_interpreter_and_a_broken_one(tmp_path):
    report, err = packages.of_interpreter(sys.executable)
    assert err is None and report["executable"] and isinstance(report["packages"], dict)
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    report, err = packages.of_interpreter(str(bad))
    assert report == {} and err.startswith("exit 3")
    report, err = packages.of_interpreter(str(tmp_path / "missing"))
    assert err == "ENOENT"


def test_packages_script_runs_standalone():
    done = subprocess.run([sys.executable, "-I", "-c", packages.SCRIPT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and '"packages"' in done.stdout


def test_packages_skipped_under_root():
    assert packages.collect(Context(root="/nonexistent")).status == "skipped"
