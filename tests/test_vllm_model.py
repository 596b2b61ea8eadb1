"""The model's config.json is read with the right rights and inside the right root.

A running server's Hugging Face cache belongs to its user: hoststate (root) reads it only as that
process could. A captured tree's cache is read inside ``--root``; a link in it never reaches the
host. The probe is ``--enable-expert-parallel`` on a dense model: vLLM refuses it, so hoststate
records a refusal when it read the config, and an assumption (``declared_assumes``) when it did not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate import snapshot
from hoststate.collectors.vllm import read_input_file
from hoststate.collectors.vllm.model import read_facts
from tests.conftest import PYTHONPATH, require

DENSE = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8}
MOE = {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "num_key_value_heads": 8}
SERVE = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
SYSTEM_PYTHON = "/usr/bin/python3"  # reachable for the nobody user


def _hub(cache: Path, repo: str, config: dict, *, link: str | None = None) -> Path:
    """A cache laid out as huggingface_hub lays it out: refs/main, snapshots/<rev>/config.json as a
    relative link to blobs/<sha> (or to ``link`` when given)."""
    base = cache / ("models--" + repo.replace("/", "--"))
    rev = "a" * 40
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(rev)
    (base / "blobs").mkdir()
    (base / "blobs" / "b1").write_text(json.dumps(config))
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(link or "../../blobs/b1")
    return base / "blobs" / "b1"


def _snap(tmp: Path, *args: str) -> dict:
    out = tmp / f"snap-{len(list(tmp.glob('snap-*')))}.toml"
    done = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-o", str(out), "--only", "vllm", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH, "HF_HOME": str(tmp / "no-cache")})
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return snapshot.loads(out.read_text())


def test_facts_come_from_a_hub_cache_through_its_blob_links(tmp_path):
    _hub(tmp_path / "hub", "org/moe", MOE)
    facts = read_facts("org/moe", {"HF_HUB_CACHE": str(tmp_path / "hub")}, read_input_file)
    assert (facts.moe, facts.pooling, facts.kv_heads) == (True, False, 8)
    assert facts.source.endswith("/config.json")
    missing = read_facts("org/other", {"HF_HUB_CACHE": str(tmp_path / "hub")}, read_input_file)
    assert missing.moe is None and "models--org--other/refs/main" not in missing.source
    assert "org/other's config.json could not be read" in missing.source


def test_a_model_directory_is_read_before_any_cache(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(DENSE))
    _hub(tmp_path / "hub", "org/m", MOE)
    facts = read_facts(str(tmp_path / "m"), {"HF_HUB_CACHE": str(tmp_path / "hub")}, read_input_file)
    assert facts.moe is False


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_nobody_servers_cache_is_read_only_as_that_user_could(tmp_path, shared_dir, mode):
    require(os.geteuid() == 0, "only root can start a server as another user (CI runs as root)")
    blob = _hub(shared_dir / "hf" / "hub", "org/dense", DENSE)
    for path in [shared_dir / "hf", *sorted((shared_dir / "hf").rglob("*"))]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    blob.chmod(mode)
    (shared_dir / "serve").write_text(SERVE)
    child = subprocess.Popen(["vllm", "serve", "org/dense", "--enable-expert-parallel"], executable=SYSTEM_PYTHON,
                             cwd=shared_dir, env={"PATH": "/usr/bin:/bin", "HF_HOME": str(shared_dir / "hf")},
                             user=65534, group=65534, extra_groups=[], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        cudagraph = _snap(tmp_path, "--vllm-pid", str(child.pid))["vllm"]["cudagraph"]
    finally:
        child.kill()
        child.wait(timeout=30)
    if mode == 0o600:  # root could read it; the server could not, so neither does hoststate
        assert "refused" not in cudagraph
        assert "not readable by the process's user (uid 65534)" in " ".join(cudagraph["declared_assumes"])
    else:
        assert "experts" in cudagraph["refused"]
        assert "declared_assumes" not in cudagraph


def test_a_link_in_a_captured_tree_never_reaches_the_host(tmp_path):
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    (root / "proc").mkdir()
    outside = tmp_path / "host-config.json"
    outside.write_text(json.dumps(DENSE))
    _hub(root / "hf" / "hub", "org/dense", DENSE, link=str(outside))  # absolute: the host's file, not the tree's
    cmd = "HF_HOME=/hf vllm serve org/dense --enable-expert-parallel"
    cudagraph = _snap(tmp_path, "--root", str(root), "--vllm-cmd", cmd, "--vllm-version", "0.12.0")["vllm"]["cudagraph"]
    assert "refused" not in cudagraph and "declared_assumes" in cudagraph
    # the same tree with the file inside it is read: the check above can fail
    inside = root / str(outside).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text(json.dumps(DENSE))
    cudagraph = _snap(tmp_path, "--root", str(root), "--vllm-cmd", cmd, "--vllm-version", "0.12.0")["vllm"]["cudagraph"]
    assert "experts" in cudagraph["refused"]
